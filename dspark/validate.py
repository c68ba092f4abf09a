"""Everything read from disk is checked here before anything is allocated: types, ranges
generous for real models and refusing the absurd, in one place, each failure one sentence
(``DsparkError``) naming the file, the key and the value.
"""

from __future__ import annotations

import math
from pathlib import Path

from .errors import DsparkError

#: key -> (lo, hi): what a real drafter or target config may say. The largest published Gemma-4
#: has 60 layers, 5376 hidden, a 262,144 vocabulary and 16-slot DFlash blocks; these bounds
#: leave room for ten times that and stop a crafted file from asking for terabytes.
LIMITS = {
    "hidden_size": (1, 65_536),
    "num_hidden_layers": (1, 512),
    "num_attention_heads": (1, 1_024),
    "num_key_value_heads": (1, 1_024),
    "head_dim": (1, 4_096),
    "intermediate_size": (1, 1_048_576),
    "vocab_size": (2, 4_194_304),
    "draft_vocab_size": (2, 4_194_304),
    "block_size": (1, 64),
    "draft_layers": (1, 64),
    "markov_rank": (0, 65_536),
    "mask_token_id": (0, 4_194_303),
    "tap_layer": (0, 511),
    "taps": (1, 64),
    "sliding_window": (1, 10_000_000),
    "max_position_embeddings": (1, 100_000_000),
    "rope_theta": (1e-6, 1e12),
    "rms_norm_eps": (1e-12, 1.0),
    "softcap": (0.0, 1e6),
    "scale": (1e-6, 1e6),
    "group_size": (1, 4_096),
    "bits": (1, 8),
}


class Fields:
    """Typed reads from one config dict, with the file named in every error."""

    def __init__(self, config: dict, where: str | Path):
        if not isinstance(config, dict):
            raise DsparkError(f"{where} does not hold a JSON object")
        self.config, self.where = config, where

    def _fail(self, key: str, value, want: str) -> DsparkError:
        return DsparkError(f"{self.where}: {key} is {value!r}, expected {want}")

    def has(self, key: str) -> bool:
        return self.config.get(key) is not None

    def int(self, key: str, limit: str | None = None, default=None, config: dict | None = None) -> int:
        v = (config if config is not None else self.config).get(key, default)
        if v is None:
            raise DsparkError(f"{self.where} has no {key}")
        if isinstance(v, bool) or not isinstance(v, int):
            raise self._fail(key, v, "an integer")
        lo, hi = LIMITS[limit or key]
        if not lo <= v <= hi:
            raise self._fail(key, v, f"an integer between {lo} and {hi}")
        return v

    def float(self, key: str, limit: str, default=None, config: dict | None = None) -> float:
        v = (config if config is not None else self.config).get(key, default)
        if v is None:
            raise DsparkError(f"{self.where} has no {key}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self._fail(key, v, "a finite number")
        lo, hi = LIMITS[limit]
        if not lo <= v <= hi:
            raise self._fail(key, v, f"a number between {lo:g} and {hi:g}")
        return float(v)

    def bool(self, key: str, default: bool, config: dict | None = None) -> bool:
        v = (config if config is not None else self.config).get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self._fail(key, v, "true or false")
        return v

    def ints(self, key: str, limit: str, config: dict | None = None) -> tuple[int, ...]:
        v = (config if config is not None else self.config).get(key)
        if not isinstance(v, list) or not v:
            raise self._fail(key, v, "a non-empty list of layer indices")
        lo, hi = LIMITS["taps"]
        if len(v) > hi:
            raise self._fail(key, f"{len(v)} entries", f"at most {hi}")
        for x in v:
            if isinstance(x, bool) or not isinstance(x, int) or not LIMITS[limit][0] <= x <= LIMITS[limit][1]:
                raise self._fail(key, v, f"integers between {LIMITS[limit][0]} and {LIMITS[limit][1]}")
        if len(set(v)) != len(v):
            raise self._fail(key, v, "distinct layer indices")
        return tuple(v)

    def dict(self, key: str, config: dict | None = None) -> dict:
        v = (config if config is not None else self.config).get(key)
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise self._fail(key, v, "a JSON object")
        return v


FLOATS = ("F32", "F16", "BF16")


def check_shapes(weights_header: dict, expected: dict[str, tuple], where: str | Path) -> None:
    """Compare tensor names and shapes (from a safetensors header or loaded arrays) with what a
    config implies, before the tensors are read."""
    have = {k: tuple(v["shape"] if isinstance(v, dict) else v.shape) for k, v in weights_header.items()
            if k != "__metadata__"}
    missing = sorted(set(expected) - set(have))
    extra = sorted(set(have) - set(expected))
    if missing or extra:
        raise DsparkError(f"{where} does not match its config.json (missing {missing[:3]}, unexpected {extra[:3]})")
    for k, shape in expected.items():
        if have[k] != tuple(shape):
            raise DsparkError(f"{where}: {k} has shape {list(have[k])}, its config.json implies {list(shape)}")
        dtype = weights_header[k]["dtype"] if isinstance(weights_header[k], dict) else None
        module = k.rsplit(".", 1)[0]
        packed = module + ".scales" in have and (k.endswith((".scales", ".biases")) or dtype == "U32")
        if dtype is not None and dtype not in FLOATS and not packed:
            raise DsparkError(f"{where}: {k} is stored as {dtype}, expected a floating-point tensor")

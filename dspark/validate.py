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
    "draft_window_size": (1, 100_000_000),  # DFlash 2: committed rows a block sees
    "conv_kernel_size": (1, 64),  # DFlash 2's causal convolutions, at most a block long
    "conv_group_size": (1, 65_536),
    "selector_rank": (1, 65_536),
    "selector_top_k": (1, 4_194_304),
    "max_position_embeddings": (1, 100_000_000),
    "rope_theta": (1.0, 1e12),  # a base below 1 turns the rotary frequencies upside down
    "rms_norm_eps": (1e-12, 1.0),
    "softcap": (0.0, 1e6),  # 0: no soft-cap (the published formats' way of saying none)
    "logit_softcap": (1e-3, 1e6),  # a soft-cap that is applied: tanh(x / cap) * cap
    "scale": (1e-6, 1e6),
    "group_size": (1, 4_096),
    "bits": (1, 8),
    "fraction": (1e-6, 1.0),  # a share of the head that is rotated
    "token_id": (0, 4_194_303),
    "layer_count": (0, 511),  # a number of layers that may be 0 (KV-shared ones)
    "width": (0, 65_536),  # a size that may be 0 (off)
    "experts": (1, 4_096),
    "rope_factor": (1e-6, 1e6),
}


class Fields:
    """Typed reads from one config dict, with the file named in every error."""

    def __init__(self, config: dict, where: str | Path):
        if not isinstance(config, dict):
            raise DsparkError(f"{where} does not hold a JSON object")
        self.config, self.where = config, where

    def _fail(self, key: str, value, want: str) -> DsparkError:
        shown = repr(value)
        if len(shown) > 80:  # a crafted value can be megabytes: the sentence quotes its start
            shown = shown[:80] + "…"
        return DsparkError(f"{self.where}: {key} is {shown}, expected {want}")

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
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not _finite(v):
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


def _finite(v) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # an integer beyond float range
        return False


FLOATS = ("F32", "F16", "BF16")  # also modeldir.FLOATS (the bottom of the loading layer, which does not import this)


def check_shapes(weights_header: dict, expected: dict[str, tuple], where: str | Path) -> None:
    """Compare tensor names and shapes (from a safetensors header or loaded arrays) with what a
    config implies, before the tensors are read."""
    have = {
        k: tuple(v["shape"] if isinstance(v, dict) else v.shape)
        for k, v in weights_header.items()
        if k != "__metadata__"
    }
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


#: What one phase of a round may cost, in milliseconds (a day).
MAX_COST_MS = 86_400_000.0


def costs_problem(d, max_threads: int = 1024) -> str | None:
    """What is wrong with a costs record (``dspark.costs.Costs.to_dict``: a cached file, or the
    costs a benchmark summary carries), or None: times finite and positive, one verify time per
    width up to the largest block, BLAS thread counts this machine can run."""
    if not isinstance(d, dict):
        return "it is not a JSON object"

    def ms(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and _finite(v) and 0 < v <= MAX_COST_MS

    verify = d.get("verify_ms")
    if not isinstance(verify, list) or not 1 <= len(verify) <= LIMITS["block_size"][1] + 1 or not all(map(ms, verify)):
        return f"verify_ms must be 1 to {LIMITS['block_size'][1] + 1} times in milliseconds"
    for key in ("draft_ms", "step_ms"):
        if not ms(d.get(key)):
            return f"{key} must be a time in milliseconds"
    steps = d.get("draft_steps_ms", [])
    if (
        not isinstance(steps, (list, tuple))
        or len(steps) > LIMITS["block_size"][1]
        or not all(ms(s) or (type(s) in (int, float) and s == 0) for s in steps)
    ):
        return f"draft_steps_ms must be up to {LIMITS['block_size'][1]} times in milliseconds"
    threads = d.get("threads", {})
    if (
        not isinstance(threads, dict)
        or len(threads) > 16
        or not all(isinstance(k, str) and type(v) is int and 1 <= v <= max_threads for k, v in threads.items())
    ):
        return f"threads must map phases to BLAS thread counts between 1 and {max_threads}"
    context = d.get("context", 0)
    if type(context) is not int or not 0 <= context <= LIMITS["max_position_embeddings"][1]:
        return "context must be a number of tokens"
    for key in ("measured_at", "key"):
        if not isinstance(d.get(key, ""), str) or len(d.get(key, "")) > 200:
            return f"{key} must be a short text"
    return None


def calibration_temps(value, where) -> list[float] | None:
    """A drafter's confidence calibration (per-position temperatures the confidence logits are
    divided by), or None: a list of at most one per block slot, each a finite positive number
    (0 would divide by zero, a string would reach MLX)."""
    if value is None:
        return None
    hi = LIMITS["block_size"][1] + 1
    if (
        not isinstance(value, list)
        or len(value) > hi
        or not all(
            isinstance(t, (int, float)) and not isinstance(t, bool) and _finite(t) and 1e-3 <= t <= 1e3 for t in value
        )
    ):
        shown = repr(value)[:80]
        raise DsparkError(f"{where}: calibration is {shown}, expected at most {hi} temperatures between 0.001 and 1000")
    return [float(t) for t in value]

"""A drafter's profile: the acceptance it reaches, and on what, so a diagnosis can say what it
should reach here.

A profile holds the per-position acceptance measured with the real greedy loop on held-out
text, the target it was measured on (its id and :func:`target_fingerprint`), the prompt style
(in the target's chat template or not, thinking on or not), the block size and the longest
context the drafter was trained on. Where it comes from, first found first:

1. ``dspark diagnose --record``: kept with the user's data (:func:`recorded_dir`), never in the
   drafter's directory, under the drafter's own fingerprint (:func:`drafter_fingerprint`), so a
   retrained drafter is not compared with an old record;
2. the drafter's directory, ``dspark-profile.json``: written by ``dspark train`` after its
   held-out evaluation and by ``dspark calibrate``;
3. an older training's ``train_report.json`` (its held-out figures, the drafter's recorded
   target weights).

Every file is read through ``dspark.reading`` and written whole (``dspark.files``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from platformdirs import user_data_dir

from .errors import DsparkError
from .files import write_text
from .reading import read_json

PROFILE_FILE = "dspark-profile.json"
#: What a training run writes (dspark.training.report); read here for drafters trained before profiles.
REPORT_FILE = "train_report.json"
VERSION = 1
MAX_BYTES = 1 << 20


@dataclass(frozen=True, kw_only=True)
class Profile:
    per_position_acceptance: tuple[float, ...]  # greedy, every draft verified (dspark.metrics)
    block_size: int  # drafted tokens per round it was measured with
    target_id: str | None  # the target's architecture and tokenizer (dspark.target.Target.target_id)
    target_fingerprint: str | None  # its weights (target_fingerprint)
    templated: bool | None  # prompts in the target's chat template (None: the target has none, or unknown)
    thinking: bool | None  # thinking on in that template (None: not templated, no thinking switch, or unknown)
    context_length: int | None  # the longest context (tokens) it was trained on (None: unknown)
    source: str  # "training", "calibrate", "recorded", "train_report.json"
    prompts: int = 0
    rounds: int = 0
    # its weights, finer (dspark.target.Target.weights_digest: every parameter sampled; None in
    # profiles written before it was kept)
    target_digest: str | None = None

    def to_dict(self) -> dict:
        return {"version": VERSION, **asdict(self), "per_position_acceptance": list(self.per_position_acceptance)}

    @classmethod
    def from_dict(cls, d, where) -> Profile:
        """A profile read from a file, checked field by field (one sentence naming ``where``)."""

        def bad(what: str):
            return DsparkError(f"{where} is not a drafter profile ({what}): delete it, or record it again")

        if not isinstance(d, dict) or d.get("version") != VERSION:
            raise bad(f"version {d.get('version') if isinstance(d, dict) else None!r}, expected {VERSION}")
        acc = d.get("per_position_acceptance")
        if (
            not isinstance(acc, list)
            or not 1 <= len(acc) <= 64
            or not all(type(x) in (int, float) and 0.0 <= x <= 1.0 for x in acc)
        ):
            raise bad("per_position_acceptance is not 1 to 64 shares between 0 and 1")
        for key, kinds in (
            ("block_size", (int,)),
            ("context_length", (int, type(None))),
            ("prompts", (int,)),
            ("rounds", (int,)),
            ("templated", (bool, type(None))),
            ("thinking", (bool, type(None))),
            ("target_id", (str, type(None))),
            ("target_fingerprint", (str, type(None))),
            ("target_digest", (str, type(None))),
            ("source", (str,)),
        ):
            value = d.get(key, 0 if key in ("prompts", "rounds") else None)
            if (
                type(value) not in kinds
                or (isinstance(value, str) and len(value) > 200)
                or (type(value) is int and not 0 <= value <= 10**9)
            ):
                raise bad(f"{key} is {json.dumps(value)[:40]}")
        if not 1 <= d["block_size"] <= 64:
            raise bad(f"block_size is {d['block_size']}")
        return cls(
            per_position_acceptance=tuple(float(x) for x in acc),
            block_size=d["block_size"],
            target_id=d.get("target_id"),
            target_fingerprint=d.get("target_fingerprint"),
            templated=d.get("templated"),
            thinking=d.get("thinking"),
            context_length=d.get("context_length"),
            source=d["source"],
            prompts=d.get("prompts", 0),
            rounds=d.get("rounds", 0),
            target_digest=d.get("target_digest"),
        )


# ----------------------------------------------------------------------------- fingerprints
def target_fingerprint(target) -> str:
    """The one fingerprint of a target's weights: ``Target.weights_fingerprint``, a hash of its
    norm weights rounded to 3 decimals. Cheap (a few vectors), deterministic, and the same for a
    checkpoint stored in any precision or quantization (mlx-lm keeps norms in floating point), while
    two trained checkpoints of one architecture (a base and its -it, two fine-tunes) differ in
    every norm. It is what drafters record as ``target_weights``; the architecture and tokenizer
    are ``target_id``'s."""
    return target.weights_fingerprint


def drafter_fingerprint(drafter) -> str:
    """A drafter's weights, for keying its recorded profile: every parameter's name, shape and
    dtype, and its first and last 64 values, hashed. A retrained drafter gets another key."""
    import mlx.core as mx  # noqa: PLC0415 (slow: mlx)
    from mlx.utils import tree_flatten  # noqa: PLC0415 (slow: mlx)

    h = hashlib.sha256()
    for name, v in sorted(tree_flatten(drafter.net.parameters()), key=lambda kv: kv[0]):
        flat = v.reshape(-1)
        sample = mx.concatenate([flat[:64], flat[-64:]])
        if mx.issubdtype(sample.dtype, mx.floating):  # numpy has no bfloat16
            sample = sample.astype(mx.float32)
        h.update(f"{name}:{tuple(v.shape)}:{v.dtype};".encode() + np.array(sample).tobytes())
    return h.hexdigest()[:20]


def measured(
    per_position,
    target,
    *,
    block_size: int,
    templated: bool | None,
    thinking: bool | None,
    context_length: int | None,
    source: str,
    prompts: int = 0,
    rounds: int = 0,
) -> Profile:
    """A profile of acceptance ``per_position`` measured on ``target`` (its id and fingerprint
    recorded) with ``block_size`` drafts a round, on ``prompts`` prompts over ``rounds`` rounds in
    the prompt style ``templated`` / ``thinking`` (None: unknown), by ``source`` (the
    :class:`Profile` field); ``context_length``: the longest context trained on (None: unknown)."""
    return Profile(
        per_position_acceptance=tuple(float(x) for x in per_position),
        block_size=int(block_size),
        target_id=target.target_id,
        target_fingerprint=target_fingerprint(target),
        target_digest=target.weights_digest,
        templated=templated,
        thinking=thinking,
        context_length=context_length,
        source=source,
        prompts=prompts,
        rounds=rounds,
    )


# ----------------------------------------------------------------------------- where profiles live
def recorded_dir() -> Path:
    """Where ``dspark diagnose --record`` keeps profiles: the user's dspark data folder
    (``DSPARK_PROFILES_DIR`` overrides it), beside the costs cache's user folders."""
    return Path(os.environ.get("DSPARK_PROFILES_DIR") or Path(user_data_dir("dspark", "DSpark")) / "profiles")


def recorded_path(drafter) -> Path:
    return recorded_dir() / f"{drafter_fingerprint(drafter)}.json"


def read_file(path: Path) -> Profile:
    return Profile.from_dict(read_json(path, MAX_BYTES, "drafter profile", allow_nan=False), path)


def find(directory: str | Path | None, drafter) -> Profile | None:
    """The profile a diagnosis compares with (see the module docstring for the order), None
    when there is none. A damaged profile file is one sentence."""
    path = recorded_path(drafter)
    if path.is_file():
        return read_file(path)
    if directory is None:
        return None
    own = Path(directory) / PROFILE_FILE
    if own.is_file():
        return read_file(own)
    return from_report(Path(directory) / REPORT_FILE, drafter)


def from_report(path: Path, drafter) -> Profile | None:
    """A profile from an older ``train_report.json``: its held-out per-position acceptance, its
    settings' longest sequence, the target weights the drafter recorded; None when it has none."""
    if not path.is_file():
        return None
    try:
        report = read_json(path, 16 * MAX_BYTES, "training report", allow_nan=False)
        held, s = report["heldout"], report.get("settings") or {}
        acc = [float(x) for x in held["per_position_acceptance"]]
        context = longest_context(
            s.get("seq_len"), s.get("prompt_len"), s.get("long_prompts"), s.get("long_prompt_len")
        )
        return Profile.from_dict(
            {
                "version": VERSION,
                "per_position_acceptance": acc,
                "block_size": len(acc),
                "source": REPORT_FILE,
                "target_id": report.get("target_id"),
                "target_fingerprint": getattr(drafter, "target_weights", None),
                "templated": None,
                "thinking": None,
                "context_length": context,
                "prompts": int(held.get("prompts", 0)),
                "rounds": int(held.get("rounds", 0)),
            },
            path,
        )
    except (DsparkError, KeyError, TypeError, ValueError):
        return None  # not a report with held-out figures: no profile


def longest_context(seq_len, prompt_len=None, long_prompts=None, long_prompt_len=None) -> int | None:
    """The longest context (tokens) a training run's sequences reach: ``seq_len``, or, with long
    prompts, the longest such prompt continued as far as a short one (``dspark.training.data``)."""
    if type(seq_len) is not int:
        return None
    if long_prompts and type(long_prompt_len) is int and type(prompt_len) is int:
        return max(seq_len, long_prompt_len + seq_len - prompt_len)
    return seq_len


def write_own(directory: str | Path, profile: Profile) -> Path:
    """The profile into a drafter's directory (training, calibration)."""
    path = Path(directory) / PROFILE_FILE
    write_text(path, json.dumps(profile.to_dict(), indent=1) + "\n")
    return path


def write_recorded(drafter, profile: Profile) -> Path:
    """The profile with the user's data, never in the drafter's directory."""
    path = recorded_path(drafter)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DsparkError(f"cannot create {path.parent} ({e.strerror or e})") from None
    write_text(path, json.dumps(profile.to_dict(), indent=1) + "\n")
    return path


__all__ = [
    "PROFILE_FILE",
    "Profile",
    "drafter_fingerprint",
    "find",
    "from_report",
    "longest_context",
    "measured",
    "read_file",
    "recorded_dir",
    "recorded_path",
    "target_fingerprint",
    "write_own",
    "write_recorded",
]

"""What ``--resume`` checks before it continues a run: the checkpoint's header read alone (the
drafter's shape and the settings it was trained with, its step), the settings a resumed run may
change and those it may not, and the texts its saved sequences were made from."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from ..config import DflashConfig, default_taps
from ..errors import DsparkError
from ..modeldir import read_header
from ..reading import parse_json
from ..version import __version__
from .texts import texts_digest
from .trainer import STATE_FILE, STATE_VERSION, TRAIN_DIR, TrainSettings

DATA_FILE = f"{TRAIN_DIR}/train_data.safetensors"


#: Settings a resumed run may change; every other one must be what the checkpoint was trained with.
RESUMABLE = frozenset(
    {
        "steps",
        "time_budget_minutes",
        "checkpoint_minutes",
        "eval_prompts",
        "eval_tokens",
        "eval_every",
        "feature_cache_mb",
        "compile",
        "rank_timeout",
    }
)


def saved_run(out: Path) -> tuple[dict, dict] | None:
    """(drafter config, settings) a checkpoint in ``out`` was trained with, from its header
    alone; None when there is no checkpoint."""
    meta = _saved_meta(out)
    return None if meta is None else (dict(meta["drafter"]), dict(meta["settings"]))


def saved_step(out: Path) -> int | None:
    """The step the checkpoint in ``out`` was taken at (a finished run keeps its last one, so it
    can be trained further); None when there is no checkpoint, 0 when the step is unreadable
    (resuming it then says what is wrong)."""
    meta = _saved_meta(out)
    if meta is None:
        return None
    step = meta.get("step")
    return step if type(step) is int and step >= 0 else 0


def saved_start(out: Path) -> dict | None:
    """What the checkpoint in ``out`` records of the drafter its fine-tune started from (its
    folder, format, kind and target weights); None for a run started from new weights."""
    meta = _saved_meta(out)
    start = meta.get("from") if meta is not None else None
    return start if isinstance(start, dict) else None


def _saved_meta(out: Path) -> dict | None:
    path = out / STATE_FILE
    if not path.is_file():
        return None
    try:
        meta = parse_json(read_header(path)["__metadata__"]["meta"], f"{path} (its metadata)")
        if not isinstance(meta["drafter"], dict) or not isinstance(meta["settings"], dict):
            raise TypeError
    except (KeyError, TypeError, ValueError):
        raise DsparkError(
            f"{path} is not a readable training checkpoint: start over without --resume, or remove it"
        ) from None
    check_version(out, meta)
    return meta


def check_version(out: Path, meta: dict) -> None:
    """Refuse a checkpoint whose layout version this dspark does not read (a newer project's, or
    no number at all), naming both versions; one without a version is 1, what 0.1.0 wrote."""
    version = meta.get("version", 1)
    if type(version) is int and 1 <= version <= STATE_VERSION:
        return
    writer = meta.get("dspark")
    by = f"dspark {str(writer)[:20]}" if isinstance(writer, str) else "another version of dspark"
    raise DsparkError(
        f"the run in {out} was written by {by} (training state version {str(version)[:20]}); this dspark "
        f"{__version__} reads versions 1 to {STATE_VERSION}: continue it with the dspark that wrote it, or start "
        f"over in a new --out"
    )


def check_resume(out: Path, cfg: DflashConfig, settings: TrainSettings, target_layers: int) -> None:
    """Refuse to resume a checkpoint with other shapes or settings, naming the first difference."""
    drafter, saved = saved_run(out)
    want = asdict(cfg)
    if not want["tap_layers"]:
        want["tap_layers"] = list(default_taps(target_layers))
    for key, value in want.items():
        have = drafter.get(key, getattr(DflashConfig(), key))  # a field added since: its default
        if (list(have) if isinstance(have, (list, tuple)) else have) != (
            list(value) if isinstance(value, (list, tuple)) else value
        ):
            raise changed(out, key, have, value)
    check_settings(out, saved, settings)


def changed(out: Path, key: str, have, value) -> DsparkError:
    """The refusal of a resumed run whose ``key`` was ``have`` and is asked to be ``value``."""
    return DsparkError(
        f"--resume: the run in {out} was trained with {key} {have!r}, not {value!r} "
        f"(leave the option out to continue it, or train into a new --out)"
    )


def check_settings(out: Path, saved: dict, settings: TrainSettings) -> None:
    """Refuse a setting the checkpoint in ``out`` was trained with (``saved``) that a resumed run
    may not change: every one not in :data:`RESUMABLE`."""
    for key, value in asdict(settings).items():
        if key not in RESUMABLE and key in saved and saved[key] != value:
            raise changed(out, key, saved[key], value)


def check_resume_data(src: Path, texts) -> str | None:
    """Refuse to resume the run in ``src`` on other ``texts`` (``--data`` given again) than its
    saved sequences were made from: the run would go on training on the saved ones, never on
    what ``--data`` names now. A note (returned) when the saved data does not say (an older run)."""
    path = src / DATA_FILE
    if not (src / STATE_FILE).is_file() or not path.is_file():
        return None  # nothing is resumed from saved data: the texts given are the ones used
    meta = read_header(path).get("__metadata__")
    recorded = meta.get("texts") if isinstance(meta, dict) else None
    if recorded is None:
        return f"--resume continues on the sequences saved in {path}; --data is not read again"
    if recorded != texts_digest(texts):
        raise DsparkError(
            f"--resume: the run in {src} was trained on other texts than --data names now (its sequences are "
            f"saved in {path}): leave --data out to continue it, or train into a new --out"
        )
    return None


__all__ = [
    "DATA_FILE",
    "RESUMABLE",
    "changed",
    "check_resume",
    "check_resume_data",
    "check_settings",
    "check_version",
    "saved_run",
    "saved_start",
    "saved_step",
]

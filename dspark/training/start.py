"""The drafter a fine-tune starts from (``dspark train --from DRAFTER``): any drafter the project
loads (a block drafter in dspark's own, speculators', z-lab's or DeepSpec's format, an EAGLE-3
head, a Gemma-4 assistant), checked against the target before anything is trained, whose kind,
format and shape the run keeps. What it was (its folder, format, kind and the fingerprint of
the target weights it was trained against) is recorded in every checkpoint, so ``--resume``
continues the fine-tune without ``--from`` and refuses another one.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from ..config import DflashConfig
from ..drafter import DflashDrafter
from ..errors import DrafterMismatchError, DsparkError
from ..files import atomic_write
from ..formats import assistant, eagle3
from ..formats.base import EXTENSION
from ..loading import load_drafter, read_drafter_config
from .heads import HeadConfig

#: The key under which a checkpoint and the report record the starting drafter.
FROM_KEY = "from"
#: Published block formats by the name ``DflashConfig.format`` gives them.
BLOCK_FORMATS = {"speculators": "speculators", "zlab-dflash": "zlab", "deepspec": "deepspec"}
#: Files of a drafter's folder that are no part of its weights or config, carried to the
#: fine-tuned one so it ships as the starting drafter did.
COMPANIONS = ("README.md", "LICENSE", "LICENSE.md", "LICENSE.txt")
#: The largest companion file copied (a README, a licence).
COMPANION_BYTES = 1 << 20


@dataclass
class Start:
    """The starting drafter, loaded for this target: its folder, the drafter itself, its
    ``kind`` (block, eagle3 or assistant), its ``shape`` (the ``DflashConfig`` or ``HeadConfig``
    fields the run is recorded with) and the target weights it was trained against."""

    path: Path
    drafter: object
    kind: str
    shape: dict
    target_weights: str | None

    def record(self) -> dict:
        """What a checkpoint and the report keep of it."""
        return {
            "path": str(self.path),
            "format": self.drafter.format,
            "kind": self.kind,
            "target_weights": self.target_weights,
        }

    def config(self):
        """The run's drafter settings: a ``DflashConfig`` (block) or a ``HeadConfig``."""
        if self.kind == "block":
            return DflashConfig.from_dict(self.shape)
        return HeadConfig.from_dict(self.shape)


def load_start(path: str | Path, target, *, say) -> Start:
    """The drafter in ``path`` ready to be fine-tuned against ``target``, or one sentence saying
    why it cannot be: not a drafter, made for another shape of target (naming what differs),
    quantized, with a reduced draft vocabulary, or of a layout this trainer cannot train. A
    drafter trained against other weights of this architecture (a fine-tuned Gemma-4) is taken,
    and ``say`` hears so in one line."""
    p, config, fmt = read_drafter_config(path)
    if config.get("quantization"):
        raise DsparkError(
            f"--from: {p} is quantized ({_bits(config['quantization'])}): fine-tune the drafter it was quantized "
            f"from, then quantize the result (dspark quantize)"
        )
    if fmt not in (*BLOCK_FORMATS, "dspark-drafter", eagle3.FORMAT, assistant.FORMAT):
        raise DsparkError(f"--from: {p} is a {fmt} drafter, which dspark train cannot fine-tune")
    try:
        drafter = load_drafter(p, target)
    except DrafterMismatchError as e:
        raise DsparkError(f"--from: {p} was made for another target: {e}") from None
    if getattr(drafter, "draft_to_target", None) is not None:
        raise DsparkError(f"--from: {p} drafts in a reduced vocabulary (a d2t table), which dspark train cannot train")
    if fmt == assistant.FORMAT and drafter.spec.use_ordered_embeddings:
        raise DsparkError(
            f"--from: {p} routes its head through centroids (use_ordered_embeddings), which dspark train cannot train"
        )
    kind = {eagle3.FORMAT: "eagle3", assistant.FORMAT: "assistant"}.get(fmt, "block")
    ext = config.get(EXTENSION) if isinstance(config.get(EXTENSION), dict) else {}
    recorded = config.get("target_weights") if isinstance(drafter, DflashDrafter) else ext.get("target_weights")
    start = Start(
        path=p,
        drafter=drafter,
        kind=kind,
        shape=_shape(drafter, kind, ext.get("trained_as")),
        target_weights=recorded if isinstance(recorded, str) else None,
    )
    _retarget(start, target)
    if start.target_weights and start.target_weights != target.weights_fingerprint:
        say(
            f"--from: {p.name} was trained against other weights of this target's architecture (fingerprint "
            f"{start.target_weights}, this target's {target.weights_fingerprint}): fine-tuning it to these"
        )
    return start


def _bits(q) -> str:
    return f"{q.get('bits')}-bit" if isinstance(q, dict) and "bits" in q else "quantized weights"


def _shape(drafter, kind: str, made) -> dict:
    """The settings the run records for ``drafter``: what dspark wrote when it made it, else read
    from the drafter itself."""
    if isinstance(drafter, DflashDrafter):
        return asdict(drafter.cfg)
    if kind == "block":
        fields = DflashConfig.__dataclass_fields__
        if isinstance(made, dict) and set(made) <= set(fields):
            return {**dict(made), "tap_layers": list(made.get("tap_layers") or drafter.tap_layers)}
        spec = drafter.spec
        windows = [w for w in spec.layout.windows if w]
        return asdict(
            DflashConfig(
                block_size=drafter.block_size,
                num_layers=len(drafter.net.layers),
                tap_layers=tuple(drafter.tap_layers),
                mask_token_id=drafter.mask_token_id,
                markov=bool(spec.markov_rank),
                markov_rank=spec.markov_rank or DflashConfig().markov_rank,
                confidence=spec.confidence,
                context_window=max(windows) if windows else 0,
                format=BLOCK_FORMATS[drafter.format],
            )
        ) | {"tap_layers": list(drafter.tap_layers)}
    if isinstance(made, dict) and made.get("kind") == kind:
        cfg = HeadConfig.from_dict(made)
    else:
        layers = drafter.net.layers if kind == "eagle3" else drafter.net.model.layers
        inner = drafter.config.get("transformer_layer_config" if kind == "eagle3" else "text_config")
        width = inner.get("intermediate_size") if isinstance(inner, dict) else None
        cfg = HeadConfig(
            kind=kind,
            block_size=drafter.block_size,
            num_layers=len(layers),
            intermediate_size=width if type(width) is int else 0,
            tap_layers=tuple(drafter.tap_layers) if kind == "eagle3" else (),
        )
    return {**asdict(cfg), "tap_layers": list(cfg.tap_layers)}


def _retarget(start: Start, target) -> None:
    """The drafter as this run writes it: recording the settings it is trained with (what
    ``--resume`` reads back from the written drafter) and, from its first save on, this target's
    weights as the ones it was trained against."""
    drafter = start.drafter
    drafter.target_weights = target.weights_fingerprint
    if isinstance(drafter, DflashDrafter):
        return
    ext = dict(drafter.config.get(EXTENSION) or {}) if isinstance(drafter.config.get(EXTENSION), dict) else {}
    ext.update(trained_as=start.shape, target_weights=target.weights_fingerprint)
    drafter.config[EXTENSION] = ext


def check_given(start: Start, given: dict, flags: dict) -> None:
    """Refuse a drafter option given with ``--from`` that contradicts the starting drafter's shape,
    naming both values: ``given`` the options written on the command line (destination -> value),
    ``flags`` their flags."""
    have = {**start.shape, "kind": start.kind}
    for name, value in sorted(given.items()):
        if name not in DflashConfig.__dataclass_fields__ and name != "kind":
            continue
        flag = flags.get(name, f"--{name}")
        if name not in have:
            raise DsparkError(
                f"{flag}: the starting drafter {start.path.name} (a {start.kind} drafter) has no such setting; "
                f"leave it out with --from"
            )
        mine = _comparable(have[name])
        if _comparable(value) != mine:
            raise DsparkError(
                f"{flag} {_shown(value)} contradicts the starting drafter's {name.replace('_', ' ')} {_shown(mine)} "
                f"({start.path.name}): a fine-tune keeps its starting drafter's shape, so leave {flag} out"
            )


def _comparable(v):
    return list(v) if isinstance(v, (list, tuple)) else v


def _shown(v) -> str:
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v) or "(none)"
    return str(v)


def check_same_start(recorded: dict | None, path: str | Path, out: Path) -> None:
    """Refuse ``--from`` on ``--resume`` when it names another drafter than the run started from."""
    given = Path(path).expanduser()
    if recorded is None:
        raise DsparkError(
            f"--resume: the run in {out} was not started from a drafter: leave --from out to continue it, or "
            f"fine-tune into a new --out"
        )
    first = Path(recorded.get("path", ""))
    if not _same_folder(first, given):
        raise DsparkError(
            f"--resume: the run in {out} was started from {first}, not --from {given}: leave --from out to "
            f"continue it, or fine-tune into a new --out"
        )


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def copy_companions(start: Start, out: Path) -> None:
    """The starting drafter's README and licence beside the fine-tuned one."""
    for name in COMPANIONS:
        src = start.path / name
        if src.is_file() and not src.is_symlink() and src.stat().st_size <= COMPANION_BYTES:
            atomic_write(out / name, lambda tmp, src=src: shutil.copyfile(src, tmp))


__all__ = ["FROM_KEY", "Start", "check_given", "check_same_start", "copy_companions", "load_start"]

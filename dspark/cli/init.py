"""``dspark init``: an untrained drafter for a target, written whole or not at all."""

from __future__ import annotations

from ..config import DflashConfig
from ..errors import DsparkError
from ..files import output_dir, staged_dir
from ..options import add_options, check_options, from_args
from .say import show

HELP = "write an untrained drafter for a target"


def add_parser(subparsers):
    p = subparsers.add_parser("init", help=HELP)
    p.add_argument("--target", required=True)
    p.add_argument("--out", required=True)
    add_options(p, DflashConfig)
    p.add_argument("--seed", type=int, default=0, help="seed of the initial weights")
    p.add_argument("--force", action="store_true", help="overwrite a non-empty --out")
    return p


def run(a) -> int:
    from ..convert import cannot_carry, new_drafter  # noqa: PLC0415 (slow: mlx, not needed for --help)
    from ..loading import load_target  # noqa: PLC0415 (slow: mlx)

    cfg = from_args(DflashConfig, a)
    check_options(cfg)
    if cannot_carry(cfg):
        raise DsparkError(cannot_carry(cfg))
    out = output_dir(a.out, allow_existing=a.force)
    target = load_target(a.target)
    drafter = new_drafter(target, cfg, seed=a.seed)
    if any(out.iterdir()):  # --force over a drafter: each file is replaced whole
        drafter.save(out)
    else:  # a new drafter appears whole or not at all: a kill leaves no weights without a config
        with staged_dir(out) as tmp:
            drafter.save(tmp)
    show(
        f"wrote an untrained {cfg.format} drafter ({drafter.num_params():,} parameters, taps "
        f"{list(drafter.tap_layers)}) to {out}"
    )
    return 0

"""``dspark costs``: this machine's measured verify and draft costs, which the auto policy reads."""

from __future__ import annotations

import json

from ..options import check_range
from .say import say_printable

HELP = "this machine's measured verify and draft costs (what the auto policy uses)"


def add_parser(subparsers):
    p = subparsers.add_parser("costs", help=HELP)
    p.add_argument("--target", required=True)
    p.add_argument("--drafter", required=True)
    p.add_argument("--block-size", type=int, help="drafted tokens per round (default: the drafter's own)")
    p.add_argument("--remeasure", action="store_true", help="measure again instead of reading the cache")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def run(a) -> int:
    from ..costs import describe, load_or_measure  # noqa: PLC0415 (slow: mlx, not needed for --help)
    from ..loading import load_drafter, load_target  # noqa: PLC0415 (slow: mlx)

    check_range("--block-size", a.block_size, 1, 64)  # as generate's: measuring allocates per width
    target = load_target(a.target, say=say_printable)
    drafter = load_drafter(a.drafter, target, say=say_printable)
    costs = load_or_measure(
        target, drafter, a.block_size or drafter.block_size, remeasure=a.remeasure, say=say_printable
    )
    print(json.dumps(costs.to_dict()) if a.json else describe(costs))
    return 0

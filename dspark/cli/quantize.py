"""``dspark quantize``: a 4- or 8-bit copy of a drafter, in its own format."""

from __future__ import annotations

from .say import show

HELP = "write a 4- or 8-bit copy of a drafter (any format, same format)"


def add_parser(subparsers):
    p = subparsers.add_parser("quantize", help=HELP)
    p.add_argument("dir", help="drafter directory or Hugging Face name")
    p.add_argument("--bits", type=int, choices=[4, 8], required=True)
    p.add_argument(
        "--group-size", type=int, choices=[32, 64, 128], default=64, help="weights that share one scale and bias"
    )
    p.add_argument("--out", required=True, help="directory to write (new or empty)")
    return p


def run(a) -> int:
    from ..convert import quantize_drafter  # noqa: PLC0415 (slow: mlx, not needed for --help)

    r = quantize_drafter(a.dir, a.out, a.bits, a.group_size)
    show(
        f"wrote a {r['bits']}-bit {r['format']} drafter to {a.out}: {r['bytes_before'] / 2**20:.1f} MiB -> "
        f"{r['bytes_after'] / 2**20:.1f} MiB"
    )
    return 0

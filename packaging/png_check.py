"""Is a screenshot a drawn window? ``python3 packaging/png_check.py FILE [WxH] [MIN_COLOURS]``
prints its size and how many colours a grid of its pixels holds, and exits 1 naming the
problem when the size differs from WxH (when given) or there are fewer colours than
MIN_COLOURS (default 20: one flat colour or a blank window has a handful).

Standard library only (the PNG's rows are deflated with a filter per row; Qt writes 8-bit RGB
or RGBA), so the build scripts can run it with any Python 3 on the machine, outside a bundle.
"""

from __future__ import annotations

import struct
import sys
import zlib


def read_png(path: str) -> tuple[int, int, list[bytearray], int]:
    """(width, height, rows of pixel bytes, bytes per pixel) of an 8-bit RGB(A) PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, head = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype = head[:4]
    if depth != 8 or ctype not in (2, 6):
        raise ValueError(f"unexpected PNG kind (depth {depth}, colour type {ctype})")
    bpp = {2: 3, 6: 4}[ctype]
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pred = (
                a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else (b if abs(p - b) <= abs(p - c) else c)
            )
            line[i] = (line[i] + (0, a, b, (a + b) // 2, pred)[f]) & 255
        rows.append(line)
        prev = line
    return w, h, rows, bpp


def colours(rows: list[bytearray], w: int, h: int, bpp: int, step: int = 25) -> int:
    """Distinct RGB colours on a grid of every ``step``-th pixel."""
    return len({bytes(rows[y][x * bpp : x * bpp + 3]) for y in range(0, h, step) for x in range(0, w, step)})


def main(argv: list[str]) -> int:
    path, size = argv[0], argv[1] if len(argv) > 1 and argv[1] != "any" else None
    least = int(argv[2]) if len(argv) > 2 else 20
    try:
        w, h, rows, bpp = read_png(path)
    except (OSError, ValueError, struct.error, zlib.error, TypeError) as e:
        print(f"png_check: {path}: {e}", file=sys.stderr)
        return 1
    n = colours(rows, w, h, bpp)
    print(f"{w}x{h}, {n} colours")
    if size and f"{w}x{h}" != size:
        print(f"png_check: {path} is {w}x{h}, not {size}", file=sys.stderr)
        return 1
    if n < least:
        print(f"png_check: {path} has {n} colours: not a drawn window", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

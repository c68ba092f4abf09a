#!/usr/bin/env bash
# Start a built Linux bundle as a person's machine would: the folder copied elsewhere, started
# from / with a bare environment (no venv, the repository on no path, a fresh HOME), offscreen,
# with --self-test and a screenshot. Fails unless the self-test passes, the screenshot is a
# 1600x1000 PNG, and OpenBLAS and the libraries it links were loaded from the bundle.
# usage: packaging/test_bundle.sh [dist/dspark-studio/dspark-studio]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
exe=$(realpath "${1:-$repo/dist/dspark-studio/dspark-studio}")
tmp=$(mktemp -d)
trap 'status=$?; rm -rf "$tmp"; [ $status = 0 ] && echo "bundle: 1 passed, 0 failed" || echo "bundle: 0 passed, 1 failed"' EXIT
cp -a "$(dirname "$exe")" "$tmp/app"
mkdir "$tmp/home" "$tmp/ld"
shot="$tmp/selftest.png"

cd /
start=$SECONDS
rc=0
line=$(env -i PATH=/usr/bin:/bin HOME="$tmp/home" QT_QPA_PLATFORM=offscreen LD_DEBUG=libs \
       LD_DEBUG_OUTPUT="$tmp/ld/trace" "$tmp/app/$(basename "$exe")" --self-test "$shot") || rc=$?
echo "$line"
[ "$rc" = 0 ] || { echo "test_bundle.sh: the self-test exited $rc" >&2; exit 1; }

# The loader's own record of the files it initialised ("calling init: PATH"): OpenBLAS and what it
# links must come from the copy (its top folder or openblas/), not from the system.
inits=$(grep -ho 'calling init: [^ ]*' "$tmp"/ld/trace.* | sed 's/^calling init: //' | sort -u)
for lib in libblas.so.3 libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
  grep -Eqx "$tmp/app/_internal/(openblas/)?$lib" <<<"$inits" \
    || { echo "test_bundle.sh: $lib was not loaded from the bundle" >&2; exit 1; }
done
grep -q "BLAS OpenBLAS ($tmp/app/_internal/openblas/libblas.so.3" <<<"$line" \
  || { echo "test_bundle.sh: the self-test did not run on the bundled OpenBLAS" >&2; exit 1; }

size=$(od -An -tu1 -j16 -N8 "$shot" 2>/dev/null | awk '{print $1*2^24+$2*2^16+$3*2^8+$4 "x" $5*2^24+$6*2^16+$7*2^8+$8}')
[ "$size" = 1600x1000 ] || { echo "test_bundle.sh: screenshot is ${size:-missing}, not 1600x1000" >&2; exit 1; }
# ... and it shows a window, not one flat colour: count the colours on a grid of its pixels with
# any Python that has zlib (the PNG's rows are deflated; Qt writes 8-bit RGB(A), filter per row)
python=$(command -v python3 || command -v python)
colours=$("$python" - "$shot" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
pos, idat, head = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        head = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
w, h, depth, ctype = head[:4]
bpp = {2: 3, 6: 4}[ctype] if depth == 8 else sys.exit("unexpected PNG depth")
raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        p = a + b - c
        pred = a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else (b if abs(p - b) <= abs(p - c) else c)
        line[i] = (line[i] + (0, a, b, (a + b) // 2, pred)[f]) & 255
    rows.append(line)
    prev = line
print(len({bytes(rows[y][x * bpp:x * bpp + 3]) for y in range(0, h, 25) for x in range(0, w, 25)}))
PY
)
[ "${colours:-0}" -ge 20 ] || { echo "test_bundle.sh: the screenshot has ${colours:-no} colours: not a drawn window" >&2; exit 1; }
mkdir -p "$repo/build" && cp "$shot" "$repo/build/bundle-selftest.png"
echo "test_bundle.sh: ok in $((SECONDS - start)) s from a copy at $tmp/app; screenshot build/bundle-selftest.png" >&2

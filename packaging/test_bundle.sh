#!/usr/bin/env bash
# Start a built Linux bundle as a person's machine would: the folder copied elsewhere, started
# from / with a bare environment (no venv, the repository on no path, a fresh HOME), offscreen,
# with --self-test and a screenshot, then with --check-device (the first-launch GPU check's
# child). Fails unless the self-test passes and made the GPU check, the check answers, the
# screenshot is a 1600x1000 PNG, and OpenBLAS and the libraries it links were loaded from the bundle.
# usage: packaging/test_bundle.sh [dist/dspark-studio/dspark-studio]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
exe=$(realpath "${1:-$repo/dist/dspark-studio/dspark-studio}")
# shellcheck source=packaging/common.sh
. "$repo/packaging/common.sh"
scratch_with_summary bundle
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
grep -q "first-launch GPU check: " <<<"$line" \
  || { echo "test_bundle.sh: the window run did not make the first-launch GPU check" >&2; exit 1; }

# The GPU check's child as a Mac's first launch starts it: this executable with --check-device
# (a frozen bundle has no -m). Without a GPU it answers the CPU, having loaded the bundled demo target.
check=$(env -i PATH=/usr/bin:/bin HOME="$tmp/home" "$tmp/app/$(basename "$exe")" --check-device) \
  || { echo "test_bundle.sh: --check-device failed: $check" >&2; exit 1; }
echo "$check"
grep -q '"outcome": "cpu"' <<<"$check" || { echo "test_bundle.sh: --check-device gave no answer: $check" >&2; exit 1; }

# The Train tab's dspark train, started as the tab starts it in a bundle
train_through_bundle "$tmp/app/$(basename "$exe")" "$tmp/app" "$tmp" \
  || { echo "test_bundle.sh: the bundle cannot train a drafter" >&2; exit 1; }

# The loader's own record of the files it initialised ("calling init: PATH"): OpenBLAS and what it
# links must come from the copy (its top folder or openblas/), not from the system.
inits=$(grep -ho 'calling init: [^ ]*' "$tmp"/ld/trace.* | sed 's/^calling init: //' | sort -u)
for lib in libblas.so.3 libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
  grep -Eqx "$tmp/app/_internal/(openblas/)?$lib" <<<"$inits" \
    || { echo "test_bundle.sh: $lib was not loaded from the bundle" >&2; exit 1; }
done
grep -q "BLAS OpenBLAS ($tmp/app/_internal/openblas/libblas.so.3" <<<"$line" \
  || { echo "test_bundle.sh: the self-test did not run on the bundled OpenBLAS" >&2; exit 1; }

# a 1600x1000 PNG that shows a window, not one flat colour (any Python 3 runs the check)
python=$(command -v python3 || command -v python)
"$python" "$repo/packaging/png_check.py" "$shot" 1600x1000 20 >&2 \
  || { echo "test_bundle.sh: the screenshot is not a drawn 1600x1000 window" >&2; exit 1; }
mkdir -p "$repo/build" && cp "$shot" "$repo/build/bundle-selftest.png"
echo "test_bundle.sh: ok in $((SECONDS - start)) s from a copy at $tmp/app; screenshot build/bundle-selftest.png" >&2

#!/usr/bin/env bash
# Regenerate the pictures of docs/app.md with the demo models (or pass --target DIR --drafter DIR
# ... to use others), headless: a run, a comparison and presentation mode, each at 1600x1000 and
# at 1280x800 (a 13-inch laptop at 2x scale), and a replay of the comparison in presentation
# mode at 1280x800 (no model loaded), and, when BENCH names a `dspark bench` output folder, that
# benchmark on the Compare tab. Live runs: their tok/s are this machine's at that moment.
set -euo pipefail
cd "$(dirname "$0")/.."
export QT_QPA_PLATFORM=offscreen DSPARK_STUDIO_HOME="$(mktemp -d)"
python=${PYTHON:-.venv/bin/python}
run() { "$python" -m dspark_studio --max-tokens "${MAX_TOKENS:-160}" "$@"; }
for size in 1600x1000 1280x800; do
  suffix=$([ "$size" = 1280x800 ] && echo "-1280" || echo "")
  run --size "$size" --screenshot "docs/screenshot$suffix.png" "$@"
  run --size "$size" --screenshot "docs/compare$suffix.png" --compare "$@"
  run --size "$size" --screenshot "docs/presentation$suffix.png" --presentation "$@"
done
recording=$(ls -t "$DSPARK_STUDIO_HOME"/data/runs/*-compare.json | head -1)
"$python" -m dspark_studio --replay "$recording" --presentation --size 1280x800 --screenshot docs/replay-1280.png
if [ -n "${BENCH:-}" ]; then
  "$python" -m dspark_studio --replay "$BENCH/summary.json" --size 1600x1000 --screenshot docs/benchmark.png
fi

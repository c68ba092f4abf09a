#!/usr/bin/env bash
# Regenerate the pictures of docs/app.md with the demo models (or pass --target DIR --drafter DIR
# ... to use others), headless: a run and a comparison at 1600x1000, at 1280x800 (a 13-inch
# laptop at 2x scale) and at 1024x640 (a projector mirroring a small laptop); presentation mode
# at 1920x1080 (a projector) and at 1280x800; a replay of the comparison in presentation mode at
# 1280x800 (no model loaded); the rejection inspector (a rejected draft's story, and the
# Rejections tab of a comparison) at 1600x1000 and 1280x800; the diagnosis (Run ▸ Diagnose after a
# run at temperature 1 with a block past the drafters' trained one: both drafters beside the
# comparison at 1600x1000, the first drafter beside its run's plots at 1280x800); the Train tab
# drawn from the folder of a real run of `dspark train` on the demo target; and, when BENCH names a
# `dspark bench` output folder, that benchmark on the Compare tab. Live runs: their tok/s are
# this machine's at that moment. The models are named by their paths in this repository
# (resources/demo/...), so the pictures show those, wherever the checkout is.
set -euo pipefail
cd "$(dirname "$0")/.."
export QT_QPA_PLATFORM=offscreen DSPARK_STUDIO_HOME="$(mktemp -d)"
python=${PYTHON:-.venv/bin/python}
models=(--target resources/demo/target --drafter resources/demo/dspark --drafter resources/demo/dflash)
[ $# -gt 0 ] && models=("$@")
run() { "$python" -m dspark_studio --max-tokens "${MAX_TOKENS:-160}" "${models[@]}" "$@"; }
for size in 1600x1000 1280x800 1024x640; do
  suffix=$(case "$size" in 1280x800) echo "-1280";; 1024x640) echo "-1024";; *) echo "";; esac)
  run --size "$size" --screenshot "docs/screenshot$suffix.png"
  run --size "$size" --screenshot "docs/compare$suffix.png" --compare
done
for size in 1600x1000 1280x800; do
  suffix=$(case "$size" in 1280x800) echo "-1280";; *) echo "";; esac)
  run --size "$size" --screenshot "docs/inspector$suffix.png" --inspect rejected
  run --size "$size" --screenshot "docs/rejections$suffix.png" --compare --tab rejections
done
run --size 1920x1080 --screenshot docs/presentation.png --presentation
run --size 1280x800 --screenshot docs/presentation-1280.png --presentation
recording=$(ls -t "$DSPARK_STUDIO_HOME"/data/runs/*-compare.json | head -1)
"$python" -m dspark_studio --replay "$recording" --presentation --size 1280x800 --screenshot docs/replay-1280.png
# after the replay's recording was chosen: these runs sample, and must not be the comparison replayed
run --size 1600x1000 --screenshot docs/diagnosis.png --compare --diagnose --temperature 1 --block-size 12
"$python" -m dspark_studio --max-tokens "${MAX_TOKENS:-160}" "${models[@]:0:4}" --temperature 1 --block-size 12 \
  --diagnose --size 1280x800 --screenshot docs/diagnosis-1280.png
# the Train tab: a new one-layer DSpark drafter for the demo target, 300 steps of 8 anchors,
# measured every 25 steps on 4 held-out prompts of 32 tokens (some 6 minutes on 2 cores)
trained="$DSPARK_STUDIO_HOME/trained"
"$(dirname "$python")/dspark" train --target resources/demo/target --out "$trained" --layers 1 --steps 300 \
  --batch 8 --eval-every 25 --eval-prompts 4 --eval-tokens 32 --no-progress
"$python" -m dspark_studio --train-run "$trained" --size 1600x1000 --screenshot docs/train.png
"$python" -m dspark_studio --train-run "$trained" --size 1280x800 --screenshot docs/train-1280.png
if [ -n "${BENCH:-}" ]; then
  "$python" -m dspark_studio --replay "$BENCH/summary.json" --size 1600x1000 --screenshot docs/benchmark.png
fi

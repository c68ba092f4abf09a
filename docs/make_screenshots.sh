#!/usr/bin/env bash
# Regenerate docs/screenshot.png, docs/compare.png and docs/presentation.png with the demo
# models (or pass --target DIR --drafter DIR ... to use others). Runs headless.
set -euo pipefail
cd "$(dirname "$0")/.."
export QT_QPA_PLATFORM=offscreen DSPARK_STUDIO_HOME="$(mktemp -d)"
blas=/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3
[ -f "$blas" ] && export LD_PRELOAD="$blas"
run() { python -m app --max-tokens "${MAX_TOKENS:-160}" "$@"; }
run --screenshot docs/screenshot.png "$@"
run --screenshot docs/compare.png --compare "$@"
run --screenshot docs/presentation.png --presentation "$@"

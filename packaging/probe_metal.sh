#!/usr/bin/env bash
# Does MLX compute on this Mac's GPU what it computes on the CPU? One line on stdout, the verdict:
#   gpu: <the probe's line>      Metal works: test and self-test on it
#   cpu: <why not>               it does not (wrong results, a crash, a hang, or no GPU at all):
#                                CI then runs the tests and the app's self-test on the CPU
# The question is put to `python -m dspark.selftest --device` in a process of its own, so a GPU
# that crashes MLX takes down that process, not this script; and under a time limit, since a
# paravirtual GPU may also hang (macOS has no timeout(1): run_with_limit, common.sh).
# usage: packaging/probe_metal.sh [PYTHON]   (default .venv/bin/python; PROBE_SECONDS, default 600)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=packaging/common.sh
. "$repo/packaging/common.sh"
python=${1:-$repo/.venv/bin/python}
limit=${PROBE_SECONDS:-600}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

rc=0
# sh -c gives the probe its own redirection, so that the shell's "Segmentation fault" notice for a
# crashed probe is not taken for the probe's last line
# shellcheck disable=SC2016  # expanded by that sh, not here
run_with_limit "$limit" sh -c 'exec "$@" >"$0" 2>&1' "$out" "$python" -m dspark.selftest --device 2>/dev/null || rc=$?
cat "$out" >&2  # the whole output, traceback or crash report included, for the CI log
# The verdict is one line (it goes into GITHUB_ENV and the artifact): the probe's own last line.
line=$(grep -v '^[[:space:]]*$' "$out" | tail -n 1 | tr -d '\r' | cut -c 1-400 || true)

if [ "$rc" = 0 ] && grep -q "dspark.selftest: device gpu" <<<"$line"; then
  echo "gpu: $line"
elif [ "$rc" = 0 ]; then
  echo "cpu: MLX's default device is not a GPU here (${line:-the probe printed nothing})"
elif [ "$rc" = 124 ]; then
  echo "cpu: the GPU probe did not finish in $limit s and was stopped"
elif [ "$rc" -gt 128 ]; then
  echo "cpu: the GPU probe was killed by signal $((rc - 128)) (${line:-no output})"
else
  echo "cpu: the GPU probe exited $rc: ${line:-no output}"
fi

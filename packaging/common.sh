# shellcheck shell=bash
# Shared by build_linux.sh and build_macos.sh (sourced from the repository root, not run).

VENV=build/packaging-venv
SPEC=packaging/dspark-studio.spec

die() { echo "$(basename "$0"): $*" >&2; exit 1; }

# A Python >= 3.12 (PySide6 6.12 on 3.11 aborts after a few hundred signal emits): $PYTHON if
# set, else the first one found, as the Makefile looks.
find_python() {
  local c
  for c in ${PYTHON:-} python3.12 python3.13 "$HOME"/.pyenv/versions/3.12*/bin/python3 \
           "$HOME"/.pyenv/versions/3.13*/bin/python3 python3; do
    if "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then echo "$c"; return; fi
  done
  die "Python >= 3.12 not found: install python3.12 or python3.13, or set PYTHON"
}

# PyInstaller bundles the interpreter's shared library (libpython, or the Python of a framework
# build) and stops late, with "Python was built without a shared library", when there is none:
# pyenv builds Python that way by default on macOS. Refuse such an interpreter before building.
check_shared_python() {
  local py=$1 shared
  shared=$("$py" -c 'import sysconfig as s; print(int(bool(s.get_config_var("Py_ENABLE_SHARED") or s.get_config_var("PYTHONFRAMEWORK"))))') \
    || die "$py does not run"
  [ "$shared" = 1 ] && return
  if [ "$(uname -s)" = Darwin ]; then
    die "$py was built without a shared library, which PyInstaller needs: install Python 3.12 or 3.13 from python.org or Homebrew (brew install python@3.12) and run again with PYTHON set to it"
  fi
  die "$py was built without a shared library, which PyInstaller needs: use your distribution's python3.12 (or pyenv with PYTHON_CONFIGURE_OPTS=--enable-shared) and run again with PYTHON set to it"
}

# A clean venv with the project installed as a wheel would be (not editable: PyInstaller must
# find dspark_studio as a real package) and PyInstaller, which nothing else ever installs.
# setuptools builds the wheel in build/lib: cleared too, so no deleted file lingers in it.
fresh_venv() {
  local py
  py=$(find_python)
  check_shared_python "$py"
  echo "$(basename "$0"): building with $("$py" -c 'import sys; print(sys.executable, sys.version.split()[0])')" >&2
  rm -rf "$VENV" build/pyinstaller build/lib build/bdist.*
  "$py" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q . -r packaging/requirements.txt
}

run_pyinstaller() {
  "$VENV/bin/pyinstaller" --noconfirm --clean --log-level WARN --distpath dist --workpath build/pyinstaller "$SPEC"
}

# For the scripts that start a built app (test_bundle.sh, test_app_macos.sh): a scratch folder in
# $tmp, removed on any exit, and one summary line ("LABEL: 1 passed, 0 failed" or the reverse)
# that CI logs and the test suite read.
scratch_with_summary() {
  tmp=$(mktemp -d)
  summary_label=$1
  trap finish_with_summary EXIT
}
finish_with_summary() {
  local status=$?
  rm -rf "$tmp"
  if [ "$status" = 0 ]; then echo "$summary_label: 1 passed, 0 failed"; else echo "$summary_label: 0 passed, 1 failed"; fi
}

# Runs "$@" and returns its status, or 124 (as GNU timeout does) once it has run SECONDS: macOS
# has no timeout(1), and a GPU probe or an `open -W` that hangs would otherwise hold a CI runner
# until the job's own limit. The command is killed, not its children (open's app lives on), so
# callers send its output to a file, which an orphan cannot hold open the way it holds a pipe.
run_with_limit() {
  local ticks=$(($1 * 5)) pid waited=0
  shift
  "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$waited" -ge "$ticks" ]; then
      kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      return 124
    fi
    sleep 0.2  # macOS's sleep takes fractions too
    waited=$((waited + 1))
  done
  wait "$pid"
}

# The Train tab's `dspark train`, as the bundle runs it: its own executable with --dspark (a frozen
# bundle has no console scripts), two steps on the bundled demo target and a small text, in a
# bare environment. Fails unless the drafter and the curves are written.
# usage: train_through_bundle EXE FOLDER-HOLDING-THE-BUNDLE SCRATCH
train_through_bundle() {
  local exe=$1 bundle=$2 scratch=$3 target
  target=$(find "$bundle" -type d -path '*/resources/demo/target' | head -n 1)
  [ -n "$target" ] || { echo "train_through_bundle: no demo target in $bundle" >&2; return 1; }
  mkdir -p "$scratch/home"
  # printf, not yes | head: under pipefail yes's SIGPIPE would fail the pipeline
  printf 'def add(x, y): return x + y  # a line of the data %s\n' $(seq 400) >"$scratch/train-data.txt"
  env -i PATH=/usr/bin:/bin HOME="$scratch/home" "$exe" --dspark train --target "$target" \
    --data "$scratch/train-data.txt" --out "$scratch/trained" --steps 2 --batch 4 --seq-len 64 \
    --eval-prompts 0 --layers 1 --block-size 4 --no-progress >&2 \
    || { echo "train_through_bundle: dspark train through the bundle failed" >&2; return 1; }
  [ -s "$scratch/trained/model.safetensors" ] && [ -s "$scratch/trained/train_log.jsonl" ] \
    || { echo "train_through_bundle: the run wrote no drafter or no curves" >&2; return 1; }
}

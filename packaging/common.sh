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

# A clean venv with the project installed as a wheel would be (not editable: PyInstaller must
# find dspark_studio as a real package) and PyInstaller, which nothing else ever installs.
# setuptools builds the wheel in build/lib: cleared too, so no deleted file lingers in it.
fresh_venv() {
  local py
  py=$(find_python)
  rm -rf "$VENV" build/pyinstaller build/lib build/bdist.*
  "$py" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q . -r packaging/requirements.txt
}

run_pyinstaller() {
  "$VENV/bin/pyinstaller" --noconfirm --clean --log-level WARN --distpath dist --workpath build/pyinstaller "$SPEC"
}

#!/usr/bin/env bash
# Build DSpark Studio for Linux as a one-folder bundle: dist/dspark-studio/ (copy the whole
# folder; start dspark-studio in it). The build venv is made anew each time; the last line
# printed is the path of the built executable.
set -euo pipefail
cd "$(dirname "$0")/.."
. packaging/common.sh
[ "$(uname -s)" = Linux ] || die "this builds the Linux bundle; on a Mac run packaging/build_macos.sh"

start=$SECONDS
fresh_venv
run_pyinstaller
# A source-built interpreter (pyenv) keeps its debug info in libpython and lib-dynload (35 MB of
# the bundle); strip the interpreter's own files only: libraries that auditwheel patched inside
# wheels can break when stripped.
strip --strip-debug dist/dspark-studio/_internal/libpython3*.so* dist/dspark-studio/_internal/python3*/lib-dynload/*.so
"$VENV/bin/python" packaging/bundle.py check dist/dspark-studio
echo "build_linux.sh: built in $((SECONDS - start)) s, $(du -sh dist/dspark-studio | cut -f1)," \
     "$(find dist/dspark-studio | wc -l) files" >&2
echo "$PWD/dist/dspark-studio/dspark-studio"

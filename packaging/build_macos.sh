#!/usr/bin/env bash
# Build "DSpark Studio.app" on a Mac with Apple silicon: dist/DSpark Studio.app, and
# dist/DSpark-Studio-macOS.zip to hand on. The build venv is made anew each time; the last line
# printed is the path of the built executable (inside the .app).
#
#   packaging/build_macos.sh                    signed ad hoc (runs on this Mac; elsewhere the
#                                               first open needs right-click > Open)
#   packaging/build_macos.sh --sign "Developer ID Application: NAME (TEAMID)" [--notarize PROFILE]
#                                               hardened runtime and a timestamp; with --notarize,
#                                               submitted with `xcrun notarytool` (PROFILE made by
#                                               `xcrun notarytool store-credentials`) and stapled
#
# MACOS_MIN (default 14.0) is the oldest macOS the app runs on: the mlx wheels built for it are
# installed whatever this Mac runs, since pip picks wheels for the build machine and mlx's
# metallib for macOS 26 does not load on 15; Info.plist's LSMinimumSystemVersion follows.
set -euo pipefail
cd "$(dirname "$0")/.."
. packaging/common.sh

identity="" profile=""
while [ $# -gt 0 ]; do
  case "$1" in
    --sign) identity=${2:?--sign needs an identity}; shift 2 ;;
    --notarize) profile=${2:?--notarize needs a keychain profile}; shift 2 ;;
    *) die "unknown option $1 (see the top of this script)" ;;
  esac
done
[ -z "$profile" ] || [ -n "$identity" ] || die "--notarize needs --sign: Apple notarises Developer ID apps only"
[ "$(uname -sm)" = "Darwin arm64" ] || die "build on a Mac with Apple silicon (mlx has no Intel wheels)"

app="dist/DSpark Studio.app"
zip="dist/DSpark-Studio-macOS.zip"
start=$SECONDS
fresh_venv

macos_min=${MACOS_MIN:-14.0}
mlx_version=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("mlx"))')
py_version=$("$VENV/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
rm -rf build/mlx-wheels
"$VENV/bin/pip" download -q --no-deps --only-binary=:all: --platform "macosx_${macos_min/./_}_arm64" \
  --python-version "$py_version" -d build/mlx-wheels "mlx==$mlx_version" "mlx-metal==$mlx_version"
"$VENV/bin/pip" install -q --no-deps --force-reinstall build/mlx-wheels/*.whl

# Signing errors fail the build (PyInstaller only warns by default).
CODESIGN_IDENTITY="$identity" PYINSTALLER_STRICT_BUNDLE_CODESIGN_ERROR=1 run_pyinstaller
"$VENV/bin/python" packaging/bundle.py check "$app"
codesign --verify --deep --strict "$app"

rm -f "$zip"
if [ -n "$profile" ]; then
  ditto -c -k --keepParent "$app" "$zip"  # ditto keeps the bundle's symlinks; zip -r would not
  xcrun notarytool submit "$zip" --keychain-profile "$profile" --wait
  xcrun stapler staple "$app"
  spctl --assess --type execute -vv "$app"
  rm -f "$zip"
fi
ditto -c -k --keepParent "$app" "$zip"
echo "build_macos.sh: built in $((SECONDS - start)) s, $(du -sh "$app" | cut -f1); $zip $(du -h "$zip" | cut -f1)" >&2
echo "$PWD/$app/Contents/MacOS/dspark-studio"

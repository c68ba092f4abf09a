#!/usr/bin/env bash
# Start a built DSpark Studio.app as a person's Mac would, from its zip: unzipped into a fresh
# folder, its signature and Info.plist checked, then started from / with a bare environment
# (no venv, the repository on no path, a fresh HOME) with --self-test, and once more through
# LaunchServices (`open`), which runs the Cocoa platform instead of offscreen. Fails unless both
# self-tests report a demo run computed on the GPU and identical to plain decoding, and both
# screenshots show a drawn window. Keeps the zip and the screenshots in build/artifact/ for upload.
# usage: packaging/test_app_macos.sh [dist/DSpark-Studio-macOS.zip]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
zip="${1:-$repo/dist/DSpark-Studio-macOS.zip}"
zip="$(cd "$(dirname "$zip")" && pwd)/$(basename "$zip")"
# shellcheck source=packaging/common.sh
. "$repo/packaging/common.sh"
scratch_with_summary app
fail() { echo "test_app_macos.sh: $*" >&2; exit 1; }
[ "$(uname -s)" = Darwin ] || fail "this checks the macOS app; on Linux run packaging/test_bundle.sh"
python=$(command -v python3) || fail "python3 is needed to check the screenshots"

ditto -x -k "$zip" "$tmp/unzipped"  # ditto keeps the bundle's symlinks, as Finder's unzip does
app="$tmp/unzipped/DSpark Studio.app"
[ -d "$app" ] || fail "the zip holds no 'DSpark Studio.app' at its top"
codesign --verify --deep --strict --verbose=2 "$app" || fail "codesign rejects the unzipped app"
plist="$app/Contents/Info.plist"
plutil -lint "$plist" >/dev/null || fail "Info.plist is not a valid property list"
for key in CFBundleIdentifier CFBundleExecutable CFBundleShortVersionString LSMinimumSystemVersion; do
  plutil -extract "$key" raw -o - "$plist" >/dev/null || fail "Info.plist has no $key"
done
exe="$app/Contents/MacOS/$(plutil -extract CFBundleExecutable raw -o - "$plist")"
mkdir "$tmp/home"

expect_gpu_run() {  # the self-test line: ok, on the GPU (named), identical to plain decoding
  grep -q "self-test: ok: device gpu (" <<<"$1" || fail "the self-test did not pass on the GPU: $1"
  grep -q "identical to plain" <<<"$1" || fail "the self-test's output differs from plain decoding: $1"
}

cd /
start=$SECONDS
rc=0
line=$(env -i HOME="$tmp/home" PATH=/usr/bin:/bin "$exe" --self-test "$tmp/selftest.png") || rc=$?
echo "$line"
[ "$rc" = 0 ] || fail "the self-test exited $rc"
expect_gpu_run "$line"
"$python" "$repo/packaging/png_check.py" "$tmp/selftest.png" 1600x1000 20 >&2 || fail "the offscreen screenshot is not a drawn window"

# LaunchServices, as a double-click starts it (with launchd's environment, not this shell's): open
# waits (-W) for a new instance (-n); its exit status is open's, not the app's, so the app's own
# line and screenshot decide.
open -W -n --stdout "$tmp/ls.out" --stderr "$tmp/ls.err" "$app" \
  --args --self-test "$tmp/launched.png" --on-screen || fail "open could not launch the app: $(cat "$tmp/ls.err" 2>/dev/null)"
line=$(cat "$tmp/ls.out" 2>/dev/null || true)
echo "$line"
expect_gpu_run "$line"
# the window on the runner's screen: its size is the screen's business, not ours
"$python" "$repo/packaging/png_check.py" "$tmp/launched.png" any 20 >&2 || fail "the on-screen screenshot is not a drawn window"

mkdir -p "$repo/build/artifact"
cp "$zip" "$repo/build/artifact/"
cp "$tmp/selftest.png" "$repo/build/artifact/selftest.png"
cp "$tmp/launched.png" "$repo/build/artifact/selftest-launched.png"
echo "test_app_macos.sh: ok in $((SECONDS - start)) s from $app; kept in build/artifact/" >&2

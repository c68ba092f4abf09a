#!/usr/bin/env bash
# Start a built DSpark Studio.app as a person's Mac would, from its zip: unzipped into a fresh
# folder, its signature and Info.plist checked, then started from / with a bare environment
# (no venv, the repository on no path, a fresh HOME) with --self-test, and once more through
# LaunchServices (`open`), which runs the Cocoa platform instead of offscreen. Fails unless both
# self-tests report a demo run on the device asked for and identical to plain decoding, and both
# screenshots show a drawn window. Keeps the zip, the screenshots and metal.txt (whether Metal was
# exercised, and the self-tests' lines) in build/artifact/ for upload.
# usage: [SELFTEST_DEVICE=gpu|cpu] packaging/test_app_macos.sh [dist/DSpark-Studio-macOS.zip]
#   gpu (default): the self-test must compute on Metal, checked against the CPU.
#   cpu: for a Mac whose GPU does not run MLX (packaging/probe_metal.sh says so, METAL_PROBE is its
#        verdict): the app is started with --device cpu and its self-test runs the same checks on
#        MLX's CPU device, saying that Metal was not exercised.
# LAUNCH_SECONDS (default 600) bounds each start of the app: macOS has no timeout(1).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
zip="${1:-$repo/dist/DSpark-Studio-macOS.zip}"
zip="$(cd "$(dirname "$zip")" && pwd)/$(basename "$zip")"
# shellcheck source=packaging/common.sh
. "$repo/packaging/common.sh"
scratch_with_summary app
fail() { echo "test_app_macos.sh: $*" >&2; exit 1; }
device=${SELFTEST_DEVICE:-gpu}
case "$device" in gpu|cpu) ;; *) fail "SELFTEST_DEVICE is '$device': say gpu or cpu" ;; esac
limit=${LAUNCH_SECONDS:-600}
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
selftest_line() { grep "self-test:" <<<"$1" | tail -n 1 || true; }  # one line for metal.txt

# On the GPU no device is named: the app decides as at a user's first launch, by its GPU check in a
# child process started from the bundle's own executable (--check-device), and says what it found.
device_args=()
[ "$device" = gpu ] || device_args=(--device "$device")

expect_run() {  # the self-test line: ok, on the device asked for, identical to plain decoding
  if [ "$device" = gpu ]; then
    grep -q "self-test: ok: device gpu (" <<<"$1" || fail "the self-test did not pass on the GPU: $1"
    grep -q "first-launch GPU check: this GPU .* computes what the CPU computes" <<<"$1" \
      || fail "the first-launch GPU check did not keep the app on the GPU: $1"
  else
    grep -q "self-test: ok: device cpu" <<<"$1" || fail "the self-test did not pass on the CPU: $1"
    grep -q "Metal not exercised" <<<"$1" || fail "the self-test ran on the CPU without saying Metal was not exercised: $1"
  fi
  grep -q "identical to plain" <<<"$1" || fail "the self-test's output differs from plain decoding: $1"
}

cd /
start=$SECONDS
rc=0
run_with_limit "$limit" env -i HOME="$tmp/home" PATH=/usr/bin:/bin "$exe" \
  --self-test "$tmp/selftest.png" ${device_args[@]+"${device_args[@]}"} >"$tmp/bare.out" || rc=$?
line=$(cat "$tmp/bare.out")
echo "$line"
[ "$rc" != 124 ] || fail "the self-test did not finish in $limit s"
[ "$rc" = 0 ] || fail "the self-test exited $rc"
expect_run "$line"
bare_line=$(selftest_line "$line")
"$python" "$repo/packaging/png_check.py" "$tmp/selftest.png" 1600x1000 20 >&2 || fail "the offscreen screenshot is not a drawn window"

# The Train tab's dspark train, started as the tab starts it in the app
mkdir -p "$tmp/train"
train_through_bundle "$exe" "$app" "$tmp/train" || fail "the app cannot train a drafter"

# LaunchServices, as a double-click starts it (with launchd's environment, not this shell's): open
# waits (-W) for a new instance (-n); its exit status is open's, not the app's, so the app's own
# line and screenshot decide. open hands the --stdout/--stderr paths to LaunchServices, which
# opens them for the app: they are made here first, so the app's output never depends on whether
# a missing file is created for it (open(1) does not say).
: >"$tmp/ls.out"
: >"$tmp/ls.err"
rc=0
run_with_limit "$limit" open -W -n --stdout "$tmp/ls.out" --stderr "$tmp/ls.err" "$app" \
  --args --self-test "$tmp/launched.png" --on-screen ${device_args[@]+"${device_args[@]}"} || rc=$?
[ "$rc" != 124 ] || fail "the app started by open did not quit in $limit s"
[ "$rc" = 0 ] || fail "open could not launch the app (exit $rc): $(cat "$tmp/ls.err")"
line=$(cat "$tmp/ls.out")
echo "$line"
expect_run "$line"
# the window on the runner's screen: its size is the screen's business, not ours
"$python" "$repo/packaging/png_check.py" "$tmp/launched.png" any 20 >&2 || fail "the on-screen screenshot is not a drawn window"

# What a downloader and the release notes read about Metal: said plainly, with the evidence.
if [ "$device" = gpu ]; then metal=yes; else metal=no; fi
rm -rf "$repo/build/artifact"
mkdir -p "$repo/build/artifact"
cp "$zip" "$repo/build/artifact/"
cp "$tmp/selftest.png" "$repo/build/artifact/selftest.png"
cp "$tmp/launched.png" "$repo/build/artifact/selftest-launched.png"
{
  echo "metal exercised: $metal"
  echo "device: $device"
  echo "probe: ${METAL_PROBE:-not run: the $device was asked for by hand}"
  echo "self-test: $bare_line"
  echo "launched: $(selftest_line "$line")"
} >"$repo/build/artifact/metal.txt"
echo "test_app_macos.sh: ok on the $device in $((SECONDS - start)) s from $app; Metal exercised: $metal; kept in build/artifact/" >&2

"""``dspark-studio --self-test [FILE.png]``: does this copy of the app work here?

Meant for a frozen bundle on a machine that has never seen it (and for CI after each build):
the library's check (``dspark.selftest``: the demo pair, 32 tokens speculatively and by plain
decoding, compared) prints one line with the device, the BLAS and the figures. With FILE it
then runs the window once on the demo models (the ``--screenshot`` path), which also exercises
Qt's plugins, the fonts, the bundled resources and the first-launch GPU check (its child process
started from this executable, ``--check-device``; its sentence ends the line, and a GPU it
refused fails the self-test); that run has its own worker thread, the one place of the app that
touches MLX. Exit 0, or 1 with the reason in the line.
"""

from __future__ import annotations

from dspark import device
from dspark.selftest import TOKENS, check, held_out_prompt

from .startup import build_parser


def run(screenshot: str | None, on_screen: bool = False) -> int:
    """``--self-test [FILE]``: the check, then (if it passed and FILE is given) the window, drawn
    offscreen unless ``on_screen`` (a launch through macOS's LaunchServices uses the Cocoa platform)."""
    ok, line = check()
    if ok and screenshot:
        from .headless import run_screenshot  # noqa: PLC0415 (slow: Qt, only for --self-test FILE)

        argv = ["--screenshot", screenshot, "--max-tokens", str(TOKENS), "--prompt", held_out_prompt()]
        code = run_screenshot(build_parser().parse_args(argv + (["--on-screen"] if on_screen else [])))
        ok = code == 0
        line += f"; window saved to {screenshot}" if ok else f"; the window run failed (exit {code})"
        found = device.current()  # the window opened as at a first launch: what its GPU check decided
        if found is not None:
            line += f"; first-launch GPU check: {found.sentence}"
            ok = ok and not found.fell_back
    print(f"dspark-studio self-test: {'ok' if ok else 'FAILED'}: {line}", flush=True)
    return 0 if ok else 1

"""What the command line asks for and what the app opens on, shared by its three programs (the
app, the headless screenshot run of ``dspark_studio.headless``, the self-test of
``dspark_studio.install_check``): the options, the Qt platform of a headless run, a missing system
library said in one line before Qt aborts, the models to open, and the window built on them."""

from __future__ import annotations

import argparse
import gc
import math
import os
import sys
from pathlib import Path

SCREENSHOT_SIZE = (1600, 1000)
#: The longest ``--timeout``: Qt's timers count milliseconds in a signed 32-bit integer (24.8
#: days), and 1e308 seconds overflowed it with a traceback.
MAX_TIMEOUT_S = 2_000_000
FIRST_START = (
    "These are the demo models. Your own: File ▸ Open target… (a Gemma-4 folder), "
    "File ▸ Add drafter…, or File ▸ Download…"
)


def build_parser() -> argparse.ArgumentParser:
    """The options of ``dspark-studio``; long because it lists every one, a call each."""
    p = argparse.ArgumentParser(
        prog="dspark-studio",
        description="Watch speculative decoding with any drafter: DSpark, DFlash, DFlash 2, EAGLE-3, assistants.",
    )
    p.add_argument("--target", help="target model directory (default: last used, else the demo target)")
    p.add_argument("--drafter", action="append", default=[], help="drafter directory (repeatable)")
    p.add_argument("--prompt", help="prompt text (default: the first prompt of the set)")
    p.add_argument("--max-tokens", type=int, help="tokens to generate")
    p.add_argument(
        "--temperature",
        type=float,
        help="sampling temperature, 0 greedy (default: the app's setting: the last used, else 0)",
    )
    p.add_argument(
        "--block-size",
        type=int,
        help="drafted tokens per round (default: the app's setting: the last used, else the drafter's own)",
    )
    p.add_argument("--presentation", action="store_true", help="start in presentation mode")
    p.add_argument("--compare", action="store_true", help="with --screenshot: compare every drafter")
    p.add_argument(
        "--replay",
        metavar="FILE",
        nargs="+",
        help="play saved runs or comparisons back, or open a dspark bench summary.json on the "
        "Compare tab (File ▸ Open run or benchmark…); no model is loaded",
    )
    p.add_argument(
        "--replay-speed",
        choices=["1", "2", "instant"],
        help="replay at the recorded speed (1, the default), twice as fast, or at once",
    )
    p.add_argument("--screenshot", metavar="FILE", help="run once headless, save the window as PNG, exit")
    p.add_argument(
        "--size",
        metavar="WxH",
        type=_size,
        default=SCREENSHOT_SIZE,
        help="with --screenshot: the window size (default 1600x1000)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=900,
        help=f"with --screenshot: give up after this many seconds (above 0, at most {MAX_TIMEOUT_S:,})",
    )
    p.add_argument(
        "--tab",
        choices=["run", "compare", "rejections", "train"],
        help="with --screenshot: the tab to grab (default: the one the run or replay shows)",
    )
    p.add_argument(
        "--train-run",
        metavar="DIR",
        help="show the dspark train run in DIR on the Train tab (its curves and state, from its folder; "
        "with --screenshot no model is loaded)",
    )
    p.add_argument(
        "--diagnose",
        action="store_true",
        help="with --screenshot: after the run (or the comparison), Run ▸ Diagnose the same drafters on "
        "the same prompt and settings, and grab the window once the diagnosis has ended (default: off)",
    )
    p.add_argument(
        "--inspect",
        metavar="CELL",
        type=_cell,
        help="with --screenshot: choose a draft-rows cell first and show its story: 'rejected' (the "
        "newest round's rejected draft) or ROUND:K (draft K of that round, 0 its target token; a "
        "negative ROUND counts from the newest: --inspect=-1:2) (default: none)",
    )
    p.add_argument(
        "--self-test",
        nargs="?",
        const="",
        metavar="FILE.png",
        help="check the demo models run (and, with FILE, save the window); print one line, exit",
    )
    p.add_argument(
        "--bench-figures",
        metavar="DIR",
        help="write a dspark bench result's figures (speedup, acceptance, costs) as PNG files into DIR, exit",
    )
    p.add_argument(
        "--device",
        choices=["cpu", "gpu"],
        help="compute on MLX's CPU or GPU device (default: the GPU where it passes the first-launch "
        "check, else the CPU; the environment variable DSPARK_DEVICE does the same)",
    )
    p.add_argument(
        "--check-device",
        action="store_true",
        help="check that MLX's GPU computes what its CPU computes on the demo target, print the answer "
        "as one JSON line and exit (what the app runs in a child process at its first launch)",
    )
    p.add_argument(
        "--on-screen",
        action="store_true",
        help="with --screenshot or --self-test FILE: show the window on the screen while it runs "
        "(default: drawn offscreen, whatever display there is)",
    )
    return p


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT (e.g. 1280x800)") from None
    if not (320 <= w <= 10_000 and 240 <= h <= 10_000):
        raise argparse.ArgumentTypeError(f"{text} is outside 320x240 .. 10000x10000")
    return w, h


def _cell(text: str) -> str:
    parts = text.split(":")
    if text == "rejected" or (len(parts) == 2 and all(p.lstrip("-").isdigit() for p in parts) and int(parts[1]) >= 0):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not 'rejected' or ROUND:K (e.g. 12:3)")


def given_settings(args) -> dict:
    """The generation settings the command line gives (0 tokens is given, not "not given")."""
    given = {"max_tokens": args.max_tokens, "temperature": args.temperature, "block_size": args.block_size}
    return {k: v for k, v in given.items() if v is not None}


def refused_start(args, environ) -> str | None:
    """Why the app cannot start as asked, in one sentence, or None: said before a window or a
    model is made. The options as ``dspark generate`` says them (``dspark.options``' rules: a
    temperature of 1e-40, 0 tokens), a ``--timeout`` no timer can hold, a
    ``DSPARK_STUDIO_HOME`` that names a file (the settings and the run history go in it), and
    what MLX reads from the environment (a temporary folder that is none, ``DSPARK_DEVICE=gpu``
    without a GPU: a failed run in the window, or an internal error, before)."""
    from dspark.config import GenerationConfig  # noqa: PLC0415 (ordered: dspark after main applies --device)
    from dspark.device import temp_dir_problem, use_env_device  # noqa: PLC0415 (ordered: after --device is applied)
    from dspark.errors import DsparkError, printable  # noqa: PLC0415 (ordered: dspark after main applies --device)
    from dspark.options import check_options  # noqa: PLC0415 (ordered: dspark after main applies --device)

    home = environ.get("DSPARK_STUDIO_HOME")
    if home and Path(home).exists() and not Path(home).is_dir():
        return f"DSPARK_STUDIO_HOME is {printable(home)}, a file: it must name a folder (or be unset)"
    problem = temp_dir_problem(environ)
    if problem:
        return problem
    try:
        use_env_device()
    except DsparkError as e:
        return str(e)
    t = args.timeout
    if not (math.isfinite(t) and 0 < t <= MAX_TIMEOUT_S):
        return f"--timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:,}, not {t:g}"
    try:
        check_options(GenerationConfig(**given_settings(args)))
    except DsparkError as e:
        return f"--{e}"
    return None


def headless_platform(args, environ) -> None:
    """A screenshot run (also the self-test's window) draws offscreen on every platform: a DISPLAY
    (XQuartz on a Mac, a desktop on Linux) must not make it open a window. ``--on-screen`` and an
    explicit ``QT_QPA_PLATFORM`` win."""
    if args.screenshot and not args.on_screen:
        environ.setdefault("QT_QPA_PLATFORM", "offscreen")


#: What Qt's xcb platform plugin links (PySide6 6.12's libqxcb.so), as (the name
#: ctypes.util.find_library takes, the Debian package): without any one Qt aborts naming only
#: libxcb-cursor0, which a newcomer without libxcb-icccm4 had installed already.
XCB_LIBRARIES = (
    ("xcb-cursor", "libxcb-cursor0"),
    ("xcb-icccm", "libxcb-icccm4"),
    ("xcb-image", "libxcb-image0"),
    ("xcb-keysyms", "libxcb-keysyms1"),
    ("xcb-randr", "libxcb-randr0"),
    ("xcb-render-util", "libxcb-render-util0"),
    ("xcb-shape", "libxcb-shape0"),
    ("xcb-xfixes", "libxcb-xfixes0"),
    ("xcb-xkb", "libxcb-xkb1"),
    ("xkbcommon-x11", "libxkbcommon-x11-0"),
)


def missing_system_library() -> str | None:
    """On Linux under X11, Qt's xcb platform plugin aborts the whole process (exit 134) when a
    library it links is missing; say which in one line before Qt starts, with the command to run."""
    if not sys.platform.startswith("linux"):
        return None
    platform = os.environ.get("QT_QPA_PLATFORM", "")
    if platform and not platform.startswith("xcb"):
        return None
    if not os.environ.get("DISPLAY") or (not platform and os.environ.get("WAYLAND_DISPLAY")):
        return None
    import ctypes.util  # noqa: PLC0415 (slow: ctypes, X11 only, off the --help path)

    missing = [package for name, package in XCB_LIBRARIES if ctypes.util.find_library(name) is None]
    if missing:
        return (
            f"dspark-studio: Qt needs {', '.join(missing)} to open a window on X11: run "
            f"sudo apt-get install {' '.join(missing)} (make setup installs them and the rest when run as root)"
        )
    return None


CHECKING = "Checking that this Mac's GPU computes what its CPU computes (once, at the first launch of this version) …"


def checked_device(app, *, ask=None, gpu: bool | None = None):
    """The device this process computes on, decided before anything imports mlx-lm (whose
    generation stream keeps the device of its import): the GPU check's kept answer, or the
    check run now in a child process while a small window says what is happening
    (:func:`dspark.device.startup_check`). ``ask`` and ``gpu`` stand in for the child and the
    GPU in tests. Returns the applied :class:`dspark.device.DeviceCheck`."""
    import threading  # noqa: PLC0415 (light: --help and --check-device load no threading)

    from PySide6.QtCore import QEventLoop, Qt, QTimer  # noqa: PLC0415 (slow: Qt, not for --help or --check-device)
    from PySide6.QtWidgets import QLabel  # noqa: PLC0415 (slow: Qt, not for --help or --check-device)

    from dspark import device  # noqa: PLC0415 (ordered: dspark after main applies --device)

    from .files import settings  # noqa: PLC0415 (ordered: Qt and dspark, after main applies --device)

    def ask_with_window():
        answer: list = []

        def asking():
            try:
                answer.append((ask or device.ask_child)())
            except Exception as e:  # the check must never keep the app from starting
                answer.append(device.failed(f"the GPU check could not run ({type(e).__name__}: {e})"))

        worker = threading.Thread(target=asking, daemon=True)
        note = QLabel(CHECKING)
        note.setWindowTitle(settings.APP)
        note.setWindowFlag(Qt.WindowStaysOnTopHint)
        note.setMargin(24)
        note.show()
        worker.start()
        loop = QEventLoop()
        timer = QTimer()
        timer.timeout.connect(lambda: None if worker.is_alive() else loop.quit())
        timer.start(50)
        loop.exec()
        timer.stop()
        note.close()
        return answer[0]

    try:
        cache = settings.data_dir() / "device-check.json"
    except OSError:  # no writable data folder: the check runs, and runs again next time
        cache = Path(os.devnull)
    check = device.startup_check(cache, ask=ask_with_window, gpu=gpu)
    device.apply(check)
    return check


def choose_models(args, prefs) -> tuple[str | None, list[str]]:
    """Command line first; then (not for screenshots) the last used; then the demo models."""
    from .files import settings  # noqa: PLC0415 (ordered: Qt and dspark, after main applies --device)

    if args.target:
        return args.target, list(args.drafter)
    if prefs is not None:
        target = prefs.get("models/target", "", str)
        if target and Path(target).is_dir():
            drafters = [d for d in prefs.get("models/drafters", [], list) if Path(d).is_dir()]
            return target, list(args.drafter) or drafters
    return settings.demo_target(), list(args.drafter) or settings.demo_drafters()


def open_window(args, prefs_wanted: bool):
    """The QApplication and the main window on the chosen models (loading them on the worker
    unless a replay is asked for): (app, window, target path or None)."""
    from PySide6.QtGui import QIcon  # noqa: PLC0415 (slow: Qt, not for --help or --check-device)
    from PySide6.QtWidgets import QApplication  # noqa: PLC0415 (slow: Qt, not for --help or --check-device)

    from dspark import resources  # noqa: PLC0415 (ordered: dspark after main applies --device)

    from .files import settings  # noqa: PLC0415 (ordered: Qt and dspark, after main applies --device)

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setOrganizationName(settings.ORG)
    app.setApplicationName(settings.APP)
    app.setStyle("Fusion")  # the same look on macOS and Linux; themed by app.panes.theme
    app.setWindowIcon(QIcon(str(resources.path("icons", "dspark-studio.png"))))
    check = checked_device(app)
    # only now: the main window imports mlx-lm, whose stream keeps the device of that moment
    from .window.main_window import MainWindow  # noqa: PLC0415 (ordered: after checked_device, as it imports mlx-lm)

    prefs = settings.Settings() if prefs_wanted else None
    first_start = prefs is not None and not prefs.q.allKeys()
    win = MainWindow(prefs)
    win.show_device_check(check)
    target, drafters = choose_models(args, prefs)
    if first_start and not args.target and not args.replay:  # nothing saved yet: say how to open one's own
        win.show_hint(FIRST_START)
    if args.replay:  # a replay lists the drafters it recorded, and loads none
        drafters = recorded_drafters(args.replay)
    win.restore(target, drafters, load=not args.replay and not (args.train_run and args.screenshot))
    if args.train_run:
        win.open_training(args.train_run, wait=bool(args.screenshot))
    choices = win.session.choices
    if args.prompt is not None:
        choices.set_prompt(args.prompt)
    given = given_settings(args)
    if given:
        choices.set_config({**choices.config, **given})
    win.refresh()
    if target is None and not args.replay:
        win.on_failed("no target model: choose one with File ▸ Open target (the demo models are not built yet)")
    keep_out_of_full_collections()
    return app, win, target


def keep_out_of_full_collections() -> None:
    """What opening the window made (Qt's, pyqtgraph's, MLX's and the app's modules and widgets:
    ~130,000 objects) is kept out of Python's full garbage collections from now on: each one
    walked them all on the GUI thread, 83-106 ms in one go (measured), the window's longest stalls
    while a run trained beside it. Collected once first, so nothing left for the collector is kept."""
    gc.collect()
    gc.freeze()


def recorded_drafters(paths: list[str]) -> list[str]:
    """The drafter directories saved runs ran (files that are not runs are said when opened)."""
    from dspark.errors import DsparkError  # noqa: PLC0415 (ordered: dspark after main applies --device)

    from .files.replay import read_recording  # noqa: PLC0415 (ordered: Qt and dspark, after main applies --device)
    from .state.playlist import Playlist  # noqa: PLC0415 (light, but --help and --check-device need no dataclasses)

    recordings = []
    for p in paths:
        try:
            recordings.append(read_recording(p))
        except DsparkError:
            pass
    return Playlist(recordings).drafters()


def replay_speed(args) -> str | None:
    return {"1": "1×", "2": "2×", "instant": "instant"}.get(args.replay_speed or "", None)


__all__ = [
    "CHECKING",
    "FIRST_START",
    "MAX_TIMEOUT_S",
    "SCREENSHOT_SIZE",
    "XCB_LIBRARIES",
    "build_parser",
    "checked_device",
    "choose_models",
    "given_settings",
    "headless_platform",
    "missing_system_library",
    "open_window",
    "recorded_drafters",
    "refused_start",
    "replay_speed",
]

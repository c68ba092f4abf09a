"""``dspark-studio``: start the desktop app, or (``--screenshot FILE``) run once headless,
save a grab of the whole window and exit, or (``--self-test [FILE]``) check this install."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

SCREENSHOT_SIZE = (1600, 1000)
FIRST_START = ("These are the demo models. Your own: File ▸ Open target… (a Gemma-4 folder), "
               "File ▸ Add drafter…, or File ▸ Download…")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dspark-studio", description="Watch speculative decoding with block drafters.")
    p.add_argument("--target", help="target model directory (default: last used, else the demo target)")
    p.add_argument("--drafter", action="append", default=[], help="drafter directory (repeatable)")
    p.add_argument("--prompt", help="prompt text (default: the first prompt of the set)")
    p.add_argument("--max-tokens", type=int, help="tokens to generate")
    p.add_argument("--presentation", action="store_true", help="start in presentation mode")
    p.add_argument("--compare", action="store_true", help="with --screenshot: compare every drafter")
    p.add_argument("--screenshot", metavar="FILE", help="run once headless, save the window as PNG, exit")
    p.add_argument("--timeout", type=float, default=900, help="with --screenshot: give up after this many seconds")
    p.add_argument("--self-test", nargs="?", const="", metavar="FILE.png",
                   help="check the demo models run (and, with FILE, save the window); print one line, exit")
    return p


def choose_models(args, prefs) -> tuple[str | None, list[str]]:
    """Command line first; then (not for screenshots) the last used; then the demo models."""
    from . import settings

    if args.target:
        return args.target, list(args.drafter)
    if prefs is not None:
        target = prefs.get("models/target", "", str)
        if target and Path(target).is_dir():
            drafters = [d for d in prefs.get("models/drafters", [], list) if Path(d).is_dir()]
            return target, list(args.drafter) or drafters
    return settings.demo_target(), list(args.drafter) or settings.demo_drafters()


def main(argv: list[str] | None = None) -> int:
    from dspark.blas import use_fast_blas

    use_fast_blas()  # before mlx is imported (by the worker module)
    args = build_parser().parse_args(argv)
    if args.self_test is not None:
        from .selftest import run

        return run(args.self_test or None)
    if args.screenshot and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    from PySide6.QtCore import QTimer
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication, QLabel

    from dspark import resources

    from . import settings
    from .window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setOrganizationName(settings.ORG)
    app.setApplicationName(settings.APP)
    app.setStyle("Fusion")  # the same look on macOS and Linux; themed by app.theme
    app.setWindowIcon(QIcon(str(resources.path("icons", "dspark-studio.png"))))
    prefs = None if args.screenshot else settings.Settings()
    first_start = prefs is not None and not prefs.q.allKeys()
    win = MainWindow(prefs)
    target, drafters = choose_models(args, prefs)
    if first_start and not args.target:  # nothing saved yet: the demo models; say how to open one's own
        win.statusBar().addPermanentWidget(QLabel(FIRST_START))
    win.restore(target, drafters)
    if args.prompt is not None:
        win.controls.prompt.setPlainText(args.prompt)
    if args.max_tokens:
        win.controls.set_config({**win.controls.config(), "max_tokens": args.max_tokens})
    if target is None:
        win.on_failed("no target model: choose one with File ▸ Open target (the demo models are not built yet)")

    if not args.screenshot:
        if args.presentation:
            win.show()
            win.presenter.enter()
        else:
            win.resize(1400, 900)
            win.show()
        return app.exec()

    status = {"code": 1}
    win.resize(*SCREENSHOT_SIZE)
    win.presenter.fullscreen = False
    win.show()
    if args.presentation:
        win.presenter.enter()

    def grab_and_quit() -> None:
        win.refresh()
        app.processEvents()
        ok = win.grab().save(args.screenshot)
        print(f"dspark-studio: saved {args.screenshot} ({win.width()}x{win.height()})" if ok
              else f"dspark-studio: could not write {args.screenshot}", file=sys.stderr)
        if not ok:
            status["code"] = 1
        win.close()

    def finished(info: dict) -> None:
        if status["code"] != 2:
            status["code"] = 0 if info.get("ok") else 1
        QTimer.singleShot(300, grab_and_quit)

    def give_up() -> None:
        print("dspark-studio: screenshot run timed out", file=sys.stderr)
        status["code"] = 2
        win.stop()

    win.job_finished.connect(finished)
    QTimer.singleShot(int(args.timeout * 1000), give_up)
    if target is None:
        QTimer.singleShot(300, grab_and_quit)
    else:
        QTimer.singleShot(0, win.start_compare if args.compare else win.start_run)
    app.exec()
    return status["code"]


if __name__ == "__main__":
    sys.exit(main())

"""``dspark-studio --screenshot FILE``: the window run once headless (a generation, a comparison
or a replay on the chosen models), grabbed whole into a PNG, then closed; exit 0 when the run
finished, 1 when it failed, 2 when it ran past ``--timeout``. The self-test's window run is this
one (``dspark_studio.selftest``)."""

from __future__ import annotations

import os
import sys

from .startup import headless_platform, missing_system_library, open_window, replay_speed


def run_screenshot(args) -> int:
    headless_platform(args, os.environ)
    missing = missing_system_library()
    if missing:
        print(missing, file=sys.stderr)
        return 1
    from PySide6.QtCore import QTimer

    app, win, target = open_window(args, prefs_wanted=False)
    speed = replay_speed(args)
    status = {"code": 1}
    win.resize(*args.size)
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

    def start() -> None:
        if args.replay:
            started = win.open_replay(args.replay, speed or "instant")
        elif target is not None:
            (win.start_compare if args.compare else win.start_run)()
            started = win.busy
        else:
            started = False
        if started and not win.busy:  # a benchmark opened: nothing runs, the tab is drawn
            status["code"] = 0
        if not started or not win.busy:
            QTimer.singleShot(300, grab_and_quit)

    QTimer.singleShot(0, start)
    app.exec()
    return status["code"]


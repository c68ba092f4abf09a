"""``dspark-studio --screenshot FILE``: the window run once headless (a generation, a comparison
or a replay on the chosen models, then with ``--diagnose`` a diagnosis of its drafters), grabbed
whole into a PNG, then closed; exit 0 when the run (and the diagnosis) finished, 1 when one failed,
2 when it ran past ``--timeout`` or a file given with ``--replay`` is not one the app can open
(one sentence, before a window is made). The self-test's window run is this one (``dspark_studio.install_check``).

``--timeout`` always ends the process: the run is first asked to stop (the window closes, the
screenshot is kept), and if the process is still there ``GRACE_S`` seconds later a watchdog
thread ends it with status 2, whatever the event loop is doing; should even that thread be
starved, the alarm signal ends it ``GRACE_S`` seconds after that."""

from __future__ import annotations

import os
import signal
import sys
import threading

from PySide6.QtCore import QTimer

from dspark.errors import DsparkError

from .files import benchmark, replay
from .startup import headless_platform, missing_system_library, open_window, replay_speed

#: Seconds between asking a timed-out run to stop and ending the process.
GRACE_S = 10.0


def check_replay_files(paths: list[str]) -> str | None:
    """Why the files given with ``--replay`` cannot be opened (one sentence), or None: each is
    read and checked whole, as opening it would, before anything is drawn."""
    try:
        if len(paths) == 1 and benchmark.is_bench_file(paths[0]):
            benchmark.read_bench(paths[0])
        else:
            for p in paths:
                replay.read_recording(p)
    except DsparkError as e:
        return str(e)
    return None


def start_watchdog(timeout: float) -> threading.Event:
    """End the process ``GRACE_S`` seconds after ``timeout`` unless the returned event is set
    (the run ended by itself); the alarm signal is the last resort."""
    done = threading.Event()

    def watch() -> None:
        if not done.wait(timeout + GRACE_S):
            print(
                f"dspark-studio: screenshot run timed out after {timeout:g} s and did not stop: ended",
                file=sys.stderr,
                flush=True,
            )
            os._exit(2)

    threading.Thread(target=watch, name="timeout watchdog", daemon=True).start()
    if hasattr(signal, "alarm") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(max(1, int(timeout + 2 * GRACE_S + 1)))
    return done


def run_screenshot(args) -> int:
    headless_platform(args, os.environ)
    missing = missing_system_library()
    if missing:
        print(missing, file=sys.stderr)
        return 1
    done = start_watchdog(args.timeout)
    try:
        return _run(args)
    finally:
        done.set()
        if hasattr(signal, "alarm") and threading.current_thread() is threading.main_thread():
            signal.alarm(0)


def show_asked(win, args) -> None:
    """What ``--tab`` and ``--inspect`` ask to be on screen when the window is grabbed: the tab,
    and a draft-rows cell chosen with its story shown (a cell that is not there is said)."""
    if args.tab:
        win.session.show_tab(args.tab)
    if args.inspect and not win.results.inspect_cell(args.inspect):
        print(f"dspark-studio: no draft-rows cell {args.inspect} to inspect", file=sys.stderr)
    win.refresh()


def _grab_and_quit(app, win, args, status: dict) -> None:
    if status.get("grabbed"):  # the run ended and the timeout fired: one grab
        return
    status["grabbed"] = True
    show_asked(win, args)
    app.processEvents()
    ok = win.grab().save(args.screenshot)
    print(
        f"dspark-studio: saved {args.screenshot} ({win.width()}x{win.height()})"
        if ok
        else f"dspark-studio: could not write {args.screenshot}",
        file=sys.stderr,
    )
    if not ok:
        status["code"] = 1
    win.close()


def _diagnosed_next(win, args, status: dict) -> bool:
    """With ``--diagnose``, once the run is on screen: its drafters diagnosed (Run ▸ Diagnose), the
    window grabbed when that ends. False when there is nothing more to wait for."""
    if not args.diagnose or status.get("diagnosed") or status["code"] == 2:
        return False
    status["diagnosed"] = True
    if win.diagnose():
        return True
    status["code"] = 1  # refused: said in the message bar, on the picture
    return False


def _run(args) -> int:
    if args.replay:
        problem = check_replay_files(args.replay)
        if problem:
            print(f"dspark-studio: error: {problem}", file=sys.stderr)
            return 2
    app, win, target = open_window(args, prefs_wanted=False)
    speed = replay_speed(args)
    status = {"code": 1, "ended": []}  # ended: whether each job (the run, then the diagnosis) finished
    win.resize(*args.size)
    win.presenter.fullscreen = False
    win.show()
    if args.presentation:
        win.presenter.enter()

    def grab_and_quit() -> None:
        _grab_and_quit(app, win, args, status)

    def finished(info: dict) -> None:
        status["ended"].append(bool(info.get("ok")))
        if status["code"] != 2:
            status["code"] = 0 if all(status["ended"]) else 1
        if not _diagnosed_next(win, args, status):
            QTimer.singleShot(300, grab_and_quit)

    def give_up() -> None:
        print("dspark-studio: screenshot run timed out", file=sys.stderr)
        status["code"] = 2
        win.stop()
        QTimer.singleShot(1000, grab_and_quit)  # whether or not the stopped run reports back

    win.job_finished.connect(finished)
    QTimer.singleShot(int(args.timeout * 1000), give_up)

    def start() -> None:
        if args.train_run:  # drawn from its folder, nothing to run; its legends fitted once laid out
            status["code"] = 0 if win.train.state.state else 1
            QTimer.singleShot(1500, grab_and_quit)
            return
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

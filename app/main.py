"""``dspark-studio``: start the desktop app, or (``--screenshot FILE``) run once headless, save a
grab of the whole window and exit (``dspark_studio.headless``); ``--replay FILE ...`` plays saved
runs back without loading a model; ``--self-test [FILE]`` checks this install
(``dspark_studio.install_check``); ``--check-device`` is the first-launch GPU check's child
(``dspark.gpu_check``). The options and the window they open: ``dspark_studio.startup``."""

from __future__ import annotations

import os
import sys

from .startup import build_parser, missing_system_library, open_window, refused_start, replay_speed
from .state.training import DSPARK


def main(argv: list[str] | None = None) -> int:
    """The app's exit status. What runs without a window (the self-test, the device check, figures,
    a screenshot) writes for a shell: a reader that goes away (``| head -c 1``) ends it quietly,
    and a full disk is one sentence, as with ``dspark``."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == [DSPARK]:
        from dspark.cli import main as dspark_main  # noqa: PLC0415 (light: no mlx)

        sys.argv = ["dspark", *args[1:]]
        return dspark_main()  # as the command: its stop signals (the Train tab's Pause) and output
    from dspark.cli import OutputLost, WatchedOutput, output_lost  # noqa: PLC0415 (light: no mlx)

    shown = sys.stdout
    sys.stdout = shown if isinstance(shown, WatchedOutput) else WatchedOutput(shown)
    try:
        code = _main(args)
        sys.stdout.flush()
        return code
    except OutputLost as e:
        return output_lost(e, prog="dspark-studio")
    finally:
        sys.stdout = shown


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.device:  # before dspark is imported: it applies DSPARK_DEVICE before anything imports mlx-lm
        os.environ["DSPARK_DEVICE"] = args.device
    from dspark.blas import use_fast_blas  # noqa: PLC0415 (ordered: after DSPARK_DEVICE is set)

    use_fast_blas()  # before mlx is imported (by the worker module)
    refused = refused_start(args, os.environ)
    if refused:
        print(f"dspark-studio: error: {refused}", file=sys.stderr)
        return 2
    if args.device:
        from dspark.device import use_env_device  # noqa: PLC0415 (ordered: after DSPARK_DEVICE is set)
        from dspark.errors import DsparkError  # noqa: PLC0415 (ordered: after DSPARK_DEVICE is set)

        try:
            use_env_device()  # again: dspark may have been imported before this call set the variable
        except DsparkError as e:
            print(f"dspark-studio: --device {args.device}: {e}", file=sys.stderr)
            return 2
    if args.check_device:
        from dspark.gpu_check import main as check_device  # noqa: PLC0415 (ordered: after DSPARK_DEVICE is set)

        return check_device(["--check"])
    if args.self_test is not None:
        from .install_check import run  # noqa: PLC0415 (ordered: it imports dspark, after DSPARK_DEVICE is set)

        return run(args.self_test or None, on_screen=args.on_screen)
    if args.bench_figures:
        from .figures import main as figures  # noqa: PLC0415 (slow: Qt and pyqtgraph, only for --bench-figures)

        return figures([args.bench_figures] + (["--presentation"] if args.presentation else []))
    if args.screenshot:
        from .headless import run_screenshot  # noqa: PLC0415 (slow: Qt, only for --screenshot)

        return run_screenshot(args)
    missing = missing_system_library()
    if missing:
        print(missing, file=sys.stderr)
        return 1
    from PySide6.QtCore import QTimer  # noqa: PLC0415 (slow: Qt, not for --help or --check-device)

    app, win, _ = open_window(args, prefs_wanted=True)
    win.place_on_screen()
    win.show()
    if args.presentation:
        win.presenter.enter()
    if args.replay:
        QTimer.singleShot(0, lambda: win.open_replay(args.replay, replay_speed(args)))
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())

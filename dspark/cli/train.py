"""``dspark train``: its options (from ``TrainSettings`` and ``DflashConfig``), and the run in
this process, which under ``mlx.launch`` is one of several (:mod:`dspark.training.distributed`)."""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

from ..config import DflashConfig
from ..corpus import heldout_prompts, iter_texts
from ..errors import DsparkError
from ..files import output_dir, reason, short
from ..options import KeepEpilogLines, add_options, check_options, from_args
from ..reading import kind_of_file
from ..training.texts import read_texts
from .say import say_printable, show

HELP = "train a drafter against a target (dspark train --help)"

RUN_OPTIONS = ("time_budget_minutes", "checkpoint_minutes", "eval_prompts", "eval_tokens", "seed", "rank_timeout")
DATA_OPTIONS = (
    "seq_len",
    "ctx_len",
    "prompt_len",
    "self_distill",
    "long_prompts",
    "long_prompt_len",
    "max_sequences",
    "anchors_per_seq",
    "feature_cache_mb",
)


TRAIN_EPILOG = """\
fine-tuning, pausing and finishing:
  dspark train --target T --data F --out OUT --from DRAFTER     start from DRAFTER's weights
  kill -TERM PID (or Ctrl-C)     pause: a checkpoint, then exit; continue with the same command + --resume
  kill -USR1 PID                 stop now and finish: write the best held-out weights (--eval-every) as
                                 the drafter, else the last, then the final evaluation and report
  dspark train --target T --out OUT --resume --finish     the same for a paused run
progress: OUT/train_log.jsonl (a line per step and per held-out measurement, the best marked
"best": true; the best weights in OUT/.train/best/) and OUT/.train/status.json (state, step, steps,
message, pid: preparing, training, measuring, paused, finished or failed).

several processes or machines (data parallel, mlx.distributed):
  mlx.launch --backend ring -n 2 --python $(which python) -- $(which dspark) train ...
  mlx.launch --backend ring --hosts 10.0.0.1,10.0.0.2 --python PY -- DSPARK train ...
runs one training over the processes (a hostfile and --backend jaccl work too). --batch stays
the whole batch: each of N processes takes 1/N of it (it must divide evenly) and the gradients
are summed, so N processes train the same weights as one with the same --batch. Each process
reads the data itself (the same target, data and options on every machine) and runs the target
only on its part of each batch, and with --self-distill writes its share of the continuations.
Rank 0 alone writes --out and shows progress; each process logs to OUT/.train/rank-N.log.
--resume starts every process from rank 0's checkpoint. A process that dies stops the others
with one sentence (one that stops answering: after --rank-timeout); the last checkpoint stays."""


def add_parser(subparsers):
    from ..training.trainer import TrainSettings  # noqa: PLC0415 (slow: mlx, the training stack)

    ap = subparsers.add_parser(
        "train",
        help=HELP,
        description="Train a DSpark drafter against a frozen Gemma-4 target.",
        epilog=TRAIN_EPILOG,
        formatter_class=KeepEpilogLines,
    )
    ap.add_argument("--target", required=True, help="target model directory")
    ap.add_argument(
        "--data",
        nargs="+",
        help="text files (.txt/.py/.md), folders, or .jsonl with a text/prompt field or a chat's messages (rendered "
        "with the target's chat template); default: the built-in corpus",
    )
    ap.add_argument(
        "--heldout",
        nargs="+",
        help="held-out prompt files for the final evaluation (default: held-out corpus prompts, or a slice of --data)",
    )
    ap.add_argument("--out", required=True, help="drafter directory to write")
    ap.add_argument(
        "--from",
        dest="from_drafter",
        metavar="DRAFTER",
        help="fine-tune: start from this drafter's weights (any kind and format dspark loads) instead of new "
        "ones; its kind, format and shape are kept, and OUT is written in its format; --resume keeps the run's",
    )
    ap.add_argument(
        "--kind",
        choices=("block", "eagle3", "assistant"),
        help="the drafter to train: block (DSpark / DFlash, in --format; the default), eagle3 (an EAGLE-3 "
        "head, speculators' layout) or assistant (a Gemma-4 assistant, Google's layout); --resume keeps the run's",
    )
    add_options(ap.add_argument_group("drafter"), DflashConfig)
    add_options(ap.add_argument_group("optimisation"), TrainSettings, skip=RUN_OPTIONS + DATA_OPTIONS)
    add_options(ap.add_argument_group("data"), TrainSettings, only=DATA_OPTIONS)
    r = ap.add_argument_group("run")
    r.add_argument("--resume", action="store_true", help="continue the run saved in --out")
    r.add_argument("--force", action="store_true", help="overwrite a non-empty --out")
    r.add_argument(
        "--finish",
        action="store_true",
        help="with --resume: end the paused run now without training further, writing its best held-out "
        "weights (--eval-every) as the drafter, else its last, then the final evaluation and report "
        "(SIGUSR1 does the same to a running dspark train)",
    )
    add_options(r, TrainSettings, only=RUN_OPTIONS)
    r.add_argument("--no-progress", action="store_true")
    return ap


def run(a) -> int:
    from ..training.distributed import OtherRankStopped, RankLost, Refused, World  # noqa: PLC0415 (slow: mlx)
    from ..training.status import RunStatus  # noqa: PLC0415 (slow: mlx)

    world = World.join()  # the processes mlx.launch started, else this one alone (--rank-timeout once checked)
    from ..training.loop import finish_asked_early  # noqa: PLC0415 (slow: mlx)

    status = RunStatus(a.out, main=world.main, command=["train", *a.argv])
    try:
        with finish_asked_early():
            return _train(a.parser, a, argv=a.argv, world=world, status=status)
    except OtherRankStopped:  # another process said why
        _ended(status, "failed", "another process of the run stopped")
        return 2
    except (DsparkError, KeyboardInterrupt) as e:
        world.log(f"stopped: {str(e) or 'interrupted'}")
        if isinstance(e, DsparkError):
            _ended(status, "failed", str(e))
        else:
            _ended(status, "paused", "stopped by a signal; continue with --resume")
        if world.main or isinstance(e, (RankLost, Refused)):
            raise
        return 2 if isinstance(e, DsparkError) else 130  # rank 0 meets the same and says it, once
    except Exception:
        _ended(status, "failed", "internal error (the log file named on the terminal holds the details)")
        raise


def _ended(status, state: str, message: str) -> None:
    """The run's status on its way out, once it has one (a command refused before it took the
    folder leaves a paused run's status as it was); a pause the loop already recorded stays."""
    if status.started and not (state == "paused" and status.state == "paused"):
        status.set(state, message=message)


def _train(parser, a, *, argv, world, status) -> int:
    """``dspark train`` in this process (one of ``world``): the checks every process passes
    before any writes (a refusal said once), rank 0's run on every process when resuming, the
    training, and the rank's own log when there are several."""
    from ..loading import load_target  # noqa: PLC0415 (slow: mlx)
    from ..training.resume import DATA_FILE, check_resume_data, saved_start  # noqa: PLC0415 (slow: mlx, the training stack)
    from ..training.train import REPORT_FILE, train_drafter  # noqa: PLC0415 (slow: mlx, the training stack)
    from ..training.trainer import STATE_FILE, TRAIN_DIR  # noqa: PLC0415 (slow: mlx)

    out = Path(a.out)
    with world.together():
        if a.finish and not a.resume:
            raise DsparkError("--finish ends a paused run: give it with --resume")
        try:  # a path past PATH_MAX fails at the first look
            if out.exists() and not out.is_dir():
                raise DsparkError(f"{out} is a file, not a directory")
            if out.is_dir() and any(out.iterdir()) and not (a.resume or a.force):
                raise DsparkError(
                    f"{out} exists and is not empty (use --resume to continue it or --force to overwrite)"
                )
        except OSError as e:
            raise DsparkError(f"cannot use {short(out)} as the drafter's folder ({reason(e)})") from None
        if a.resume and not a.force:
            check_resumable(out)
        if a.finish:
            from ..training.best import refuse_finish  # noqa: PLC0415 (slow: mlx)

            refuse_finish(True, (out / STATE_FILE).is_file(), out)
        if a.from_drafter and a.resume and (out / STATE_FILE).is_file():
            from ..training.start import check_same_start  # noqa: PLC0415 (slow: mlx)

            check_same_start(saved_start(out), a.from_drafter, out)
    files = [f.name for f in out.iterdir() if f.is_file() and not f.name.startswith(".")] if out.is_dir() else []
    src = world.mirror(out, [*files, STATE_FILE, DATA_FILE]) if a.resume else out
    with world.together():
        cfg, settings = _train_settings(parser, a, argv, src)
        head = _head(parser, a, argv=argv, src=src, cfg=cfg)
        if head is not None:
            from ..training.stepwise import refuse_world  # noqa: PLC0415 (slow: mlx)

            refuse_world(world, head.kind)
        world.check_batch(settings.batch_anchors)
        output_dir(out, allow_existing=True)
        target = load_target(a.target)
        start = None
        if a.from_drafter and not (a.resume and (src / STATE_FILE).is_file()):
            start, cfg, head = _start(parser, a, argv=argv, target=target, world=world)
        texts = read_texts(a.data) if a.data else list(iter_texts("train"))
        heldout = read_texts(a.heldout) if a.heldout else (None if a.data else heldout_prompts(settings.eval_prompts))
        note = check_resume_data(src, texts) if a.resume and a.data else None
    if note and world.main:
        say_printable(f"note: {note}")
    world.timeout = settings.rank_timeout
    world.open_log(out / TRAIN_DIR / f"rank-{world.rank}.log")
    if head is not None:
        from ..training.stepwise import train_head  # noqa: PLC0415 (slow: mlx, the training stack)

        train = train_head
    else:
        train = train_drafter
    train(
        target,
        texts,
        out,
        head or cfg,
        settings=settings,
        heldout_texts=heldout,
        resume=a.resume,
        progress=not a.no_progress,
        log=world.say if world.size > 1 else None,
        world=world,
        start=start,
        finish=a.finish,
        status=status,
        **({} if head is not None else {"read_from": src}),
    )
    if world.main:
        show(f"wrote {out} (report: {out / REPORT_FILE})")
    return 0


def check_resumable(out: Path) -> None:
    """Refuse ``--resume`` (without ``--force``) where nothing can be resumed but a new run
    would overwrite a drafter: a folder holding one without its training state (copied without
    its hidden ``.train/``), or whose state is no regular file (a FIFO, a link to /dev/zero).
    A new or empty folder, or one with a self-distillation to continue, starts as it did."""
    from ..training.distill import PARTIAL_GLOB  # noqa: PLC0415 (slow: mlx)
    from ..training.trainer import STATE_FILE, TRAIN_DIR  # noqa: PLC0415 (slow: mlx)

    state = out / STATE_FILE
    if os.path.lexists(state):
        try:
            mode = os.stat(state).st_mode
        except OSError:
            mode = None  # a link to nothing
        if mode is None or not stat.S_ISREG(mode):
            what = kind_of_file(mode) if mode is not None else "a link to nothing"
            raise DsparkError(
                f"--resume: {state} is not a training checkpoint but {what}; remove it, or start over in "
                f"{out} with --force (without --resume)"
            )
        return
    if not out.is_dir() or any((out / TRAIN_DIR).glob(PARTIAL_GLOB)):
        return
    drafter = sorted(f.name for f in out.iterdir() if not f.name.startswith("."))
    if drafter:
        raise DsparkError(
            f"--resume: {out} holds a drafter ({', '.join(drafter[:3])}{', ...' if len(drafter) > 3 else ''}) "
            f"but no training state to continue ({STATE_FILE} is missing: was the folder copied without its "
            f"hidden files?), and a new run would overwrite it: use --force to start over in it, or train "
            f"into a new --out"
        )


def _start(parser, a, *, argv, target, world):
    """(the starting drafter of ``--from``, its block drafter config or None, its head config or
    None): loaded and checked against ``target`` and the drafter options given (one that
    contradicts its shape is refused, naming both values)."""
    from ..training.start import check_given, load_start  # noqa: PLC0415 (slow: mlx)

    notes = []
    start = load_start(a.from_drafter, target, say=notes.append)
    given = _given_options(parser, argv)
    flags = {act.dest: act.option_strings[0] for act in parser._actions if act.option_strings}
    check_given(start, {k: getattr(a, k) for k in given}, flags)
    if world.main:
        for note in notes:
            say_printable(f"note: {note}")
    if start.kind == "block":
        return start, start.config(), None
    from ..training.stepwise import refuse_world  # noqa: PLC0415 (slow: mlx)

    refuse_world(world, start.kind)
    return start, None, start.config()


#: The drafter options an autoregressive head takes; any other one given is refused.
HEAD_OPTIONS = ("block_size", "num_layers", "intermediate_size", "tap_layers")


def _head(parser, a, *, argv, src: Path, cfg):
    """The ``HeadConfig`` of an eagle3 or assistant run (``--kind``, or the kind of the run
    ``--resume`` continues), from the drafter options given; None for a block drafter. An option
    that does not apply to the kind is refused in one sentence."""
    from ..training.heads import HeadConfig  # noqa: PLC0415 (slow: mlx)
    from ..training.resume import saved_run  # noqa: PLC0415 (slow: mlx, the training stack)

    saved = saved_run(src) if a.resume and src.is_dir() else None
    saved_kind = saved[0].get("kind", "block") if saved else None
    kind = a.kind or saved_kind or "block"
    if saved_kind is not None and a.kind is not None and a.kind != saved_kind:
        raise DsparkError(f"--resume: the run in {src} trains the {saved_kind} kind, not --kind {a.kind}")
    if kind == "block":
        return None
    given = _given_options(parser, argv)
    flags = {act.dest: act.option_strings[0] for act in parser._actions if act.option_strings}
    for name in sorted(given & set(DflashConfig.__dataclass_fields__) - set(HEAD_OPTIONS)):
        flag = flags[name]
        raise DsparkError(f"{flag} is a block drafter's setting: an {kind} head has no such setting (leave it out)")
    if kind == "assistant" and "tap_layers" in given:
        raise DsparkError("an assistant reads the target's last hidden state and K/V, not taps: leave out --taps")
    if "ctx_len" in given:
        raise DsparkError(f"--ctx-len bounds a block drafter's context rows: an {kind} head reads every committed row")
    chosen = {k: getattr(cfg, k) for k in HEAD_OPTIONS if k in given}
    return HeadConfig.from_dict({**(saved[0] if saved else {}), **chosen, "kind": kind})


def _train_settings(parser, a, argv, src: Path):
    """(drafter config, training settings) from the options, checked; with ``--resume``, those
    the run in ``src`` was started with, for every option not given again."""
    from ..training.resume import saved_run  # noqa: PLC0415 (slow: mlx, the training stack)
    from ..training.trainer import TrainSettings  # noqa: PLC0415 (slow: mlx)

    saved = saved_run(src) if a.resume and src.is_dir() else None
    if saved:  # continue as the run was started: options not given again keep their saved values
        given = _given_options(parser, argv)
        drafter = saved[0] if "kind" not in saved[0] else {}  # a head's shape is read by _head
        cfg = DflashConfig.from_dict({**drafter, **{k: getattr(a, k) for k in given if hasattr(DflashConfig(), k)}})
        settings = TrainSettings(
            **{
                **{k: v for k, v in saved[1].items() if k in TrainSettings.__dataclass_fields__},
                **{k: getattr(a, k) for k in given if k in TrainSettings.__dataclass_fields__},
            }
        )
    else:
        cfg, settings = from_args(DflashConfig, a), from_args(TrainSettings, a)
    check_options(cfg)
    check_options(settings)
    return cfg, settings


def _given_options(parser: argparse.ArgumentParser, argv) -> set[str]:
    """The destinations of the options actually written on the command line."""
    probe = argparse.ArgumentParser(add_help=False)
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            kw = {"dest": action.dest, "default": argparse.SUPPRESS}
            if action.nargs == 0:
                kw["action"] = "store_const"
                kw["const"] = True
            else:
                kw["nargs"] = action.nargs
            probe.add_argument(*action.option_strings, **kw)
    known, _ = probe.parse_known_args(argv)
    return set(vars(known))

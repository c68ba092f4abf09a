"""``dspark make-demo``: rebuild the bundled demo models and measure them, stage by stage
(:mod:`dspark.demo.build` holds the recipe and the stages)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from .. import prompts
from ..demo.evaluation import measure, say_stderr, write_prompt_set
from ..errors import DsparkError
from ..files import output_dir
from ..options import check_options, check_range
from ..resources import demo_dir, prompts_dir

HELP = "rebuild and measure the bundled demo models (dspark make-demo --help)"


def add_parser(subparsers):
    from ..demo import build  # noqa: PLC0415 (slow: mlx, the training stack: its recipe is TrainSettings)

    ap = subparsers.add_parser("make-demo", help=HELP, description=build.__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(demo_dir()), help="where the demo models go (default: resources/demo)")
    ap.add_argument("--only", choices=build.STAGES, help="run one stage only (default: all, in order)")
    ap.add_argument(
        "--prompt-set",
        default=str(prompts_dir() / "demo.json"),
        help="the prompt set file the prompts stage writes and the measure stage reads",
    )
    ap.add_argument("--target-minutes", type=float, help="time budget of the target's training (default: none)")
    ap.add_argument("--drafter-steps", type=int, default=build.TRAINING.steps, help="optimizer steps of each drafter")
    ap.add_argument("--drafter-minutes", type=float, help="time budget of each drafter's training (default: none)")
    ap.add_argument(
        "--drafter-sequences",
        type=int,
        default=build.TRAINING.max_sequences,
        help="self-distilled sequences, when no drafter's are on disk to share (default: the recipe's)",
    )
    ap.add_argument(
        "--drafters",
        nargs="+",
        choices=list(build.DRAFTERS),
        help="the drafters the drafters stage builds (default: every one of the recipe, in its order)",
    )
    ap.add_argument("--fresh", action="store_true", help="start over instead of resuming checkpoints")
    return ap


def run(a) -> int:
    from ..demo import build  # noqa: PLC0415 (slow: mlx, the training stack)
    from ..loading import load_target  # noqa: PLC0415 (slow: mlx)

    for flag, value in (("--target-minutes", a.target_minutes), ("--drafter-minutes", a.drafter_minutes)):
        check_range(flag, value, 0.01)
    settings = dataclasses.replace(
        build.TRAINING,
        steps=a.drafter_steps,
        time_budget_minutes=a.drafter_minutes,
        max_sequences=a.drafter_sequences,
    )
    check_options(settings)
    out = Path(a.out).expanduser()
    stages = [a.only] if a.only else list(build.STAGES)
    if out.exists() and not out.is_dir():
        raise DsparkError(f"--out {out} is a file, not a directory")
    if {"target", "drafters", "calibrate"} & set(stages):  # the stages that write into it
        output_dir(out, allow_existing=True)
    for stage in stages:
        t0 = time.perf_counter()
        if stage != "target" and not (out / "target" / "config.json").is_file():
            raise DsparkError(f"no demo target in {out / 'target'}: run the target stage first")
        if stage == "target":
            build.build_target(out, a.target_minutes, resume=not a.fresh)
        elif stage == "drafters":
            kinds = tuple(k for k in build.DRAFTERS if k in (a.drafters or build.DRAFTERS))
            build.build_drafters(out, settings, resume=not a.fresh, kinds=kinds)
        elif stage == "calibrate":
            build.calibrate(out)
        elif stage == "prompts":
            write_prompt_set(Path(a.prompt_set), load_target(out / "target"), say_stderr)
        else:
            measure(out, build.DRAFTERS, list(prompts.read_set(Path(a.prompt_set)).prompts), say_stderr)
        say_stderr(f"stage {stage} done in {(time.perf_counter() - t0) / 60:.1f} min")
    return 0

"""``dspark train`` and ``dspark calibrate``: their options come from ``DflashConfig`` and
``TrainSettings`` (see :mod:`dspark.options`). Errors raise ``DsparkError``; ``dspark.cli``
prints them as one line."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..drafter import DflashConfig
from ..errors import DsparkError
from ..options import add_options, check_options, from_args
from .trainer import TrainSettings

RUN_OPTIONS = ("time_budget_minutes", "checkpoint_minutes", "eval_prompts", "eval_tokens", "seed")
DATA_OPTIONS = ("seq_len", "ctx_len", "prompt_len", "self_distill", "max_sequences", "anchors_per_seq",
                "feature_cache_mb")


def train_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dspark train", description="Train a DSpark drafter against a frozen Gemma-4 target.")
    ap.add_argument("--target", required=True, help="target model directory")
    ap.add_argument("--data", nargs="+", help="text files (.txt/.py/.md), folders, or .jsonl with a text/prompt field; "
                    "default: the built-in corpus")
    ap.add_argument("--heldout", nargs="+", help="held-out prompt files for the final evaluation "
                    "(default: held-out corpus prompts, or a slice of --data)")
    ap.add_argument("--out", required=True, help="drafter directory to write")
    add_options(ap.add_argument_group("drafter"), DflashConfig)
    add_options(ap.add_argument_group("optimisation"), TrainSettings, skip=RUN_OPTIONS + DATA_OPTIONS)
    add_options(ap.add_argument_group("data"), TrainSettings, only=DATA_OPTIONS)
    r = ap.add_argument_group("run")
    r.add_argument("--resume", action="store_true", help="continue the run saved in --out")
    r.add_argument("--force", action="store_true", help="overwrite a non-empty --out")
    add_options(r, TrainSettings, only=RUN_OPTIONS)
    r.add_argument("--no-progress", action="store_true")
    return ap


def train_main(argv: list[str] | None = None) -> int:
    from ..demo.corpus import heldout_prompts, iter_texts
    from ..target import load_target
    from .run import REPORT_FILE, train_drafter
    from .texts import read_texts

    a = train_parser().parse_args(argv)
    cfg, settings = from_args(DflashConfig, a), from_args(TrainSettings, a)
    check_options(cfg)
    check_options(settings)
    out = Path(a.out)
    if out.exists() and any(out.iterdir()) and not (a.resume or a.force):
        raise DsparkError(f"{out} exists and is not empty (use --resume to continue it or --force to overwrite)")
    target = load_target(a.target)
    texts = read_texts(a.data) if a.data else list(iter_texts("train"))
    heldout = read_texts(a.heldout) if a.heldout else (None if a.data else heldout_prompts(settings.eval_prompts))
    train_drafter(target, texts, out, cfg, settings, heldout_texts=heldout, resume=a.resume, progress=not a.no_progress)
    print(f"wrote {out} (report: {out / REPORT_FILE})")
    return 0


def calibrate_main(argv: list[str] | None = None) -> int:
    from ..drafter import DflashDrafter
    from ..target import load_target
    from .calibrate import calibrate_drafter, format_calibration

    ap = argparse.ArgumentParser(prog="dspark calibrate", description="Fit STS temperatures of a drafter's confidence head.")
    ap.add_argument("--target", required=True)
    ap.add_argument("--drafter", required=True, help="drafter directory (the temperatures are saved into it)")
    ap.add_argument("--prompts", nargs="+", help="prompt files (.txt/.py/.md, or .jsonl with text/prompt); "
                    "default: held-out corpus prompts")
    ap.add_argument("--rounds", type=int, default=200, help="speculative rounds to collect")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens generated per prompt")
    ap.add_argument("--prompt-len", type=int, default=64, help="prompt tokens cut from each stretch of a prompt file")
    ap.add_argument("--out", help="save the calibrated drafter here instead of over --drafter")
    a = ap.parse_args(argv)
    target = load_target(a.target)
    drafter = DflashDrafter.load(a.drafter, target=target)
    if a.prompts:
        from .data import cut_prompts, encode_all
        from .texts import read_texts

        prompts = cut_prompts(encode_all(target, read_texts(a.prompts)), a.max_tokens + a.prompt_len, a.prompt_len)
    else:
        from ..demo.corpus import heldout_prompts

        prompts = heldout_prompts(max(4, a.rounds // 8))
    if not prompts:
        raise DsparkError("no prompts to calibrate on")
    result = calibrate_drafter(target, drafter, prompts, rounds=a.rounds, max_tokens=a.max_tokens)
    drafter.calibration = result.kept()
    drafter.save(a.out or a.drafter)
    print(format_calibration(result))
    print(f"saved calibration to {Path(a.out or a.drafter)}"
          + ("" if drafter.calibration else " (raw confidences kept: the fit did not lower the held-out ECE)"))
    return 0

"""What a training run writes when it ends, beside the drafter: ``train_report.json`` (the
training's settings, rates and losses, then the held-out evaluation and calibration) and the
drafter's profile (what ``dspark diagnose`` and ``auto`` read of it).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import mlx.core as mx
import numpy as np

from ..diagnose.style import data_style
from ..drafter_profile import REPORT_FILE, longest_context, measured, write_own
from ..drafting import BlockDrafter
from ..target import Target
from .data import Sequences
from .trainer import DrafterTrainer, TrainSettings


def evaluate(target: Target, drafter: BlockDrafter, held, s: TrainSettings, *, report: dict, out: Path, say) -> None:
    """The held-out evaluation on the ``held`` prompts and calibration, into ``report`` (and the
    drafter's calibration, saved again in ``out``); ``say`` hears each step."""
    if s.eval_prompts > 0 and held:
        from .calibrate import evaluate_drafter  # noqa: PLC0415 (slow: the engine, only to evaluate)

        report["heldout"], calibration = evaluate_drafter(
            target, drafter, held[: s.eval_prompts], s.eval_tokens, say=say
        )
        if calibration is not None:
            drafter.calibration = calibration.kept()
            drafter.save(out)


def write_profile(
    target: Target, drafter: BlockDrafter, seqs: Sequences, s: TrainSettings, *, report: dict, out: Path
) -> None:
    """The drafter's profile in ``out``, what ``dspark diagnose`` compares with: its held-out
    acceptance on this target (from ``report``), the prompt style of its training data ``seqs``
    (in the chat template or not, thinking or not: read from the data itself) and the longest
    context it was trained on."""
    acc = (report.get("heldout") or {}).get("per_position_acceptance")
    if not acc:
        return
    rows = [row[:n] for row, n in zip(seqs.tokens[:512], seqs.lengths[:512])]  # a sample is evidence enough
    context = longest_context(s.seq_len, s.prompt_len, s.long_prompts if s.self_distill else 0, s.long_prompt_len)
    templated, thinking = data_style(target, rows)
    write_own(
        out,
        measured(
            acc,
            target,
            block_size=drafter.block_size,
            templated=templated,
            thinking=thinking,
            context_length=context,
            source="training",
            prompts=report["heldout"]["prompts"],
            rounds=report["heldout"]["rounds"],
        ),
    )


def training_report(
    target: Target,
    drafter: BlockDrafter,
    *,
    trained_as: dict,
    s: TrainSettings,
    sequences: int,
    trainer: DrafterTrainer,
    stopped: str | None,
    recent: list,
    done: int,
    train_seconds: float,
    distill_seconds: float,
) -> dict:
    """What train_report.json records of the training itself (the evaluation is added after):
    the drafter's settings ``trained_as`` and the run's ``s``, the ``sequences`` trained on, what
    ``stopped`` the loop and the ``recent`` losses, and the rates. ``done`` is the steps this run
    took (the last ones of ``trainer.step`` when it resumed) in ``train_seconds``;
    ``distill_seconds`` the self-distillation's time."""
    return {
        "target_id": target.target_id,
        "drafter": trained_as,
        "parameters": drafter.num_params(),
        "settings": asdict(s),
        "sequences": sequences,
        "steps_done": trainer.step,
        "stopped_by": stopped,
        "final_loss": dict(zip(("loss", "ce", "tv", "conf"), np.mean(recent, axis=0).tolist())) if recent else None,
        "train_seconds": train_seconds,
        "processes": trainer.world.size,
        "steps_per_sec": done / train_seconds if done else 0.0,
        "anchors_per_sec": done * s.batch_anchors / train_seconds if done else 0.0,
        "block_tokens_per_sec": done * s.batch_anchors * drafter.block_size / train_seconds if done else 0.0,
        "target_forward_seconds": trainer.features.seconds,
        "self_distill_seconds": distill_seconds,
        "device": str(mx.default_device()),
    }


__all__ = ["REPORT_FILE", "evaluate", "training_report", "write_profile"]

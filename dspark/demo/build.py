"""``dspark make-demo``: rebuild the bundled demo models and measure them, in stages that each
resume from their own checkpoints (``--only target|drafters|calibrate|prompts|measure``; without
``--only``, all of them in that order):

1. ``target``: a Gemma-4 (``gemma4_text``) trained from scratch on the Python standard library's
   source (``dspark.demo.pretrain``; its recipe is ``pretrain.TargetRecipe``);
2. ``drafters``: a DSpark drafter (Markov and confidence heads, in vLLM speculators' format), a
   DFlash-style one (heads off, in z-lab's format), an EAGLE-3 head (speculators' EAGLE-3 layout)
   and a Gemma-4 assistant (Google's ``gemma4_assistant`` layout), trained by self-distillation
   on exactly the same sequences (those of the first drafter that has them), a share of them
   after long prompts; the block drafters with a context window that bounds the draft's cost on
   long prompts (``DRAFTERS``, ``TRAINING``);
3. ``calibrate``: the DSpark drafter's confidence head, on more held-out rounds than training's
   own evaluation;
4. ``prompts``: the prompt set the app opens on (``dspark.demo.evaluation``);
5. ``measure``: ``results.json``, the figures the demo README cites besides ``dspark bench``'s.

Every stage shows its progress with an estimate of the time left, and an interrupted rebuild
(Ctrl-C, SIGTERM, a killed process) continues where it stopped when run again.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..corpus import heldout_prompts, iter_texts, prompt_sites
from ..drafter import DflashConfig
from ..training.heads import HeadConfig
from ..training.trainer import TrainSettings
from .evaluation import say_stderr
from .pretrain import train_target
from .target_model import CKPT_DIR, CKPT_FILE

#: The demo recipe, as data: few draft layers, so a block costs a small share of a step of the
#: 12-layer target, as a published drafter does of its 48-layer one; a context window of 512 rows;
#: the same settings on the same self-distilled sequences, a quarter of them after prompts of up
#: to 1,024 tokens. The DFlash-style drafter has two layers: in z-lab's layout slot 0 is the
#: anchor only, and with one layer the slot predicting anchor + 1 learns the anchor through a
#: single attention (one layer reached held-out tau 1.97 where DSpark's, whose anchor slot
#: predicts, reached 3.95), and its block then costs about what DSpark's sequential heads add.
WINDOW = 512
DRAFTERS = {
    "dspark": DflashConfig(
        block_size=7, num_layers=1, mask_token_id=4, markov_rank=256, format="speculators", context_window=WINDOW
    ),
    "dflash": DflashConfig(
        block_size=7,
        num_layers=2,
        mask_token_id=4,
        markov=False,
        confidence=False,
        format="zlab",
        context_window=WINDOW,
    ),
    # the autoregressive kinds, as small: one llama layer (EAGLE-3: mlx-vlm's port runs it), an
    # assistant of one sliding and one full layer (Google's pattern, shortened), 5 drafts a round
    "eagle3": HeadConfig(kind="eagle3", block_size=5, num_layers=1),
    "assistant": HeadConfig(kind="assistant", block_size=5, num_layers=2),
}
TRAINING = TrainSettings(
    steps=4000,
    self_distill=True,
    max_sequences=4000,
    long_prompts=0.25,
    long_prompt_len=1024,
    eval_prompts=8,
    eval_tokens=128,
    feature_cache_mb=10_000,
)
STAGES = ("target", "drafters", "calibrate", "prompts", "measure")


def build_target(out: Path, minutes: float | None, resume: bool) -> None:
    if resume and (out / "target" / "config.json").is_file() and not (out / "target" / CKPT_DIR / CKPT_FILE).is_file():
        print(
            f"the demo target in {out / 'target'} is built (no checkpoint to continue): kept; --fresh rebuilds it",
            file=sys.stderr,
        )
        return
    resumable = resume and (out / "target" / CKPT_DIR / CKPT_FILE).is_file()
    train_target(out / "target", time_budget_minutes=minutes, resume=resumable)


def build_drafters(out: Path, settings: TrainSettings, resume: bool, kinds=tuple(DRAFTERS)) -> None:
    from ..loading import load_target  # noqa: PLC0415 (slow: this stage only)
    from ..training import stepwise  # noqa: PLC0415 (slow: this stage only)
    from ..training.resume import DATA_FILE, saved_step  # noqa: PLC0415 (slow: this stage only)
    from ..training.train import train_drafter  # noqa: PLC0415 (slow: this stage only)

    target = load_target(out / "target")
    # Prompts: stretches of the train files, and def/class headers of the train files (the
    # kind of prompt the held-out evaluation uses, from files it never sees).
    texts = list(iter_texts("train")) + prompt_sites("train")
    held = heldout_prompts(settings.eval_prompts)
    for kind in kinds:
        step = saved_step(out / kind) if resume else None
        if resume and (out / kind / "config.json").is_file() and (step is None or step >= settings.steps):
            # Finished: training it again would rewrite its report and calibration with nothing learnt.
            print(
                f"the {kind} drafter in {out / kind} is built"
                + (f" ({step} steps)" if step else "")
                + ": kept; --fresh rebuilds it"
                + (", a larger --drafter-steps trains it further" if step else ""),
                file=sys.stderr,
            )
            continue
        # Every drafter trains on the first one's self-distilled sequences (the first whose
        # data is on disk: a checkout ships the drafters, not their data): same data.
        kept = [out / k / DATA_FILE for k in DRAFTERS if k != kind and (out / k / DATA_FILE).is_file()]
        shared = kept[0] if kept else None
        train = stepwise.train_head if isinstance(DRAFTERS[kind], HeadConfig) else train_drafter
        train(
            target,
            texts,
            out / kind,
            DRAFTERS[kind],
            settings=settings,
            heldout_texts=held,
            resume=resume,
            data_file=shared,
        )


def calibrate(out: Path, rounds: int = 600) -> None:
    """The DSpark drafter's confidence head calibrated anew on ``rounds`` held-out rounds."""
    from ..loading import load_drafter, load_target  # noqa: PLC0415 (slow: this stage only)
    from ..training.calibrate import calibrate_drafter, format_calibration  # noqa: PLC0415 (slow: this stage only)

    target = load_target(out / "target")
    drafter = load_drafter(out / "dspark", target)
    result = calibrate_drafter(target, drafter, heldout_prompts(40), rounds=rounds)
    drafter.calibration = result.kept()
    drafter.save(out / "dspark")
    say_stderr("calibration: " + format_calibration(result))

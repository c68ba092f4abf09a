"""Train the project's demo target from scratch: a Gemma-4-architecture LM (``gemma4_text``) on
the Python standard library's source (:mod:`dspark.corpus`), saved as a plain mlx-lm
checkpoint directory that ``mlx_lm.load(dir)`` rebuilds exactly.

The recipe is data (:class:`TargetRecipe`): the model's shape (``target_model.MODEL_ARGS``) and
the schedule, in phases of (steps, sequence length, batch): most steps on short windows, which
train fastest per token, then long windows, so the global layers learn the positions a long
prompt reaches. One AdamW learning-rate schedule (warm-up, cosine decay) spans all phases.

Tokenizer: byte-level BPE (4096 ids) with fixed special ids ``<pad>``=0, ``<eos>``=1,
``<bos>``=2, ``<unk>``=3, ``<mask>``=4; nothing is prepended (see ``dspark.demo.bpe``).

Checkpoints (model + optimizer + step + recipe, safetensors and JSON, never pickle) go to
``<out>/.ckpt/`` every ``checkpoint_every`` steps and on Ctrl-C or SIGTERM; the data order is a
pure function of (seed, phase, step), so ``resume=True`` continues exactly. The final files are
written under temporary names and renamed into place, ``config.json`` last.

Run: ``dspark make-demo --only target [--out DIR] [--target-minutes M]`` (it resumes a stopped
run by itself); the ``dspark`` command loads OpenBLAS before MLX, which this module, importing
MLX, cannot do for itself.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from .. import corpus
from ..errors import DsparkError
from ..modeldir import read_header
from ..reading import parse_json
from ..training.loop import Progress, train_loop
from .bpe import encode_documents, load_tokenizer, save_tokenizer, train_tokenizer
from .target_model import (
    CKPT_DIR,
    CKPT_FILE,
    MODEL_ARGS,
    Batches,
    build_model,
    count_parameters,
    eval_windows,
    evaluate,
    load_checkpoint,
    loss_fn,
    lr_schedule,
    model_config,
    save_checkpoint,
    save_model,
    verify_saved,
)


@dataclass(frozen=True)
class Phase:
    steps: int
    seq_len: int
    batch_size: int


@dataclass(frozen=True, kw_only=True)
class TargetRecipe:
    """How the demo target is made. 4,096 tokens a step in both phases: 640 steps of 16 x 256,
    then 160 of 2 x 2,048 (3.3M tokens, 1.3 epochs of the train split). Sized to finish in about
    two hours on two CPU cores (430 tokens/s measured there), so that one sitting builds it."""

    phases: tuple[Phase, ...] = (Phase(640, 256, 16), Phase(160, 2048, 2))
    lr: float = 1.5e-3
    warmup: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    model: dict = field(default_factory=lambda: dict(MODEL_ARGS))  # gemma4_text ModelArgs fields
    checkpoint_every: int = 50
    eval_seq_len: int = 256  # held-out perplexity on windows of this length (comparable across recipes)
    eval_seqs: int = 128

    @property
    def steps(self) -> int:
        return sum(p.steps for p in self.phases)

    def phase_at(self, step: int) -> tuple[int, Phase, int]:
        """(phase index, phase, step within it) of global ``step``."""
        for i, p in enumerate(self.phases):
            if step < p.steps or i == len(self.phases) - 1:
                return i, p, step
            step -= p.steps
        raise AssertionError("unreachable")

    def to_dict(self) -> dict:
        return {**asdict(self), "phases": [asdict(p) for p in self.phases]}

    @classmethod
    def from_dict(cls, d: dict) -> TargetRecipe:
        return cls(**{**d, "phases": tuple(Phase(**p) for p in d["phases"])})


def train_target(
    out_dir: str | Path,
    recipe: TargetRecipe = TargetRecipe(),
    *,
    resume: bool = False,
    time_budget_minutes: float | None = None,
    compile_step: bool | None = None,
    tokenizer_dir: str | Path | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Train (or, with ``resume``, continue) the demo target into ``out_dir``; returns the stats
    written to ``training.json``. Progress: a bar on a terminal (unless not ``progress``), else a
    line every 10 steps. ``time_budget_minutes`` stops this call's loop after that long
    and still writes a usable model (resume later to finish the schedule). ``tokenizer_dir``
    reuses a saved tokenizer instead of training one (tests)."""
    out_dir = Path(out_dir)
    ckpt_dir, say = out_dir / CKPT_DIR, log or (lambda m: print(m, file=sys.stderr, flush=True))
    ckpt_path = ckpt_dir / CKPT_FILE
    if resume:
        recipe = _resumed_recipe(ckpt_path, recipe)
    train_ids, held_ids = _token_ids(ckpt_dir, resume, tokenizer_dir)
    batches = [Batches(train_ids, p.seq_len, p.batch_size, recipe.seed + i) for i, p in enumerate(recipe.phases)]
    held_windows = eval_windows(held_ids, recipe.eval_seq_len, recipe.eval_seqs)
    model, optimizer, state = _model_and_state(recipe, ckpt_path if resume else None, say)
    history = state["history"]
    loss_and_update = _update_step(model, optimizer, recipe.grad_clip, compile_step)

    def one_step() -> dict[str, str]:
        t = time.perf_counter()
        i, phase, local = recipe.phase_at(state["step"])
        loss, gnorm = loss_and_update(*batches[i](local))
        mx.eval(loss, gnorm, model.parameters(), optimizer.state)
        loss = loss.item()
        if not math.isfinite(loss):
            raise DsparkError(f"the target's loss became {loss} at step {state['step']}: lower the learning rate")
        state["step"] += 1
        history["train_time_s"] += time.perf_counter() - t
        history["tokens"] += phase.batch_size * phase.seq_len
        smooth = history.get("smoothed_loss")
        history["smoothed_loss"] = smooth = loss if smooth is None else 0.95 * smooth + 0.05 * loss
        if state["step"] % 10 == 0:
            history["log"].append(
                {"step": state["step"], "loss": round(smooth, 4), "lr": round(optimizer.learning_rate.item(), 6)}
            )
        if state["step"] % recipe.checkpoint_every == 0:
            held = evaluate(model, held_windows[:32])
            history["log"].append({"step": state["step"], "heldout_loss_32": round(held, 4)})
        rate = history["tokens"] / max(history["train_time_s"], 1e-9)
        return {
            "loss": f"{smooth:.3f}",
            "phase": f"{i + 1}/{len(recipe.phases)} ({phase.seq_len})",
            "tok/s": f"{rate:,.0f}",
        }

    def checkpoint() -> None:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        save_checkpoint(
            ckpt_path, model, optimizer, step=state["step"], meta={"recipe": recipe.to_dict(), "history": history}
        )

    budget = time_budget_minutes * 60 if time_budget_minutes else None
    try:
        stopped = train_loop(
            lambda: state["step"],
            recipe.steps,
            one_step,
            checkpoint=checkpoint,
            checkpoint_due=lambda: state["step"] % recipe.checkpoint_every == 0,
            progress=Progress(total=recipe.steps, desc="pretrain", bar=progress, say=say),
            budget_s=budget,
        )
    except KeyboardInterrupt:
        say(f"interrupted at step {state['step']}; checkpoint saved. Continue with --resume.")
        raise
    checkpoint()
    return _finish(
        out_dir,
        model,
        config=model_config(recipe.model),
        recipe=recipe,
        history=history,
        step=state["step"],
        stopped=stopped,
        train_ids=train_ids,
        held_ids=held_ids,
        say=say,
    )


def _token_ids(ckpt_dir: Path, resume: bool, tokenizer_dir) -> tuple[list, list]:
    """(train documents, held-out documents) as token ids, with the tokenizer the checkpoint
    keeps (trained now, or read from ``tokenizer_dir``, on a fresh start)."""
    if resume:
        try:
            tok = load_tokenizer(ckpt_dir)
        except DsparkError as e:
            raise DsparkError(f"{e}: the checkpoint cannot be continued; --fresh starts over") from None
    else:
        tok = load_tokenizer(Path(tokenizer_dir)) if tokenizer_dir else train_tokenizer(corpus.iter_texts("train"))
        save_tokenizer(tok, ckpt_dir)
    return (
        encode_documents(tok, list(corpus.iter_texts("train"))),
        encode_documents(tok, list(corpus.iter_texts("heldout"))),
    )


def _model_and_state(recipe: TargetRecipe, resume_from: Path | None, say):
    """(model, optimizer, {"step", "history"}), fresh or as the checkpoint ``resume_from`` left them."""
    mx.random.seed(recipe.seed)
    model = build_model(model_config(recipe.model))
    optimizer = optim.AdamW(
        learning_rate=lr_schedule(recipe.lr, recipe.steps, recipe.warmup), weight_decay=recipe.weight_decay
    )
    optimizer.init(model.trainable_parameters())
    state = {"step": 0, "history": {"train_time_s": 0.0, "tokens": 0, "log": []}}
    if resume_from is not None:
        state["step"], meta = load_checkpoint(resume_from, model, optimizer)
        state["history"] = meta["history"]
        say(f"resume: at step {state['step']} of {recipe.steps}")
    say(
        f"model: gemma4_text, {count_parameters(model):,} parameters; {recipe.steps} steps in phases "
        + ", ".join(f"{p.steps} x {p.batch_size}x{p.seq_len}" for p in recipe.phases)
    )
    return model, optimizer, state


def _update_step(model, optimizer, grad_clip: float, compile_step: bool | None):
    """(x, y) -> (loss, gradient norm), the optimizer's update applied."""

    def loss_and_update(x, y):
        loss, grads = nn.value_and_grad(model, loss_fn)(model, x, y)
        grads, gnorm = optim.clip_grad_norm(grads, grad_clip)
        optimizer.update(model, grads)
        return loss, gnorm

    if compile_step is None:
        # On a 2-core x86 CPU the compiled step took 10-14 s of CPU time per step against 7-8 s
        # uncompiled (and its first call can take a minute); compile on a GPU only.
        compile_step = mx.default_device().type == mx.gpu
    if not compile_step:
        return loss_and_update
    return partial(mx.compile, inputs=[model.state, optimizer.state], outputs=[model.state, optimizer.state])(
        loss_and_update
    )


def _resumed_recipe(ckpt_path: Path, asked: TargetRecipe) -> TargetRecipe:
    """The recipe a checkpoint was trained with, which must be the one asked for (the data order
    and the schedule depend on every field)."""
    if not ckpt_path.is_file():
        raise DsparkError(f"no checkpoint to resume from at {ckpt_path}")
    meta = read_header(ckpt_path).get("__metadata__") or {}
    try:  # the checkpoint is checked whole and its metadata read bounded before anything is used
        saved = TargetRecipe.from_dict(parse_json(meta.get("meta", ""), f"{ckpt_path} (its metadata)")["recipe"])
    except (KeyError, TypeError, ValueError):
        raise DsparkError(f"{ckpt_path} is not a readable pretraining checkpoint: remove it to start over") from None
    if saved.to_dict() != asked.to_dict():
        diff = next(k for k, v in saved.to_dict().items() if asked.to_dict()[k] != v)
        raise DsparkError(
            f"--resume: the target in {ckpt_path.parent.parent} was trained with another {diff} "
            f"({getattr(saved, diff)!r}); train into a new --out to change it"
        )
    return saved


def _finish(
    out_dir: Path,
    model,
    *,
    config: dict,
    recipe: TargetRecipe,
    history: dict,
    step: int,
    stopped: str,
    train_ids: np.ndarray,
    held_ids: np.ndarray,
    say,
) -> dict:
    """Evaluate ``model`` on the ``train_ids`` and ``held_ids`` token streams, write the model
    directory (``config``) and ``training.json`` (the ``recipe``, the ``history`` of ``step``
    steps and what ``stopped`` them) into ``out_dir``, check it reloads; ``say`` hears the result.
    Returns what training.json holds."""
    say("evaluating ...")
    held_loss = evaluate(model, eval_windows(held_ids, recipe.eval_seq_len, recipe.eval_seqs))
    train_loss = evaluate(model, eval_windows(train_ids, recipe.eval_seq_len, recipe.eval_seqs))
    longest = max(p.seq_len for p in recipe.phases)
    held_long = evaluate(model, eval_windows(held_ids, longest, 8), batch=1)
    stats = {
        "steps_done": step,
        "steps_scheduled": recipe.steps,
        "stopped_by": stopped,
        "tokens_seen": history["tokens"],
        "train_time_minutes": round(history["train_time_s"] / 60, 2),
        "tokens_per_second": round(history["tokens"] / max(history["train_time_s"], 1e-9), 1),
        "final_train_loss_smoothed": round(history.get("smoothed_loss") or math.nan, 4),
        "train_loss_eval": round(train_loss, 4),
        "heldout_loss": round(held_loss, 4),
        "heldout_perplexity": round(math.exp(held_loss), 3),
        "heldout_eval": f"{recipe.eval_seqs} windows of {recipe.eval_seq_len} tokens spread over the held-out files",
        f"heldout_loss_{longest}": round(held_long, 4),
        "parameters": count_parameters(model),
        "recipe": recipe.to_dict(),
        "corpus": corpus.corpus_info(),
        "corpus_tokens": {"train": int(len(train_ids)), "heldout": int(len(held_ids))},
        "mlx_version": mx.__version__,
        "device": str(mx.default_device()),
        "loss_log": history["log"],
    }
    save_model(
        model,
        config,
        tok_dir=out_dir / CKPT_DIR,
        out_dir=out_dir,
        extra_files={"training.json": json.dumps(stats, indent=2) + "\n"},
    )
    stats.update(verify_saved(out_dir, model, next(corpus.iter_texts("heldout"))[:2000]))
    say(
        f"done: {step} steps, {history['tokens']:,} tokens in {history['train_time_s'] / 60:.1f} min; train loss "
        f"{train_loss:.4f}, held-out loss {held_loss:.4f} (perplexity {math.exp(held_loss):.2f}); saved to {out_dir}"
    )
    return stats

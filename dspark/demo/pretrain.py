"""Build and train the project's demo target: a tiny Gemma-4-architecture LM, from scratch.

No model hub is reachable, so the demo target is trained here on the Python standard library
source (see :mod:`dspark.corpus`). The result is a plain mlx-lm checkpoint directory
(``config.json`` with ``"model_type": "gemma4_text"``, ``model.safetensors``, tokenizer
files) that ``mlx_lm.load(dir)`` rebuilds exactly; the DSpark engine treats it like any other
Gemma 4 target.

Tokenizer: byte-level BPE (4096 ids) with fixed special ids ``<pad>``=0, ``<eos>``=1,
``<bos>``=2, ``<unk>``=3, ``<mask>``=4 (``<mask>`` is id 4 in Gemma too; the drafter uses it).
BOS convention: **nothing is prepended**, neither in training nor at inference
(``add_bos_token`` is false and the tokenizer has no post-processor), so ``encode`` then
``decode`` gives back the text exactly. Training text is the train-split files, each followed
by ``<eos>``, concatenated and cut into windows of ``seq_len`` tokens.

Run: ``python -m dspark.pretrain --out resources/demo/target [--steps N]
[--time-budget-minutes M] [--resume] [--seed 0]``. Checkpoints (model + optimizer + step +
RNG, safetensors and JSON, never pickle) go to ``<out>/.ckpt/``; the final model files are
written atomically (temporary name, then rename).
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim

from ..options import Parser
from . import corpus
from .bpe import encode_documents, load_tokenizer, save_tokenizer, train_tokenizer
from .target_model import (
    CKPT_DIR,
    CKPT_FILE,
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


# ----------------------------------------------------------------------------- training

def _fmt_hms(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def train_target(
    out_dir: str | Path,
    steps: int = 360,
    *,
    batch_size: int = 16,
    seq_len: int = 256,
    lr: float = 2e-3,
    warmup: int = 30,
    weight_decay: float = 0.01,
    grad_clip: float = 1.0,
    seed: int = 0,
    time_budget_minutes: float | None = None,
    resume: bool = False,
    checkpoint_every: int = 50,
    eval_seqs: int = 128,
    compile_step: bool | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Train (or resume) the demo target into ``out_dir`` and return the training stats.

    ``steps`` fixes the learning-rate schedule (warm-up, then cosine decay over ``steps``);
    ``time_budget_minutes`` bounds the training loop of this call: at the budget it stops
    after the current step, checkpoints, and still writes a usable final model (resume later
    with ``resume=True`` to finish the schedule). ``resume=True`` continues from
    ``<out_dir>/.ckpt/`` with the tokenizer and settings saved there.
    """
    out_dir = Path(out_dir)
    ckpt_dir = out_dir / CKPT_DIR
    ckpt_path = ckpt_dir / CKPT_FILE
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    t_setup = time.time()

    hyper = dict(steps=steps, batch_size=batch_size, seq_len=seq_len, lr=lr, warmup=warmup,
                 weight_decay=weight_decay, grad_clip=grad_clip, seed=seed)
    if resume:
        if not ckpt_path.exists():
            raise FileNotFoundError(f"no checkpoint to resume from at {ckpt_path}")
        _, meta = mx.load(str(ckpt_path), return_metadata=True)
        saved = json.loads(meta["meta"])["hyper"]
        # The data order and schedule depend on these; only the step count may change.
        for key in ("batch_size", "seq_len", "seed"):
            if saved[key] != hyper[key]:
                say(f"resume: using saved {key}={saved[key]} (not {hyper[key]})")
        hyper = {**saved, "steps": steps}
        tok = load_tokenizer(ckpt_dir)
        say(f"resume: tokenizer from {ckpt_dir}")
    else:
        say("training tokenizer on the train split ...")
        tok = train_tokenizer(corpus.iter_texts("train"))
        save_tokenizer(tok, ckpt_dir)

    train_ids = encode_documents(tok, list(corpus.iter_texts("train")))
    held_ids = encode_documents(tok, list(corpus.iter_texts("heldout")))
    info = corpus.corpus_info()
    say(f"corpus: Python {info['python_version']} stdlib, {info['files_train']} train files "
        f"({len(train_ids):,} tokens), {info['files_heldout']} held-out files "
        f"({len(held_ids):,} tokens); setup {time.time() - t_setup:.0f}s")

    batches = Batches(train_ids, hyper["seq_len"], hyper["batch_size"], hyper["seed"])
    held_windows = eval_windows(held_ids, hyper["seq_len"], eval_seqs)
    train_windows = eval_windows(train_ids, hyper["seq_len"], eval_seqs)

    mx.random.seed(hyper["seed"])
    config = model_config()
    model = build_model(config)
    n_params = count_parameters(model)
    optimizer = optim.AdamW(
        learning_rate=lr_schedule(hyper["lr"], steps, hyper["warmup"]),
        weight_decay=hyper["weight_decay"])
    optimizer.init(model.trainable_parameters())

    step, history = 0, {"train_time_s": 0.0, "tokens": 0, "log": []}
    if resume:
        step, meta = load_checkpoint(ckpt_path, model, optimizer)
        history = meta["history"]
        say(f"resume: at step {step}")
    say(f"model: gemma4_text, {n_params:,} parameters; {steps} steps of "
        f"{hyper['batch_size']}x{hyper['seq_len']} tokens")

    def checkpoint():
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        save_checkpoint(ckpt_path, model, optimizer, step, {"hyper": hyper, "history": history})

    def train_step(x, y):
        loss, grads = nn.value_and_grad(model, loss_fn)(model, x, y)
        grads, gnorm = optim.clip_grad_norm(grads, hyper["grad_clip"])
        optimizer.update(model, grads)
        return loss, gnorm

    if compile_step is None:
        # Measured on the 2-core CPU: the compiled step took 10-14 s of CPU time per step
        # against 7-8 s uncompiled (and its first call can take a minute), so compile only
        # on a GPU.
        compile_step = mx.default_device().type == mx.gpu
    if compile_step:
        state = [model.state, optimizer.state]
        train_step = partial(mx.compile, inputs=state, outputs=state)(train_step)

    stop = {"signal": None}

    def on_signal(signum, _frame):
        stop["signal"] = signum

    old_handlers = {}
    if threading.current_thread() is threading.main_thread():  # signals: main thread only
        old_handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    budget_s = time_budget_minutes * 60 if time_budget_minutes else None
    tokens_per_step = hyper["batch_size"] * hyper["seq_len"]
    bar = None
    if progress and sys.stderr.isatty():  # a log file gets plain lines instead
        from tqdm import tqdm
        bar = tqdm(total=steps, initial=step, desc="pretrain", unit="step", dynamic_ncols=True)
    write = bar.write if bar else say
    t0 = time.time()
    start_step = step
    smooth = history.get("smoothed_loss")  # EMA of the batch loss, carried across resumes
    stopped_by = "steps"
    try:
        while step < steps:
            if stop["signal"] is not None:
                stopped_by = "signal"
                break
            if budget_s is not None and time.time() - t0 >= budget_s:
                stopped_by = "time budget"
                break
            ts = time.time()
            x, y = batches(step)
            loss, gnorm = train_step(x, y)
            mx.eval(loss, gnorm, model.parameters(), optimizer.state)
            loss = loss.item()
            if not math.isfinite(loss):
                raise FloatingPointError(f"loss became {loss} at step {step}")
            dt = time.time() - ts
            step += 1
            history["train_time_s"] += dt
            history["tokens"] += tokens_per_step
            smooth = loss if smooth is None else 0.95 * smooth + 0.05 * loss
            history["smoothed_loss"] = smooth
            elapsed = time.time() - t0
            tps = tokens_per_step * (step - start_step) / elapsed
            left = (steps - step) * elapsed / (step - start_step)
            if budget_s is not None:
                left = min(left, budget_s - elapsed)
            if bar:
                bar.update(1)
                bar.set_postfix_str(
                    f"loss {smooth:.3f} | {tps:,.0f} tok/s | left {_fmt_hms(left)}", refresh=False)
            if step % 10 == 0 or step == steps:
                history["log"].append({"step": step, "loss": round(smooth, 4),
                                       "lr": round(optimizer.learning_rate.item(), 6)})
                if bar is None:
                    write(f"step {step}/{steps} loss {smooth:.4f} (batch {loss:.4f}) "
                          f"gnorm {gnorm.item():.2f} lr {optimizer.learning_rate.item():.2e} "
                          f"{tps:,.0f} tok/s, left {_fmt_hms(left)}")
            if step % checkpoint_every == 0 and step < steps:
                checkpoint()
                held = evaluate(model, held_windows[:32])
                history["log"].append({"step": step, "heldout_loss_32": round(held, 4)})
                write(f"step {step}: checkpoint saved; held-out loss (32 seqs) {held:.4f}")
    finally:
        if bar:
            bar.close()
        for s, h in old_handlers.items():
            signal.signal(s, h)

    checkpoint()
    if stopped_by == "signal":
        say(f"interrupted at step {step}; checkpoint saved. Continue with --resume.")
        raise KeyboardInterrupt

    say("evaluating ...")
    held_loss = evaluate(model, held_windows)
    train_loss = evaluate(model, train_windows)
    stats = {
        "steps_done": step,
        "steps_scheduled": steps,
        "stopped_by": stopped_by,
        "tokens_seen": history["tokens"],
        "train_time_minutes": round(history["train_time_s"] / 60, 2),
        "tokens_per_second": round(history["tokens"] / max(history["train_time_s"], 1e-9), 1),
        "final_train_loss_smoothed": round(smooth, 4) if smooth is not None else None,
        "train_loss_eval": round(train_loss, 4),
        "heldout_loss": round(held_loss, 4),
        "heldout_perplexity": round(math.exp(held_loss), 3),
        "eval_tokens_each": int(held_windows.shape[0] * hyper["seq_len"]),
        "parameters": n_params,
        "hyper": hyper,
        "corpus": info,
        "corpus_tokens": {"train": int(len(train_ids)), "heldout": int(len(held_ids))},
        "mlx_version": mx.__version__,
        "loss_log": history["log"],
    }
    save_model(model, config, ckpt_dir, out_dir,
               {"training.json": json.dumps(stats, indent=2) + "\n"})
    sample = next(corpus.iter_texts("heldout"))[:2000]
    stats.update(verify_saved(out_dir, model, sample))
    say(f"done: {step} steps, {history['tokens']:,} tokens in "
        f"{history['train_time_s'] / 60:.1f} min ({stats['tokens_per_second']:,.0f} tok/s); "
        f"train loss {train_loss:.4f}, held-out loss {held_loss:.4f} "
        f"(perplexity {math.exp(held_loss):.2f}); saved to {out_dir}")
    return stats


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m dspark.pretrain",
                                description=__doc__.split("\n")[0])
    p.add_argument("--out", default="resources/demo/target", help="output model directory")
    p.add_argument("--steps", type=int, default=360,
                   help="total optimizer steps (sets the LR schedule)")
    p.add_argument("--time-budget-minutes", type=float, default=None,
                   help="stop the training loop after this long and still write the model")
    p.add_argument("--resume", action="store_true", help="continue from <out>/.ckpt/")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--compile", dest="compile_step", action="store_true", default=None,
                   help="mx.compile the train step (default: only on a GPU)")
    p.add_argument("--no-compile", dest="compile_step", action="store_false")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    try:
        train_target(a.out, a.steps, batch_size=a.batch_size, seq_len=a.seq_len, lr=a.lr,
                     warmup=a.warmup, seed=a.seed, time_budget_minutes=a.time_budget_minutes,
                     resume=a.resume, checkpoint_every=a.checkpoint_every,
                     compile_step=a.compile_step, progress=not a.no_progress)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

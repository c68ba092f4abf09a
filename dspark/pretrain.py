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

import argparse
import dataclasses
import json
import math
import os
import shutil
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
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.models import gemma4_text

from dspark import corpus
from dspark.bpe import (
    BOS_ID,
    EOS_ID,
    MASK_ID,
    PAD_ID,
    TOKENIZER_FILES,
    VOCAB_SIZE,
    _atomic_write_text,
    encode_documents,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)


#: The demo target's shape. 5 sliding-window layers (window 64) then 1 global layer, like
#: Gemma 4's 5:1 pattern; the window is small so ordinary generations cross it.
MODEL_ARGS = dict(
    model_type="gemma4_text",
    hidden_size=256,
    num_hidden_layers=6,
    intermediate_size=1024,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=64,
    global_head_dim=64,
    sliding_window=64,
    sliding_window_pattern=6,
    num_kv_shared_layers=0,
    hidden_size_per_layer_input=0,
    vocab_size=VOCAB_SIZE,
    vocab_size_per_layer_input=VOCAB_SIZE,
    final_logit_softcapping=30.0,
    tie_word_embeddings=True,
    attention_k_eq_v=False,
    enable_moe_block=False,
    use_double_wide_mlp=False,
    max_position_embeddings=4096,
    pad_token_id=PAD_ID,
)

CKPT_DIR = ".ckpt"
CKPT_FILE = "checkpoint.safetensors"


# ----------------------------------------------------------------------------- model

def model_config() -> dict:
    """The full ``config.json``: every ModelArgs field spelled out (so ``mlx_lm.load``
    never falls back to a default that differs from the trained model) plus the token ids."""
    args = gemma4_text.ModelArgs(**MODEL_ARGS)
    config = dataclasses.asdict(args)
    config.update(
        architectures=["Gemma4ForCausalLM"],
        eos_token_id=EOS_ID,
        bos_token_id=BOS_ID,
        pad_token_id=PAD_ID,
        mask_token_id=MASK_ID,
        torch_dtype="float32",
    )
    return config


def build_model(config: dict | None = None) -> gemma4_text.Model:
    config = config or model_config()
    model = gemma4_text.Model(gemma4_text.ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(v.size for _, v in tree_flatten(model.parameters()))


def loss_fn(model, x, y):
    return nn.losses.cross_entropy(model(x), y, reduction="mean")


# ----------------------------------------------------------------------------- data

class Batches:
    """Training windows, in an order that is a pure function of (seed, step).

    The token stream is cut into windows of ``seq_len + 1`` tokens (consecutive windows share
    one token, so every token is a target once). Epoch ``e`` visits the windows in the
    permutation drawn from ``numpy.random.default_rng([seed, e])``; batch ``s`` holds
    samples ``s*batch .. (s+1)*batch - 1`` of that endless sequence. Resuming therefore needs
    only the seed and the step.
    """

    def __init__(self, ids: np.ndarray, seq_len: int, batch: int, seed: int):
        self.ids, self.seq_len, self.batch, self.seed = ids, seq_len, batch, seed
        self.n = (len(ids) - 1) // seq_len
        if self.n < 1:
            raise ValueError("training corpus is shorter than one sequence")
        self._perm_epoch, self._perm = -1, None

    def _order(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.n)
            self._perm_epoch = epoch
        return self._perm

    def __call__(self, step: int) -> tuple[mx.array, mx.array]:
        rows = []
        for g in range(step * self.batch, (step + 1) * self.batch):
            w = int(self._order(g // self.n)[g % self.n])
            rows.append(self.ids[w * self.seq_len: w * self.seq_len + self.seq_len + 1])
        arr = np.stack(rows).astype(np.int32)
        return mx.array(arr[:, :-1]), mx.array(arr[:, 1:])


def eval_windows(ids: np.ndarray, seq_len: int, max_seqs: int) -> np.ndarray:
    """Up to ``max_seqs`` non-overlapping windows spread evenly over a token stream."""
    n = (len(ids) - 1) // seq_len
    picks = np.unique(np.linspace(0, n - 1, num=min(n, max_seqs)).round().astype(int))
    return np.stack([ids[w * seq_len: w * seq_len + seq_len + 1] for w in picks]).astype(np.int32)


def evaluate(model, windows: np.ndarray, batch: int = 16) -> float:
    """Mean next-token loss (nats/token) over the windows."""
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        chunk = windows[i:i + batch]
        x, y = mx.array(chunk[:, :-1]), mx.array(chunk[:, 1:])
        loss = nn.losses.cross_entropy(model(x), y, reduction="sum")
        total += loss.item()
        count += y.size
    return total / max(count, 1)


# ----------------------------------------------------------------------------- checkpoints

def lr_schedule(lr: float, steps: int, warmup: int):
    """Linear warm-up to ``lr``, then cosine decay to ``lr / 10`` at ``steps``."""
    warmup = max(1, min(warmup, steps - 1)) if steps > 1 else 1
    return optim.join_schedules(
        [optim.linear_schedule(lr * 0.01, lr, warmup),
         optim.cosine_decay(lr, max(1, steps - warmup), lr * 0.1)],
        [warmup])


def save_checkpoint(path: Path, model, optimizer, step: int, meta: dict) -> None:
    arrays = {f"model.{k}": v for k, v in tree_flatten(model.parameters())}
    arrays.update({f"opt.{k}": v for k, v in tree_flatten(optimizer.state)})
    # RNG state: MLX's generator is only used to initialise the weights (no dropout), and
    # the data order is a pure function of (seed, step) -- see Batches -- so the seed and
    # the next sample index are the whole random state of a run.
    rng = {"data_seed": meta["hyper"]["seed"], "next_sample": step * meta["hyper"]["batch_size"]}
    metadata = {"step": str(step), "rng": json.dumps(rng), "meta": json.dumps(meta)}
    tmp = path.with_name("checkpoint.tmp.safetensors")
    mx.save_safetensors(str(tmp), arrays, metadata=metadata)
    os.replace(tmp, path)


def load_checkpoint(path: Path, model, optimizer) -> tuple[int, dict]:
    arrays, metadata = mx.load(str(path), return_metadata=True)
    model.load_weights([(k[6:], v) for k, v in arrays.items() if k.startswith("model.")])
    optimizer.state = tree_unflatten([(k[4:], v) for k, v in arrays.items()
                                      if k.startswith("opt.")])
    mx.eval(model.parameters(), optimizer.state)
    return int(metadata["step"]), json.loads(metadata["meta"])


def save_model(model, config: dict, tok_dir: Path, out_dir: Path, extra_files: dict) -> None:
    """Write the final model directory. Every file goes to a temporary name first and is then
    renamed into place (``config.json`` last), so an interrupted run never leaves a truncated
    file behind."""
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = dict(tree_flatten(model.parameters()))
    tmp = out_dir / "model.tmp.safetensors"
    mx.save_safetensors(str(tmp), weights, metadata={"format": "mlx"})
    for name in TOKENIZER_FILES:
        if tok_dir.resolve() != out_dir.resolve():
            shutil.copyfile(tok_dir / name, out_dir / (name + ".tmp"))
            os.replace(out_dir / (name + ".tmp"), out_dir / name)
    os.replace(tmp, out_dir / "model.safetensors")
    for name, text in extra_files.items():
        _atomic_write_text(out_dir / name, text)
    _atomic_write_text(out_dir / "config.json", json.dumps(config, indent=2) + "\n")


def verify_saved(out_dir: Path, model, sample_text: str) -> dict:
    """Reload ``out_dir`` with plain ``mlx_lm.load`` and check it is the same model (same
    logits) with a tokenizer that round-trips text. Raises ``RuntimeError`` if not."""
    import mlx_lm

    loaded, tok = mlx_lm.load(str(out_dir))
    ids = tok.encode(sample_text)
    if tok.decode(ids) != sample_text:
        raise RuntimeError("saved tokenizer does not round-trip text")
    if ids and ids[0] == BOS_ID:
        raise RuntimeError("saved tokenizer prepends <bos>; expected nothing prepended")
    if tok.eos_token_id != EOS_ID or tok.bos_token_id != BOS_ID:
        raise RuntimeError("saved tokenizer has the wrong <eos>/<bos> ids")
    x = mx.array([ids[:128]])
    diff = mx.abs(loaded(x) - model(x)).max().item()
    if not diff < 1e-4:
        raise RuntimeError(f"reloaded model differs from the trained one (max |dlogit| {diff})")
    return {"max_abs_logit_diff": diff}


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
    p = argparse.ArgumentParser(prog="python -m dspark.pretrain",
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

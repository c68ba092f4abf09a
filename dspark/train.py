"""Train a DSpark (or DFlash-style) drafter against a frozen Gemma-4 target: ``dspark train``.

Data. Texts are tokenized and cut into sequences of ``seq_len`` tokens. With self-distillation
(the recommended mode: a drafter should learn what the *target* writes) each sequence keeps
only its first ``prompt_len`` tokens as a prompt and the target writes the rest greedily;
anchors then start at the last prompt token, so every label is target output.

Samples (DSpark slot convention, ``reference/drafters.md`` 5.1): for an anchor at position p
the block input is ``[x_p, MASK x (G-1)]``, slot k predicts ``x_{p+k+1}``, the context is the
target's tap rows of positions < p (the last ``ctx_len`` of them when set), and the Markov head
is teacher-forced with ``x_p .. x_{p+G-1}``. A batch draws ``anchors_per_seq`` anchors from each
of a few sequences, whose context rows are projected once and shared by their anchors
(``DflashDrafter.forward_train_packed``). The frozen target runs
once per sequence; its tap rows and final normed hidden states are cached and reused for every
anchor drawn from that sequence (the target's logits for p^t are recomputed from the hidden
rows a batch needs, which is far smaller than caching [S, V] logits).

Loss: :func:`dspark.losses.dspark_loss`. Only drafter parameters get gradients (the target's
embedding and head are borrowed through ``target.projection`` and stay frozen).

Checkpoints: the drafter directory itself (native format) plus ``train_state.safetensors``
(drafter weights, AdamW state, step, numpy RNG state as JSON metadata; never pickle) and, for
self-distillation, ``train_data.safetensors`` with the generated sequences, so ``--resume``
continues exactly where the run stopped. At the end the drafter is calibrated (STS) and
evaluated with the real generation loop on held-out prompts; see ``train_report.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from .drafter import DflashConfig, DflashDrafter
from .errors import DsparkError
from .losses import default_decay, dspark_loss, position_weights
from .target import Target
from .train_data import (
    Sequences,
    TargetFeatures,
    progress_bar,
    held_out_prompts,
    build_training_data,
    encode_all,
)

STATE_FILE = "train_state.safetensors"
DATA_FILE = "train_data.safetensors"
REPORT_FILE = "train_report.json"
#: Default data budget: one training sequence per this many anchors the run draws. Each
#: sequence offers ~seq_len anchor positions; reusing it this often keeps self-distillation
#: (the target writing the data) cheaper than training on it.
ANCHORS_PER_SEQUENCE = 64


# ----------------------------------------------------------------------------- trainer
def lr_schedule(lr: float, steps: int, warmup: float) -> Callable:
    """Linear warm-up over ``warmup`` (a fraction of ``steps``), then cosine decay to 0."""
    warm = max(1, round(warmup * steps))
    if warm >= steps:
        return optim.linear_schedule(lr / warm, lr, steps)
    return optim.join_schedules([optim.linear_schedule(lr / warm, lr, warm), optim.cosine_decay(lr, steps - warm)], [warm])


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 2000
    batch_anchors: int = 32
    lr: float = 6e-4
    warmup: float = 0.04  # fraction of steps
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    seq_len: int = 256
    ctx_len: int = 0  # 0: seq_len
    anchors_per_seq: int = 8  # anchors drawn from one sequence per batch
    loss_decay: float = 0.0  # 0: default_decay(block size)
    compile: bool = True
    feature_cache_mb: int = 2048  # cap on cached target features (they cost (m+1)*H*4 bytes per token)


class DrafterTrainer:
    """One drafter, its AdamW state and the anchor sampler; ``train_step`` does one update."""

    def __init__(self, target: Target, drafter: DflashDrafter, seqs: Sequences, settings: TrainSettings, seed: int = 0):
        self.target, self.drafter, self.seqs, self.s = target, drafter, seqs, settings
        self.proj = target.projection
        self.G = drafter.cfg.block_size
        S, H, m = seqs.tokens.shape[1], target.dims.hidden_size, drafter.m
        per_seq_mb = S * (m + 1) * H * 4 / 2**20
        self.features = TargetFeatures(target, drafter.cfg.tap_layers, seqs, int(settings.feature_cache_mb / per_seq_mb))
        self.weights = position_weights(self.G, settings.loss_decay or default_decay(self.G))
        self.rng = np.random.default_rng(seed)
        self.step = 0
        self.optimizer = optim.AdamW(learning_rate=lr_schedule(settings.lr, settings.steps, settings.warmup), weight_decay=settings.weight_decay)
        self.optimizer.init(drafter.net.trainable_parameters())
        self._loss_and_grad = nn.value_and_grad(drafter.net, self._loss)
        self._update = None  # built lazily so a resumed optimizer state is the one compiled in

    # --- batches ------------------------------------------------------------------------
    def sample_batch(self) -> tuple[mx.array, ...]:
        """``batch_anchors`` random anchors, ``anchors_per_seq`` from each of a few sequences:
        (tap rows of those sequences [N, S, m*H], owner sequence [A], anchor position [A],
        prev_toks [A, G], labels [A, G], valid [A, G], target hidden rows p..p+G-1 [A, G, H])."""
        A, G, seqs = self.s.batch_anchors, self.G, self.seqs
        n_seq = math.ceil(A / self.s.anchors_per_seq)
        chosen = self.rng.choice(len(seqs), size=n_seq, replace=n_seq > len(seqs))
        S = seqs.tokens.shape[1]
        owner = np.repeat(np.arange(n_seq), math.ceil(A / n_seq))[:A]
        lo = seqs.first_anchor[chosen][owner]
        hi = seqs.lengths[chosen][owner] - 2  # the anchor needs at least one label
        p = lo + (self.rng.random(A) * (hi - lo + 1)).astype(np.int64)
        block_pos = p[:, None] + np.arange(G)[None, :]  # slot k: anchor-side position p+k
        valid = block_pos + 1 <= (seqs.lengths[chosen][owner] - 1)[:, None]
        toks = seqs.tokens[chosen].reshape(-1)
        feats = self.features.get_many(chosen)
        taps = mx.stack([f[0] for f in feats])
        hidden = mx.concatenate([f[1] for f in feats], axis=0)
        flat = lambda pos: owner[:, None] * S + np.clip(pos, 0, S - 1)  # noqa: E731  (index into the batch's rows)
        return (
            taps,
            mx.array(owner, mx.int32),
            mx.array(p, mx.int32),
            mx.array(toks[flat(block_pos)], mx.int32),
            mx.array(toks[flat(block_pos + 1)], mx.int32),
            mx.array(valid),
            hidden[mx.array(flat(block_pos))],
        )

    # --- loss and update ----------------------------------------------------------------
    def _loss(self, taps, owner, positions, prev, labels, valid, t_hidden):
        out = self.drafter.forward_train_packed(self.proj, taps, owner, positions, prev, self.s.ctx_len)
        parts = dspark_loss(out.logits, out.conf_logits, self.proj.logits(t_hidden), labels, valid, self.weights)
        return parts.total, parts.ce, parts.tv, parts.conf

    def loss(self, batch) -> dict[str, float]:
        """The loss terms on ``batch`` without updating anything."""
        return dict(zip(("loss", "ce", "tv", "conf"), (float(x) for x in self._loss(*batch))))

    def _build_update(self):
        net, opt, clip = self.drafter.net, self.optimizer, self.s.grad_clip

        def update(*batch):
            (total, ce, tv, conf), grads = self._loss_and_grad(*batch)
            grads, norm = optim.clip_grad_norm(grads, clip) if clip > 0 else (grads, mx.array(0.0))
            opt.update(net, grads)
            return total, ce, tv, conf, norm

        if not self.s.compile:
            return update
        state = [net.state, opt.state]
        return mx.compile(update, inputs=state, outputs=state)

    def train_step(self, batch) -> list[mx.array]:
        """One AdamW update; returns (loss, ce, tv, conf, grad norm), not yet evaluated."""
        if self._update is None:
            self._update = self._build_update()
        out = self._update(*batch)
        self.step += 1
        mx.async_eval(out, self.drafter.net.parameters(), self.optimizer.state)
        return out

    # --- checkpoints --------------------------------------------------------------------
    def save_state(self, out_dir: Path, extra: dict | None = None) -> None:
        arrays = {f"net.{k}": v for k, v in tree_flatten(self.drafter.net.parameters())}
        arrays.update({f"opt.{k}": v for k, v in tree_flatten(self.optimizer.state)})
        meta = {"format": "dspark-train-state", "step": self.step, "rng": self.rng.bit_generator.state,
                "settings": asdict(self.s), **(extra or {})}
        tmp = out_dir / "train_state.tmp.safetensors"
        mx.save_safetensors(str(tmp), arrays, metadata={"meta": json.dumps(meta)})
        os.replace(tmp, out_dir / STATE_FILE)

    def load_state(self, out_dir: Path) -> dict:
        arrays, metadata = mx.load(str(out_dir / STATE_FILE), return_metadata=True)
        meta = json.loads(metadata["meta"])
        self.drafter.net.update(tree_unflatten([(k[4:], v) for k, v in arrays.items() if k.startswith("net.")]))
        self.optimizer.state = tree_unflatten([(k[4:], v) for k, v in arrays.items() if k.startswith("opt.")])
        self.optimizer.init(self.drafter.net.trainable_parameters())
        self.rng.bit_generator.state = meta["rng"]
        self.step = int(meta["step"])
        self._update = None
        return meta



def train_drafter(
    target: Target,
    texts: Sequence[str | Sequence[int]],
    out_dir: str | Path,
    cfg: DflashConfig,
    *,
    steps: int = 2000,
    batch_anchors: int = 32,
    lr: float = 6e-4,
    warmup: float = 0.04,
    weight_decay: float = 0.0,
    grad_clip: float = 1.0,
    seq_len: int = 256,
    ctx_len: int = 0,
    self_distill: bool = False,
    heldout_texts: Sequence[str | Sequence[int]] | None = None,
    resume: bool = False,
    seed: int = 0,
    progress: bool = True,
    time_budget_minutes: float | None = None,
    prompt_len: int = 64,
    max_sequences: int | None = None,
    anchors_per_seq: int = 8,
    loss_decay: float = 0.0,
    eval_prompts: int = 8,
    eval_tokens: int = 128,
    checkpoint_minutes: float = 5.0,
    compile: bool = True,
    log: Callable[[str], None] | None = None,
    data_file: str | Path | None = None,
    feature_cache_mb: int = 2048,
) -> DflashDrafter:
    """Train a drafter for ``target`` on ``texts`` (strings, or token-id lists) into
    ``out_dir``; see the module docstring. ``warmup`` is a fraction of ``steps``; ``ctx_len``
    0 means ``seq_len``; ``max_sequences`` caps the sequences (and so the self-distillation
    cost), by default at one per ``ANCHORS_PER_SEQUENCE`` anchors the run will draw. ``data_file``
    reuses the sequences another run saved (its ``train_data.safetensors``). Returns the trained drafter."""
    t_start = time.perf_counter()
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    say = log or (lambda s: print(s, file=sys.stderr))
    settings = TrainSettings(steps=steps, batch_anchors=batch_anchors, lr=lr, warmup=warmup, weight_decay=weight_decay,
                             grad_clip=grad_clip, seq_len=seq_len, ctx_len=ctx_len, anchors_per_seq=anchors_per_seq,
                             loss_decay=loss_decay, compile=compile, feature_cache_mb=feature_cache_mb)
    if steps < 1 or batch_anchors < 1 or seq_len < 3 or prompt_len < 1:
        raise DsparkError("steps, batch and prompt length must be at least 1, and the sequence length at least 3")
    resuming = resume and (out / STATE_FILE).is_file()
    if resume and not resuming:
        say(f"nothing to resume in {out}: starting a new run")
    drafter = DflashDrafter.load(out, target) if resuming else DflashDrafter.init(target, cfg, seed=seed)
    if resuming and drafter.cfg.block_size != cfg.block_size:
        say(f"note: resuming the saved drafter (block {drafter.cfg.block_size}); its shape options win")
    rng = np.random.default_rng(seed)
    distill_seconds = 0.0
    held = held_out_prompts(target, heldout_texts, seq_len) if heldout_texts is not None else None
    source = Path(data_file) if data_file else (out / DATA_FILE if resuming else None)
    if source is not None and source.is_file():
        # The first run's data and split (on --resume), or another run's (to compare drafters
        # on identical data, as the demo does).
        seqs, saved_held = Sequences.load(source)
        held = held if held is not None else saved_held
        if data_file:
            seqs.save(out / DATA_FILE, held)
    else:
        cap = max_sequences or max(64, math.ceil(steps * batch_anchors / ANCHORS_PER_SEQUENCE))
        t0 = time.perf_counter()
        seqs, auto_held = build_training_data(target, encode_all(target, texts), seq_len=seq_len, prompt_len=prompt_len,
                                              self_distill=self_distill, max_sequences=cap,
                                              heldout=eval_prompts if held is None else 0, rng=rng,
                                              progress=progress, say=say)
        distill_seconds = time.perf_counter() - t0
        held = held if held is not None else auto_held
        seqs.save(out / DATA_FILE, held)
    trainer = DrafterTrainer(target, drafter, seqs, settings, seed=seed)
    if resuming:
        meta = trainer.load_state(out)
        say(f"resumed at step {trainer.step} of {steps}")
        if meta["settings"]["steps"] != steps:
            say(f"note: the first run planned {meta['settings']['steps']} steps; the schedule now spans {steps}")
    say(f"drafter: {drafter.num_params():,} parameters, taps {list(drafter.cfg.tap_layers)}, block {drafter.cfg.block_size}, "
        f"markov {drafter.cfg.markov}, confidence {drafter.cfg.confidence}; {len(seqs)} sequences of {seqs.tokens.shape[1]}")

    budget = time_budget_minutes * 60 if time_budget_minutes else None
    bar = progress_bar(steps, progress, "train", "step")
    if bar:
        bar.update(trainer.step)
    stopped, last_ckpt, recent = "steps", time.perf_counter(), []
    loop_start, first_step = time.perf_counter(), trainer.step
    try:
        batch = trainer.sample_batch() if trainer.step < steps else None
        while trainer.step < steps:
            if budget is not None and time.perf_counter() - t_start > budget:
                stopped = "time budget"
                break
            outs = trainer.train_step(batch)
            batch = trainer.sample_batch() if trainer.step < steps else None  # overlaps the update
            loss, ce, tv, conf, norm = (float(x) for x in outs)
            if not math.isfinite(loss):
                raise DsparkError(f"the loss became {loss} at step {trainer.step}; try a lower --lr")
            recent = (recent + [(loss, ce, tv, conf)])[-50:]
            if bar:
                rate = (trainer.step - first_step) * batch_anchors / max(time.perf_counter() - loop_start, 1e-9)
                bar.set_postfix(loss=f"{loss:.3f}", tv=f"{tv:.3f}", anchors_s=f"{rate:.0f}", refresh=False)
                bar.update(1)
            if time.perf_counter() - last_ckpt > checkpoint_minutes * 60:
                drafter.save(out)
                trainer.save_state(out)
                last_ckpt = time.perf_counter()
    except KeyboardInterrupt:
        drafter.save(out)
        trainer.save_state(out)
        say(f"\ninterrupted: checkpoint saved at step {trainer.step}; continue with --resume")
        raise
    finally:
        if bar:
            bar.close()
    train_seconds = time.perf_counter() - loop_start
    drafter.save(out)
    trainer.save_state(out)
    done = trainer.step - first_step
    report = {
        "target_id": drafter.target_id,
        "drafter": asdict(drafter.cfg),
        "parameters": drafter.num_params(),
        "settings": asdict(settings),
        "self_distill": self_distill,
        "sequences": len(seqs),
        "steps_done": trainer.step,
        "stopped_by": stopped,
        "final_loss": dict(zip(("loss", "ce", "tv", "conf"), np.mean(recent, axis=0).tolist())) if recent else None,
        "train_seconds": train_seconds,
        "anchors_per_sec": done * batch_anchors / train_seconds if done else 0.0,
        "block_tokens_per_sec": done * batch_anchors * drafter.cfg.block_size / train_seconds if done else 0.0,
        "target_forward_seconds": trainer.features.seconds,
        "self_distill_seconds": distill_seconds,
        "device": str(mx.default_device()),
    }
    say(f"trained {done} steps in {train_seconds:.0f}s ({report['anchors_per_sec']:.1f} anchors/s, "
        f"{report['block_tokens_per_sec']:.0f} block tokens/s; target forwards {trainer.features.seconds:.0f}s of it)")
    if eval_prompts > 0 and held:
        from .calibrate import evaluate_drafter

        report["heldout"] = evaluate_drafter(target, drafter, held[:eval_prompts], eval_tokens, say)
        drafter.save(out)  # with the calibration temperatures
    tmp = out / (REPORT_FILE + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, out / REPORT_FILE)
    return drafter


# ----------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dspark train", description="Train a DSpark drafter against a frozen Gemma-4 target.")
    ap.add_argument("--target", required=True, help="target model directory")
    ap.add_argument("--data", nargs="+", help="text files (.txt/.py/.md), folders, or .jsonl with a text/prompt field; default: the built-in corpus")
    ap.add_argument("--heldout", nargs="+", help="held-out prompt files for the final evaluation (default: held-out corpus prompts, or a slice of --data)")
    ap.add_argument("--out", required=True, help="drafter directory to write")
    d = ap.add_argument_group("drafter")
    d.add_argument("--block-size", type=int, default=7)
    d.add_argument("--layers", type=int, default=2)
    d.add_argument("--taps", help="comma-separated target layer indices (default: evenly spaced)")
    d.add_argument("--mask-token-id", type=int, default=4)
    d.add_argument("--markov-rank", type=int, default=256)
    d.add_argument("--no-markov", action="store_true", help="DFlash-style: no Markov head")
    d.add_argument("--no-confidence", action="store_true", help="no confidence head")
    o = ap.add_argument_group("optimisation")
    o.add_argument("--steps", type=int, default=2000)
    o.add_argument("--batch", type=int, default=32, help="anchors (blocks) per step")
    o.add_argument("--lr", type=float, default=6e-4)
    o.add_argument("--warmup", type=float, default=0.04, help="warm-up as a fraction of the steps")
    o.add_argument("--weight-decay", type=float, default=0.0)
    o.add_argument("--grad-clip", type=float, default=1.0, help="global gradient-norm clip (0: off)")
    o.add_argument("--loss-decay", type=float, default=0.0, help="position weight decay (0: 4.0 x block/7)")
    o.add_argument("--no-compile", action="store_true", help="do not mx.compile the update")
    s = ap.add_argument_group("data")
    s.add_argument("--seq-len", type=int, default=256)
    s.add_argument("--ctx-len", type=int, default=0, help="context rows per anchor (0: the sequence length)")
    s.add_argument("--prompt-len", type=int, default=64, help="prompt tokens kept per sequence under --self-distill")
    s.add_argument("--self-distill", action="store_true", help="train on the target's own greedy continuations of the data's prompts")
    s.add_argument("--max-sequences", type=int, help=f"cap on training sequences (default: one per {ANCHORS_PER_SEQUENCE} anchors drawn)")
    s.add_argument("--anchors-per-seq", type=int, default=8, help="anchors drawn from one sequence in a batch")
    s.add_argument("--feature-cache-mb", type=int, default=2048, help="memory for cached target features; sequences beyond it are recomputed")
    r = ap.add_argument_group("run")
    r.add_argument("--resume", action="store_true", help="continue the run saved in --out")
    r.add_argument("--force", action="store_true", help="overwrite a non-empty --out")
    r.add_argument("--time-budget-minutes", type=float)
    r.add_argument("--checkpoint-minutes", type=float, default=5.0)
    r.add_argument("--eval-prompts", type=int, default=8, help="held-out prompts for the final evaluation (0: skip)")
    r.add_argument("--eval-tokens", type=int, default=128)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--no-progress", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        from .corpus import heldout_prompts, iter_texts, read_texts
        from .target import load_target

        out = Path(a.out)
        if out.exists() and any(out.iterdir()) and not (a.resume or a.force):
            raise DsparkError(f"{out} exists and is not empty (use --resume to continue it or --force to overwrite)")
        try:
            taps = tuple(int(x) for x in a.taps.split(",")) if a.taps else ()
        except ValueError:
            raise DsparkError(f"--taps must be comma-separated layer indices, got {a.taps!r}") from None
        target = load_target(a.target)
        texts = read_texts(a.data) if a.data else list(iter_texts("train"))
        heldout = read_texts(a.heldout) if a.heldout else (None if a.data else heldout_prompts(a.eval_prompts))
        cfg = DflashConfig(block_size=a.block_size, num_layers=a.layers, tap_layers=taps, mask_token_id=a.mask_token_id,
                           markov=not a.no_markov, markov_rank=a.markov_rank, confidence=not a.no_confidence)
        train_drafter(target, texts, out, cfg, steps=a.steps, batch_anchors=a.batch, lr=a.lr, warmup=a.warmup,
                      weight_decay=a.weight_decay, grad_clip=a.grad_clip, seq_len=a.seq_len, ctx_len=a.ctx_len,
                      self_distill=a.self_distill, heldout_texts=heldout, resume=a.resume, seed=a.seed,
                      progress=not a.no_progress, time_budget_minutes=a.time_budget_minutes, prompt_len=a.prompt_len,
                      max_sequences=a.max_sequences, anchors_per_seq=a.anchors_per_seq, loss_decay=a.loss_decay,
                      eval_prompts=a.eval_prompts, eval_tokens=a.eval_tokens, checkpoint_minutes=a.checkpoint_minutes,
                      compile=not a.no_compile, feature_cache_mb=a.feature_cache_mb)
    except (DsparkError, ValueError) as e:
        print(f"dspark: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dspark: interrupted", file=sys.stderr)
        return 130
    print(f"wrote {out} (report: {out / REPORT_FILE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

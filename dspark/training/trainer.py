"""One drafter's training step: the anchor sampler, the loss, AdamW and checkpoints.

Samples (DSpark's slot convention: the anchor slot predicts): for an anchor at position p
the block input is ``[x_p, MASK x (G-1)]``, slot k predicts ``x_{p+k+1}``, the context is the
target's tap rows of positions < p (the last ``ctx_len`` of them when set), and the Markov head
is teacher-forced with ``x_p .. x_{p+G-1}``. A batch draws ``anchors_per_seq`` anchors from each
of a few sequences, whose context rows are projected once and shared by their anchors
(``BlockDrafter.forward_train_packed``, the same for every format: a block is trained exactly as
the drafter's format drafts it, windows and anchor slot included). The frozen target runs once per sequence; its tap
rows and final normed hidden states are cached (``dspark.training.data.TargetFeatures``).

Loss: :func:`dspark.training.losses.dspark_loss`. Only ``drafter.net`` gets gradients (the
target's embedding and head are borrowed through ``target.projection`` and stay frozen).
Checkpoints (``.train/train_state.safetensors`` in the drafter's directory: beside the model's
own files, whatever its format, a serving engine reading every ``*.safetensors`` would trip on
them): drafter weights, AdamW state, step and the numpy RNG state as JSON metadata; never pickle.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from ..drafting import BlockDrafter
from ..errors import DsparkError
from ..files import save_safetensors
from ..modeldir import read_header
from ..options import option
from ..reading import parse_json
from ..target import Target
from ..version import __version__
from .data import Sequences, TargetFeatures
from .distributed import DEFAULT_TIMEOUT, World
from .losses import default_decay, dspark_loss, position_weights

TRAIN_DIR = ".train"  # what a training run keeps beside the drafter, hidden
STATE_FILE = f"{TRAIN_DIR}/train_state.safetensors"
STATE_FORMAT = "dspark-train-state"
#: The checkpoint's layout version: 1 (no ``version`` key) is what dspark 0.1.0 wrote before it
#: recorded one; 2 adds the starting drafter of a fine-tune and the best held-out measurement.
#: A resume refuses a newer one (:func:`dspark.training.resume.saved_run`).
STATE_VERSION = 2
#: What a run carries from checkpoint to checkpoint besides the weights and the step: the
#: drafter a fine-tune started from (``start.FROM_KEY``) and the best held-out measurement.
RUN_KEYS = ("from", "best")
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
    return optim.join_schedules(
        [optim.linear_schedule(lr / warm, lr, warm), optim.cosine_decay(lr, steps - warm)], [warm]
    )


@dataclass(frozen=True, kw_only=True)
class TrainSettings:
    """Every knob of a training run (``dspark train`` builds its options from these fields)."""

    # optimisation
    steps: int = option(2000, "optimizer steps", lo=1, hi=10_000_000)
    batch_anchors: int = option(32, "anchors (blocks) per step", flag="--batch", lo=1, hi=65_536)
    lr: float = option(6e-4, "peak learning rate (AdamW)", lo=0.0, hi=10.0)
    warmup: float = option(0.04, "warm-up as a fraction of the steps", lo=0.0, hi=1.0)
    weight_decay: float = option(0.0, "AdamW weight decay", lo=0.0, hi=10.0)
    grad_clip: float = option(1.0, "global gradient-norm clip (0: off)", lo=0.0, hi=1e6)
    loss_decay: float = option(0.0, "position weight decay of the loss (0: 4.0 x block/7)", lo=0.0, hi=1e6)
    compile: bool = option(True, "mx.compile the update step")
    # data
    seq_len: int = option(256, "tokens per training sequence", lo=3, hi=1_000_000)
    ctx_len: int = option(0, "context rows per anchor (0: the sequence length)", lo=0, hi=1_000_000)
    prompt_len: int = option(64, "prompt tokens kept per sequence under --self-distill", lo=1, hi=1_000_000)
    self_distill: bool = option(False, "train on the target's own greedy continuations of the data's prompts")
    long_prompts: float = option(
        0.0,
        "share of the self-distilled sequences that start from a long prompt (up to "
        "--long-prompt-len tokens), so the drafter learns long contexts",
        lo=0.0,
        hi=0.9,
    )
    long_prompt_len: int = option(1024, "the longest such prompt, in tokens", lo=2, hi=1_000_000)
    max_sequences: int | None = option(
        None, "cap on training sequences", lo=1, hi=100_000_000, none=f"one per {ANCHORS_PER_SEQUENCE} anchors drawn"
    )
    anchors_per_seq: int = option(8, "anchors drawn from one sequence in a batch", lo=1, hi=65_536)
    feature_cache_mb: int = option(
        2048, "memory for cached target features; sequences beyond it are recomputed", lo=1, hi=10_000_000
    )
    # the run
    time_budget_minutes: float | None = option(
        None,
        "stop training after this many minutes of training steps (preparing the data not counted), "
        "and still write the drafter",
        lo=0.0,
        hi=1e7,
        none="no budget",
    )
    checkpoint_minutes: float = option(5.0, "minutes between checkpoints", lo=0.0, hi=1e7)
    eval_prompts: int = option(8, "held-out prompts for the final evaluation (0: skip)", lo=0, hi=100_000)
    eval_tokens: int = option(128, "tokens generated per evaluation prompt", lo=1, hi=1_000_000)
    eval_every: int = option(
        0,
        "steps between held-out measurements during training (tau and acceptance by position on the "
        "evaluation prompts, logged to train_log.jsonl with the seconds each took; 0: only the final one)",
        lo=0,
        hi=10_000_000,
    )
    seed: int = option(0, "random seed (initial weights, data, anchors)", lo=0, hi=2**31 - 1)
    rank_timeout: float = option(
        DEFAULT_TIMEOUT, "under mlx.launch: seconds a process waits for the others before the run stops", lo=1.0, hi=1e7
    )

    def sequences_cap(self) -> int:
        """``max_sequences``, or the default data budget for this many steps."""
        return self.max_sequences or max(64, math.ceil(self.steps * self.batch_anchors / ANCHORS_PER_SEQUENCE))


class DrafterTrainer:
    """One drafter, its AdamW state and the anchor sampler; ``train_step`` does one update."""

    def __init__(
        self,
        target: Target,
        drafter: BlockDrafter,
        seqs: Sequences,
        settings: TrainSettings,
        *,
        trained_as: dict | None = None,
        world: World | None = None,
    ):
        """Training ``drafter`` against ``target`` on ``seqs`` as ``settings`` say; ``trained_as``:
        the drafter settings its checkpoints record (None: its own config); ``world``: the
        processes sharing each step's batch (None: this one alone)."""
        self.target, self.drafter, self.seqs, self.s = target, drafter, seqs, settings
        self.world = world or World()  # the processes sharing each step's batch (one, without mlx.launch)
        self.proj = target.projection
        if drafter.draft_to_target is not None:
            raise DsparkError("a drafter with a reduced draft vocabulary (d2t) cannot be trained here")
        self.trained_as = trained_as if trained_as is not None else asdict(drafter.cfg)  # the drafter's settings
        self.block_size = drafter.block_size
        self.features = TargetFeatures(target, drafter.tap_layers, seqs, settings.feature_cache_mb)
        self.weights = position_weights(self.block_size, settings.loss_decay or default_decay(self.block_size))
        self.rng = np.random.default_rng(settings.seed)
        long = seqs.lengths > settings.seq_len
        self.buckets = [np.flatnonzero(m) for m in (~long, long) if m.any()]
        self.bucket_share = np.array([len(b) for b in self.buckets], np.float64) / len(seqs)
        self._rng_before_pending = None  # the RNG state before the batch drawn but not yet trained on
        self.step = 0
        self.optimizer = optim.AdamW(
            learning_rate=lr_schedule(settings.lr, settings.steps, settings.warmup), weight_decay=settings.weight_decay
        )
        self.optimizer.init(drafter.net.trainable_parameters())
        self._loss_and_grad = nn.value_and_grad(drafter.net, self._loss)
        self._update = None  # built lazily so a resumed optimizer state is the one compiled in
        self.run_meta: dict = {}  # RUN_KEYS: recorded in every checkpoint, read back by load_state

    # --- batches ------------------------------------------------------------------------
    def sample_batch(self) -> tuple[mx.array, ...]:
        """``batch_anchors`` random anchors, ``anchors_per_seq`` from each of a few sequences:
        (tap rows of those sequences [N, S, m*H], owner sequence [A], anchor position [A],
        prev_toks [A, G], labels [A, G], valid [A, G], target hidden rows p..p+G-1 [A, G, H]).
        Processes of a distributed run each draw the same whole batch (the data order is a
        function of the seed and the step alone, whatever their number) and keep their own
        contiguous part of it, followed by the whole batch's loss weight: the denominator that
        makes their losses shares of one mean."""
        # A checkpoint taken while this batch waits is resumed from the state that draws it again.
        self._rng_before_pending = copy.deepcopy(self.rng.bit_generator.state)
        chosen, owner, p = self._draw_anchors()
        S = int(self.seqs.lengths[chosen].max())
        valid = p[:, None] + np.arange(self.block_size)[None, :] + 1 <= (self.seqs.lengths[chosen][owner] - 1)[:, None]
        if self.world.size == 1:
            return self._batch_arrays(chosen, owner, p, valid=valid, S=S)
        weight = (np.array(self.weights, np.float64)[None, :] * valid).sum()
        lo, hi = self.world.part(len(p))
        mine = np.unique(owner[lo:hi])  # the sequences this process's anchors sit in
        part = self._batch_arrays(chosen[mine], np.searchsorted(mine, owner[lo:hi]), p[lo:hi], valid=valid[lo:hi], S=S)
        return (*part, mx.array(max(weight, 1e-8), mx.float32))

    def _draw_anchors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the chosen sequences [n], each anchor's index into them [A], anchor positions [A])."""
        A, seqs = self.s.batch_anchors, self.seqs
        n_seq = math.ceil(A / self.s.anchors_per_seq)
        # one bucket a step (short or long sequences, by their share), so a step's sequences are
        # alike in length and the target's pass and the context rows cover no needless padding
        pool = self.buckets[self.rng.choice(len(self.buckets), p=self.bucket_share)]
        chosen = pool[self.rng.choice(len(pool), size=n_seq, replace=n_seq > len(pool))]
        owner = np.repeat(np.arange(n_seq), math.ceil(A / n_seq))[:A]
        lo = seqs.first_anchor[chosen][owner]
        hi = seqs.lengths[chosen][owner] - 2  # the anchor needs at least one label
        p = lo + (self.rng.random(A) * (hi - lo + 1)).astype(np.int64)
        return chosen, owner, p

    def _batch_arrays(self, chosen, owner, p, *, valid, S: int) -> tuple[mx.array, ...]:
        """The arrays of anchors at ``p`` of sequences ``chosen[owner]`` (slot k: position p+k)."""
        block_pos = p[:, None] + np.arange(self.block_size)[None, :]
        toks = self.seqs.tokens[chosen, :S].reshape(-1)
        feats = self.features.get_many(chosen, S)
        taps = mx.stack([f[0] for f in feats])
        hidden = mx.concatenate([f[1] for f in feats], axis=0)
        flat = lambda pos: owner[:, None] * S + np.clip(pos, 0, S - 1)  # index into the batch's rows
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
    def _loss(self, taps, owner, positions, prev, labels, valid, t_hidden, weight=None):
        out = self.drafter.forward_train_packed(
            self.proj, taps, owner=owner, positions=positions, prev_toks=prev, ctx_len=self.s.ctx_len
        )
        parts = dspark_loss(
            out.logits,
            conf_logits=out.conf_logits,
            target_logits=self.proj.logits(t_hidden),
            labels=labels,
            valid=valid,
            weights=self.weights,
            weight=weight,
        )
        return parts.total, parts.ce, parts.tv, parts.conf

    def loss(self, batch) -> dict[str, float]:
        """The loss terms on ``batch`` without updating anything."""
        return dict(zip(("loss", "ce", "tv", "conf"), (float(x) for x in self._loss(*batch))))

    def _build_update(self):
        if self.world.size > 1:
            return self._build_shared_update()
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

    def _build_shared_update(self):
        """The update of a distributed run: this process's gradient of its share of the loss,
        computed first, so that the wait that follows is only the wait for the others; the
        shares summed over the processes (the whole batch's loss and gradient); then the same
        clipping and AdamW step on every process."""
        net, opt, clip = self.drafter.net, self.optimizer, self.s.grad_clip
        local = self._loss_and_grad

        def apply(grads):
            grads, norm = optim.clip_grad_norm(grads, clip) if clip > 0 else (grads, mx.array(0.0))
            opt.update(net, grads)
            return norm

        if self.s.compile:
            local = mx.compile(local, inputs=net.state, outputs=net.state)  # value_and_grad sets the weights it traces
            apply = mx.compile(apply, inputs=[net.state, opt.state], outputs=[net.state, opt.state])

        def update(*batch):
            parts, grads = local(*batch)
            named = tree_flatten(grads)
            mx.eval(parts, grads)
            summed = self.world.sum([*parts, *(g for _, g in named)], f"step {self.step + 1}")
            norm = apply(tree_unflatten(list(zip((k for k, _ in named), summed[len(parts) :]))))
            return (*summed[: len(parts)], norm)

        return update

    def train_step(self, batch) -> list[mx.array]:
        """One AdamW update; returns (loss, ce, tv, conf, grad norm), not yet evaluated."""
        if self._update is None:
            self._update = self._build_update()
        out = self._update(*batch)
        self._rng_before_pending = None  # the batch is used; a new one is drawn after this
        self.step += 1
        mx.async_eval(out, self.drafter.net.parameters(), self.optimizer.state)
        return out

    # --- checkpoints --------------------------------------------------------------------
    def save_state(self, out_dir: Path, extra: dict | None = None) -> None:
        """Weights, optimizer state, step and the RNG state that draws the next step's batch
        (the one already drawn and waiting, if any), so a resume repeats exactly what would
        have happened."""
        arrays = {f"net.{k}": v for k, v in tree_flatten(self.drafter.net.parameters())}
        arrays.update({f"opt.{k}": v for k, v in tree_flatten(self.optimizer.state)})
        rng = self._rng_before_pending if self._rng_before_pending is not None else self.rng.bit_generator.state
        meta = {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "dspark": __version__,
            "step": self.step,
            "rng": rng,
            "settings": asdict(self.s),
            "drafter": self.trained_as,
            **self.run_meta,
            **(extra or {}),
        }
        (out_dir / TRAIN_DIR).mkdir(exist_ok=True)
        save_safetensors(out_dir / STATE_FILE, arrays, {"meta": json.dumps(meta)})

    def load_state(self, out_dir: Path) -> dict:
        """Restore a checkpoint, refusing one that is damaged or does not fit this drafter."""
        path = out_dir / STATE_FILE
        read_header(path)  # the file as a whole: byte ranges, dtypes, no key twice
        try:
            arrays, metadata = mx.load(str(path), return_metadata=True)
            meta = parse_json(metadata["meta"], f"{path} (its metadata)")
            step, rng = meta["step"], meta["rng"]
        except Exception as e:  # a truncated or foreign file: mlx, json and key errors alike
            raise DsparkError(
                f"{path} is not a readable training checkpoint ({type(e).__name__}: {e}); "
                f"start over without --resume, or remove it"
            ) from None
        if meta.get("format") != STATE_FORMAT:
            raise DsparkError(f"{path} is not a dspark training checkpoint")
        check_state(path, step, arrays)
        expected = {f"net.{k}": v.shape for k, v in tree_flatten(self.drafter.net.parameters())}
        expected.update({f"opt.{k}": v.shape for k, v in tree_flatten(self.optimizer.state)})
        for k, shape in expected.items():
            if k not in arrays or arrays[k].shape != shape:
                got = list(arrays[k].shape) if k in arrays else "missing"
                raise DsparkError(f"{path} does not fit this drafter: {k} is {got}, expected {list(shape)}")
        self.drafter.net.update(tree_unflatten([(k[4:], v) for k, v in arrays.items() if k.startswith("net.")]))
        self.optimizer.state = tree_unflatten([(k[4:], v) for k, v in arrays.items() if k.startswith("opt.")])
        self.optimizer.init(self.drafter.net.trainable_parameters())
        try:
            self.rng.bit_generator.state = rng
        except (TypeError, ValueError, KeyError, OverflowError):
            raise DsparkError(f"{path} holds an unreadable random state") from None
        self._rng_before_pending = None
        self.step = step
        self._update = None
        self.run_meta = {k: meta[k] for k in RUN_KEYS if isinstance(meta.get(k), dict)}
        return meta


#: The most steps a checkpoint may have taken (``TrainSettings.steps``' limit).
MAX_STEP = 10_000_000


def check_state(path: Path, step, arrays: dict) -> None:
    """A checkpoint's own numbers, range-checked before any is used: its step a count of updates
    (a negative one would have a resumed run train past ``--steps`` and report it), the optimizer's
    own step counter the same, and every weight and moment finite."""
    if type(step) is not int or not 0 <= step <= MAX_STEP:
        raise DsparkError(f"{path}: step is {str(step)[:40]}, expected a number of steps between 0 and {MAX_STEP:,}")
    counter = arrays.get("opt.step")
    if counter is not None and (counter.size != 1 or int(counter.item()) != step):
        raise DsparkError(f"{path}: the optimizer has taken {counter.tolist()} steps but the checkpoint says {step}")
    named = [(k, v) for k, v in arrays.items() if mx.issubdtype(v.dtype, mx.floating)]
    if named:
        flags = mx.stack([mx.isfinite(v).all() for _, v in named])
        bad = [k for (k, _), ok in zip(named, flags.tolist()) if not ok]
        if bad:
            raise DsparkError(f"{path}: {bad[0]} holds NaN or infinite values (the checkpoint is damaged)")

"""Training the autoregressive heads (``dspark train --kind eagle3|assistant``): each step's
loss unrolls the head's draft steps exactly as its session drafts them at inference, on the
same self-distilled sequences, features and checkpoints as the block drafters.

A step trains at ``--batch`` anchors, ``--anchors-per-seq`` from each of a few sequences of
one length bucket, drawn as the block trainer draws them: anchor ``P``'s step ``k`` (k =
0..G-1, G the head's drafts a round) predicts the token at ``P + k + 1`` and is fed, at step
``k + 1``, the true token there (the target's greedy continuation: the only
path a lossless round keeps) with the head's own hidden state.

- EAGLE-3 (``Eagle3Session.propose``): the committed pairs (the target's taps at ``i``, the
  token at ``i + 1``, placed at ``i + 1``) run causally; the output at the anchor's pair is step
  0. Step ``k`` (speculators' training-time test) feeds the token at ``P + k`` with the previous
  step's output at position ``P + k``, attending to the committed pairs up to the anchor's and
  to its own earlier steps (a diagonal per step: speculators' mask), through the K/V those
  steps appended.
- Assistant (``AssistantSession.propose``): every step's query sits at the anchor's position
  ``P`` over the target's K/V of rows ``0..P-1`` (the last full-attention layer), the last
  ``sliding_window + 1`` of them for sliding layers (as the session reads them); step 0's
  ``h_prev`` is the target's final normed hidden state at ``P - 1``, step ``k``'s the head's
  own ``post_projection`` output of step ``k - 1``.

Loss: :func:`dspark.training.losses.dspark_loss` (0.1 CE on the data's next token + 0.9 total
variation to the target's distribution there) with the steps weighted ``exp(-k / decay)``,
since a later step is verified only when every earlier one was accepted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from ..errors import DsparkError
from ..formats import assistant
from ..target import Target
from .data import Sequences
from .distributed import World
from .losses import default_decay, dspark_loss, position_weights
from .trainer import DrafterTrainer, TrainSettings, lr_schedule


class StepFeatures:
    """The frozen target's features of each sequence, computed once and kept in up to
    ``capacity_mb``: the tap rows ``taps`` (EAGLE-3), the final normed hidden states, and the
    K/V of the layers ``kv_layers`` (the assistant's sources), each sequence's own rows."""

    def __init__(self, target: Target, seqs: Sequences, *, taps: Sequence[int], kv_layers: Sequence[int], mb: float):
        self.target, self.seqs, self.capacity = target, seqs, mb * 2**20
        self.taps, self.kv_layers = tuple(taps), tuple(kv_layers)
        self.store: dict[int, list[mx.array]] = {}
        self.stored_bytes, self.forwards, self.seconds = 0, 0, 0.0

    def get_many(self, indices: Sequence[int], width: int) -> list[mx.array]:
        """Per feature, the sequences' rows stacked, ``width`` each (zeros past a sequence's end):
        [taps [n, S, m*H] (when tapped)], final [n, S, H], then K and V [n, kvh, S, D] per layer."""
        missing = list(dict.fromkeys(int(i) for i in indices if int(i) not in self.store))
        for i in missing:  # one at a time: a sequence's features never depend on what it was batched
            self._compute([i])  # with (BLAS rounds by shape), so a resumed run computes the same numbers
        rows = [self.store[int(i)] for i in indices]
        return [
            mx.stack([_rows(r[f], width, axis=-2 if r[f].ndim == 3 else 0) for r in rows]) for f in range(len(rows[0]))
        ]

    def _compute(self, missing: list[int]) -> None:
        t0 = time.perf_counter()
        target, last = self.target, self.target.dims.num_layers - 1
        n_rows = int(self.seqs.lengths[missing].max())
        kv: dict[int, tuple] = {}
        layers = target.layers
        originals = {i: layers[i] for i in self.kv_layers}
        try:
            for i, layer in originals.items():
                layers[i] = _KV(layer, i, kv)
            _, rows = target.forward(
                mx.array(self.seqs.tokens[missing, :n_rows]), None, (*self.taps, last), logits=False
            )
        finally:
            for i, layer in originals.items():
                layers[i] = layer
        H = target.dims.hidden_size
        parts = [rows[..., : len(self.taps) * H]] if self.taps else []
        parts.append(target.final_norm(rows[..., len(self.taps) * H :]))
        for i in self.kv_layers:
            parts.extend(kv[i])
        parts = [mx.stop_gradient(p) for p in parts]
        mx.eval(parts)
        for j, i in enumerate(missing):
            n = int(self.seqs.lengths[i])
            kept = [mx.contiguous(p[j, :n] if p.ndim == 3 else p[j, :, :n]) for p in parts]
            mx.eval(kept)
            size = sum(a.nbytes for a in kept)
            while self.store and self.stored_bytes + size > self.capacity:
                self.stored_bytes -= sum(a.nbytes for a in self.store.pop(next(iter(self.store))))
            self.store[i] = kept
            self.stored_bytes += size
        self.forwards += len(missing)
        self.seconds += time.perf_counter() - t0


class _KV:
    """Stands in for a target layer during one call and keeps the K/V it computed."""

    def __init__(self, layer, index: int, sink: dict):
        self._layer, self._index, self._sink = layer, index, sink

    def __call__(self, *args, **kwargs):
        out = self._layer(*args, **kwargs)
        self._sink[self._index] = out[1]
        return out

    def __getattr__(self, name):
        return getattr(self._layer, name)


def _rows(a: mx.array, width: int, axis: int) -> mx.array:
    """``a`` cut or zero-padded to ``width`` rows along ``axis`` (0 or -2)."""
    n = a.shape[axis]
    if n >= width:
        return a[:width] if axis == 0 else a[..., :width, :]
    pad = list(a.shape)
    pad[axis] = width - n
    return mx.concatenate([a, mx.zeros(pad, a.dtype)], axis=axis)


# --------------------------------------------------------------------------- the unrolled steps
def eagle3_logits(
    net, *, embed, taps: mx.array, tokens: mx.array, owner: mx.array, anchors: mx.array, G: int, norm_output: bool
) -> mx.array:
    """The EAGLE-3 head's logits [A, G, V_draft] at the anchors ``anchors`` [A] (positions P >= 1)
    of the sequences ``owner`` [A] (rows of ``tokens`` [n, S] and ``taps`` [n, S, m*H], the
    target's tap rows), step k predicting the token at P + k + 1.

    Step 0 runs causally over every committed pair (pair a: the taps at a, the token at a + 1,
    placed at a + 1), as the session's committed pass; its output at the anchor's pair (a = P - 1)
    is the anchor's step 0, and its K/V are what every later step attends to. Steps k >= 1 run
    for the anchors alone, one query each at position P + k: the committed pairs up to the
    anchor's and the anchor's own earlier steps (speculators' diagonal), as the session drafts."""
    n, S = tokens.shape
    T = S - 1
    a = mx.arange(T)
    h = net.fuse(taps[:, :T])
    x = embed(tokens[:, 1:])
    kv = []
    for layer in net.layers:
        h, entry = layer(h, None, embeds=x, offset=1, start=0, mask=a[None, :] <= a[:, None])
        kv.append(entry)
    pair = anchors - 1
    h = h[owner, pair][:, None]  # [A, 1, H]: each anchor's step 0
    kv = [(k[owner], v[owner]) for k, v in kv]  # [A, kvh, T, D]: the committed pairs each anchor sees
    seen = (a[None, :] <= pair[:, None])[:, None, None, :]  # [A, 1, 1, T]
    out = []
    for k in range(G):
        normed = net.norm(h)
        out.append(net.lm_head(normed)[:, 0])
        if k == G - 1:
            break
        h = normed if norm_output else h
        x = embed(tokens[owner, mx.minimum(anchors + 1 + k, S - 1)][:, None])  # the true token at P + k + 1
        mask = mx.concatenate([seen, mx.ones((*seen.shape[:3], k + 1), mx.bool_)], axis=-1)
        for i, layer in enumerate(net.layers):
            h, kv[i] = layer(h, kv[i], embeds=x, offset=anchors + 1 + k, start=0, mask=mask)
    return mx.stack(out, axis=1)


def assistant_logits(
    net,
    *,
    embed,
    final: mx.array,
    shared: dict,
    tokens: mx.array,
    owner: mx.array,
    anchors: mx.array,
    G: int,
    window: int,
) -> mx.array:
    """The assistant's logits [A, G, V] with its query at the anchors ``anchors`` [A] (positions
    P >= 1) of the sequences ``owner`` [A] (rows of ``tokens`` [n, S]), step k predicting the
    token at P + k + 1; ``final`` [n, S, H] the target's final normed hidden states, ``shared``
    per layer type the target's K/V [n, kvh, S, D], ``window`` the sliding rows the session reads.
    Every step's query sits at P over the target's rows before P (the last ``window`` of them for
    sliding layers); step 0's ``h_prev`` is the target's at P - 1, step k's the head's own."""
    S = tokens.shape[1]
    j = mx.arange(S)[None, :]
    P = anchors[:, None]
    before = j < P
    masks = {"full_attention": before, "sliding_attention": before & (j >= P - window)}
    masks = {kind: m[:, None, None, :] for kind, m in masks.items()}  # [A, 1, 1, S]
    kv = {kind: (k[owner], v[owner]) for kind, (k, v) in shared.items()}
    h = final[owner, anchors - 1][:, None]  # h_prev: position P - 1
    out = []
    for k in range(G):
        x = mx.concatenate([embed(tokens[owner, mx.minimum(anchors + k, S - 1)][:, None]), h], axis=-1)
        y = net.pre_projection(x)
        for layer in net.model.layers:
            y, _, _ = layer(y, masks[layer.layer_type], None, shared_kv=kv[layer.layer_type], offset=anchors)
        y = net.model.norm(y)
        out.append(net.head(y)[:, 0])
        h = net.post_projection(y)
    return mx.stack(out, axis=1)


# --------------------------------------------------------------------------- the trainer
class StepwiseTrainer(DrafterTrainer):
    """An EAGLE-3 or assistant head, its AdamW state and the sequence sampler; checkpoints,
    updates and resumes as :class:`DrafterTrainer` (one process: distributed runs are refused)."""

    def __init__(self, target: Target, drafter, seqs: Sequences, settings: TrainSettings, *, trained_as: dict):
        self.target, self.drafter, self.seqs, self.s = target, drafter, seqs, settings
        self.world = World()
        self.proj = target.projection
        self.trained_as = trained_as
        self.kind = drafter.format
        self.block_size = G = drafter.block_size
        if self.kind == assistant.FORMAT:
            sources = assistant.shared_layers(target)
            self.kinds = sorted(set(drafter.spec.text.layer_types))
            kv_layers, taps = [sources[k] for k in self.kinds], ()
        else:
            kv_layers, taps = (), drafter.tap_layers
        self.features = StepFeatures(target, seqs, taps=taps, kv_layers=kv_layers, mb=settings.feature_cache_mb)
        self.weights = position_weights(G, settings.loss_decay or default_decay(G))
        self.rng = np.random.default_rng(settings.seed)
        long = seqs.lengths > settings.seq_len
        self.buckets = [np.flatnonzero(m) for m in (~long, long) if m.any()]
        self.bucket_share = np.array([len(b) for b in self.buckets], np.float64) / len(seqs)
        self._rng_before_pending = None
        self.step = 0
        self.optimizer = optim.AdamW(
            learning_rate=lr_schedule(settings.lr, settings.steps, settings.warmup), weight_decay=settings.weight_decay
        )
        if self.kind != assistant.FORMAT and drafter.spec.own_embedding:
            drafter.net.embed_tokens.freeze()  # the verifier's table, shipped (embed_requires_grad false)
        self.optimizer.init(drafter.net.trainable_parameters())
        self._loss_and_grad = nn.value_and_grad(drafter.net, self._loss)
        self._update = None
        self.run_meta = {}

    def sample_batch(self) -> tuple[mx.array, ...]:
        """``batch_anchors`` anchors, ``anchors_per_seq`` from each of a few sequences of one
        length bucket, drawn as the block trainer draws them: (tokens [n, S], the anchors' owner
        sequence [A] and position P [A], labels [A, G] (the tokens at P + 1 ..), valid [A, G], the
        target's logits at the labels' positions [A, G, V], then the features the head reads:
        EAGLE-3's taps, or the assistant's final hidden states and K/V)."""
        import copy  # noqa: PLC0415 (one use: the RNG state a checkpoint resumes from)

        self._rng_before_pending = copy.deepcopy(self.rng.bit_generator.state)
        chosen, owner, p = self._draw_anchors()
        S = int(self.seqs.lengths[chosen].max())
        toks = self.seqs.tokens[chosen, :S]
        feats = self.features.get_many(chosen, S)
        final = feats[1] if self.kind != assistant.FORMAT else feats[0]
        label_at = p[:, None] + np.arange(self.block_size)[None, :] + 1  # [A, G]
        valid = (p[:, None] >= 1) & (label_at <= self.seqs.lengths[chosen][owner][:, None] - 1)
        P = np.maximum(p, 1)  # an anchor at 0 has no h_prev (it is never valid)
        at = np.clip(label_at, 0, S - 1)
        labels = toks[owner[:, None], at]
        t_logits = self.proj.logits(final[mx.array(owner)[:, None], mx.array(at - 1)])  # [A, G, V]
        return (
            mx.array(toks),
            mx.array(owner, mx.int32),
            mx.array(P, mx.int32),
            mx.array(labels),
            mx.array(valid),
            mx.stop_gradient(t_logits),
            *feats,
        )

    def _loss(self, toks, owner, anchors, labels, valid, t_logits, *feats):
        G = self.block_size
        if self.kind == assistant.FORMAT:
            final, kv = feats[0], feats[1:]
            shared = {kind: (kv[2 * i], kv[2 * i + 1]) for i, kind in enumerate(self.kinds)}
            window = self.drafter.spec.text.sliding_window + 1  # the rows AssistantSession reads
            logits = assistant_logits(
                self.drafter.net,
                embed=self.proj.embed,
                final=final,
                shared=shared,
                tokens=toks,
                owner=owner,
                anchors=anchors,
                G=G,
                window=window,
            )
        else:
            spec = self.drafter.spec
            embed = self.drafter.net.embed_tokens if spec.own_embedding else self.proj.table
            logits = eagle3_logits(
                self.drafter.net,
                embed=embed,
                taps=feats[0],
                tokens=toks,
                owner=owner,
                anchors=anchors,
                G=G,
                norm_output=spec.norm_output,
            )
        parts = dspark_loss(
            logits,
            conf_logits=None,
            target_logits=t_logits,
            labels=labels,
            valid=valid,
            weights=self.weights,
        )
        return parts.total, parts.ce, parts.tv, parts.conf


def refuse_world(world: World, kind: str) -> None:
    if world.size > 1:
        raise DsparkError(f"training an {kind} head over several processes is not supported yet: run it in one")


def trained_as(cfg) -> dict:
    return {**asdict(cfg), "tap_layers": list(cfg.tap_layers)}


__all__ = ["StepFeatures", "StepwiseTrainer", "assistant_logits", "eagle3_logits", "refuse_world"]


# --------------------------------------------------------------------------- a whole run
def train_head(
    target: Target,
    texts,
    out_dir,
    cfg,
    *,
    settings: TrainSettings = TrainSettings(),
    heldout_texts=None,
    data_file=None,
    resume: bool = False,
    progress: bool = True,
    log=None,
    world: World | None = None,
    start=None,
    finish: bool = False,
    status=None,
):
    """Train an EAGLE-3 or assistant head of ``cfg``'s shape (a ``heads.HeadConfig``) for
    ``target`` into ``out_dir``, as ``dspark.training.train.train_drafter`` trains a block
    drafter (the same data, loop, checkpoints, ``--resume``, fine-tuning from ``start``,
    ``finish``, status, evaluation and report); returns it."""
    import sys  # noqa: PLC0415 (the default log only)
    from pathlib import Path  # noqa: PLC0415 (one use)

    from .best import refuse_finish  # noqa: PLC0415 (the run only)
    from .distill import forget_unfinished  # noqa: PLC0415 (the run only)
    from .heads import head_config, new_head, save_head  # noqa: PLC0415 (the run only)
    from .resume import DATA_FILE  # noqa: PLC0415 (the run only)
    from .start import FROM_KEY, copy_companions  # noqa: PLC0415 (the run only)
    from .status import RunStatus  # noqa: PLC0415 (the run only)
    from .train import _output, _training_data, finish_run  # noqa: PLC0415 (the run only: train imports this module's callers)
    from .trainer import STATE_FILE, TRAIN_DIR  # noqa: PLC0415 (the run only)

    s, world = settings, world or World()
    refuse_world(world, cfg.kind)
    status = status or RunStatus(out_dir)
    out = _output(out_dir, world)
    say = log or (lambda m: print(m, file=sys.stderr))
    resuming = resume and (out / STATE_FILE).is_file()
    if not resume:
        forget_unfinished(out / TRAIN_DIR)
    elif not resuming:
        say(f"nothing to resume in {out}: starting a new run")
    if resuming:
        from ..loading import load_drafter  # noqa: PLC0415 (slow: every format)

        check_head_resume(out, cfg, s)
        drafter = load_drafter(out, target)
        if head_config(drafter) != cfg:
            raise DsparkError(f"--resume: the head in {out} is not of the shape its checkpoint was trained with")
    else:
        drafter = start.drafter if start is not None else new_head(target, cfg, seed=s.seed)
    refuse_finish(finish, resuming, out)
    status.set("preparing", steps=s.steps, message="finishing the paused run" if finish else "preparing the data")
    made = trained_as(cfg)
    seqs, held, distill_seconds, new = _training_data(
        target,
        texts,
        heldout_texts,
        s,
        data_file=Path(data_file) if data_file else None,
        resuming=resuming,
        progress=progress,
        say=say,
        src=out,
        world=world,
        run=[target.target_id, made, asdict(s)],
    )
    if new:
        from .texts import texts_digest  # noqa: PLC0415 (the run only)

        seqs.save(out / DATA_FILE, held, texts=None if data_file else texts_digest(texts))
        forget_unfinished(out / TRAIN_DIR)
    trainer = StepwiseTrainer(target, drafter, seqs, s, trained_as=made)
    if resuming:
        meta = trainer.load_state(out)
        say(f"resumed at step {trainer.step} of {s.steps}")
        if meta["settings"]["steps"] != s.steps:
            say(f"note: the first run planned {meta['settings']['steps']} steps; the schedule now spans {s.steps}")
    elif start is not None:
        trainer.run_meta[FROM_KEY] = start.record()
        copy_companions(start, out)
    if FROM_KEY in trainer.run_meta:
        say(f"fine-tuning the drafter in {trainer.run_meta[FROM_KEY]['path']}")
    say(
        f"drafter: {cfg.kind} head ({drafter.format} format), {drafter.num_params():,} parameters, "
        f"{cfg.num_layers} layer(s), {drafter.block_size} drafts a round; "
        f"{len(seqs)} sequences of {seqs.tokens.shape[1]}"
    )
    finish_run(
        trainer,
        out=out,
        held=held,
        trained_as=made,
        distill_seconds=distill_seconds,
        progress=progress,
        save=lambda d: save_head(drafter, d),
        say=say,
        finish=finish,
        status=status,
    )
    return drafter


def check_head_resume(out, cfg, settings: TrainSettings) -> None:
    """Refuse to resume a head's checkpoint trained with another shape or settings, naming the
    first difference."""
    from .resume import changed, check_settings, saved_run  # noqa: PLC0415 (the resume check only)

    saved_cfg, saved = saved_run(out)
    for key, value in trained_as(cfg).items():
        if saved_cfg.get(key) != value:
            raise changed(out, key, saved_cfg.get(key), value)
    check_settings(out, saved, settings)

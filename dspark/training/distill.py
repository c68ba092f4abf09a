"""Self-distillation: the target writes the drafter's training sequences, and survives being
stopped while it does.

On two CPU cores the target writing a few thousand sequences takes an hour or more, so the
batches it has finished are kept on disk after each one (:class:`FinishedBatches`): a run
killed at any point (Ctrl-C, SIGTERM, a lost machine) and started again with ``--resume``
decodes only the batches it had not finished, and ends with the very sequences an
uninterrupted run writes (greedy decoding of the same batches is deterministic).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import mlx.core as mx
import numpy as np

from ..errors import DsparkError
from ..files import save_safetensors
from ..sampling import greedy_choice
from ..target import Target
from .data import Sequences, cut_prompts, data_sequences, long_prompts, progress_bar, split_heldout
from .distributed import World

#: Files of unfinished self-distillations, in the training run's ``.train/`` folder.
PARTIAL_GLOB = "distill-*.safetensors"


class FinishedBatches:
    """The rows of one self-distillation that finished batches wrote, kept in ``folder`` (none:
    kept nowhere) after each batch, atomically. ``key`` names the job (target, prompts, lengths,
    batching): a file written for another job is never read, and a damaged one is set aside
    with a message, never trusted."""

    def __init__(self, folder: Path | None, key: str, *, n: int, seq_len: int, vocab_size: int, say: Callable):
        """Room for ``n`` rows of ``seq_len`` tokens below ``vocab_size`` (what a file must hold to
        be read); ``say`` hears when a file is continued or set aside."""
        self.path = folder / f"distill-{key[:24]}.safetensors" if folder is not None else None
        self.key, self.vocab_size, self.say = key, vocab_size, say
        self.tokens = np.zeros((n, seq_len), np.int32)
        self.lengths = np.zeros(n, np.int32)  # rows of unfinished batches (or another process's) stay 0
        self.first = np.zeros(n, np.int32)
        self.done: set[int] = set()

    def load(self, batches: int) -> None:
        """The rows finished by an earlier run of this job, if it left any."""
        if self.path is None or not self.path.is_file():
            return
        try:
            a, meta = mx.load(str(self.path), return_metadata=True)
            tokens, lengths, first = (np.array(a[k]) for k in ("tokens", "lengths", "first_anchor"))
            done = json.loads(meta["done"])
            ok = (
                meta.get("key") == self.key
                and tokens.shape == self.tokens.shape
                and tokens.dtype == np.int32
                and lengths.shape == first.shape == self.lengths.shape
                and isinstance(done, list)
                and all(type(b) is int and 0 <= b < batches for b in done)
                and ((tokens >= 0) & (tokens < self.vocab_size)).all()
            )
        except Exception:  # a file cut short or altered: mlx, json and numpy raise their own errors
            ok = False
        if not ok:
            self.say(f"{self.path} is not a readable record of this self-distillation: it starts over")
            self.path.unlink(missing_ok=True)
            return
        self.tokens, self.lengths, self.first, self.done = tokens, lengths, first, set(done)
        self.say(f"self-distillation: continuing after {len(self.done)} of {batches} batches")

    def save(self) -> None:
        if self.path is None:
            return
        arrays = {
            "tokens": mx.array(self.tokens),
            "lengths": mx.array(self.lengths),
            "first_anchor": mx.array(self.first),
        }
        save_safetensors(self.path, arrays, {"key": self.key, "done": json.dumps(sorted(self.done))})


def forget_unfinished(folder: Path) -> None:
    """Delete what unfinished self-distillations left in ``folder`` (a fresh run, or a finished one)."""
    for f in folder.glob(PARTIAL_GLOB):
        f.unlink(missing_ok=True)


def _job_key(target: Target, prompts: list[list[int]], lengths: str, batch: int) -> str:
    """What decides the continuations: the target's weights (its norms, as the drafters' check
    reads them, and the embeddings of a few tokens, which tell apart models whose norms are all
    ones), the prompts and the decoding's shape."""
    rows = target.lm.model.embed_tokens(mx.arange(8)[None]).astype(mx.float32)
    h = hashlib.sha256(f"{target.target_id}|{target.weights_fingerprint}|{lengths}|{batch}|{len(prompts)}".encode())
    h.update(np.round(np.array(rows), 4).tobytes())
    for p in prompts:
        h.update(np.asarray(p, np.int64).tobytes() + b"|")
    return h.hexdigest()


def greedy_continuations(
    target: Target,
    prompts: list[list[int]],
    seq_len: int,
    *,
    batch: int = 64,
    new_tokens: int | None = None,
    label: str = "self-distill",
    progress: bool = False,
    world: World | None = None,
    keep_in: Path | None = None,
    say: Callable[[str], None] = lambda m: None,
) -> Sequences:
    """Each prompt followed by the target's own greedy continuation up to ``seq_len`` tokens (cut after
    the first EOS), or up to ``new_tokens`` after the prompt where that is fewer. Prompts of equal
    length decode together in one batch (on 2 CPU cores, 16 rows decode ~300 tok/s, 64 rows ~500,
    128 rows ~900 for a 6-layer, 256-wide target). The processes of a distributed ``world`` each
    decode their share of those batches (the very batches one process decodes, so the same tokens)
    and then swap them. A single process given ``keep_in`` keeps its finished batches there and
    continues after them. ``batch`` rows decode together; ``progress`` shows a bar named ``label``;
    ``say`` hears what was kept."""
    world = world or World()
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(min(len(p), seq_len - 1), []).append(i)
    batches = [
        (n, members[b : b + batch]) for n, members in sorted(by_len.items()) for b in range(0, len(members), batch)
    ]
    mine = [b for b in range(len(batches)) if b % world.size == world.rank]
    key = _job_key(target, prompts, f"{seq_len}|{new_tokens}", batch)
    new_of = lambda n: seq_len - n if new_tokens is None else min(new_tokens, seq_len - n)
    rows = FinishedBatches(
        keep_in if world.size == 1 else None,
        key,
        n=len(prompts),
        seq_len=seq_len,
        vocab_size=target.dims.vocab_size,
        say=say,
    )
    rows.load(len(batches))
    tokens_of = lambda b: len(batches[b][1]) * new_of(batches[b][0])
    bar = progress_bar(sum(tokens_of(b) for b in mine), progress, label, "tok")
    if bar:
        bar.update(sum(tokens_of(b) for b in rows.done))
    eos = set(target.eos_token_ids)
    for b in mine:
        if b in rows.done:
            continue
        n, idx = batches[b]
        gen = _greedy_batch(target, [prompts[i][:n] for i in idx], new_of(n))
        for row, i in enumerate(idx):
            rows.tokens[i, :n], rows.tokens[i, n : n + gen.shape[1]] = prompts[i][:n], gen[row]
            stops = [j for j, t in enumerate(gen[row]) if int(t) in eos]
            rows.lengths[i] = n + (stops[0] + 1 if stops else gen.shape[1])
            rows.first[i] = n - 1
        rows.done.add(b)
        rows.save()
        if bar:
            bar.update(tokens_of(b))
    if bar:
        bar.close()
    tokens, lengths, first = rows.tokens, rows.lengths, rows.first
    if world.size > 1:
        tokens, lengths, first = (
            np.array(a) for a in world.sum([mx.array(a) for a in (tokens, lengths, first)], "the self-distilled data")
        )
    return Sequences(tokens, lengths, first)


def _greedy_batch(target: Target, prompts: list[list[int]], new: int) -> np.ndarray:
    """[len(prompts), new]: the target's greedy tokens after each prompt (all of one length)."""
    x = mx.array(np.array(prompts, np.int32))
    cache = target.make_cache()
    tok = greedy_choice(target.model(x, cache=cache)[:, -1])
    out = [tok]
    for _ in range(new - 1):
        tok = greedy_choice(target.model(tok[:, None], cache=cache)[:, -1])
        mx.async_eval(tok)
        out.append(tok)
    return np.array(mx.stack(out, axis=1))


def _subset(seqs: Sequences, keep: Sequence[int]) -> Sequences:
    keep = np.asarray(keep, np.int64)
    return Sequences(seqs.tokens[keep], seqs.lengths[keep], seqs.first_anchor[keep])


def build_training_data(
    target: Target,
    docs,
    *,
    seq_len: int,
    prompt_len: int,
    self_distill: bool,
    max_sequences: int | None,
    heldout: int,
    rng: np.random.Generator,
    progress: bool,
    say,
    long_share: float = 0.0,
    long_len: int = 0,
    world: World | None = None,
    keep_in: Path | None = None,
):
    """(training sequences, held-out prompts). Without explicit held-out texts, ``heldout``
    stretches of the data are set aside: their prompts evaluate the drafter and they are
    never trained on. With self-distillation and ``long_share``, that share of the sequences
    start from a long prompt (a quarter, half, three quarters or all of ``long_len`` tokens) and
    continue for as many target-written tokens as a short one: a drafter learns the contexts users
    give it, not only short windows. Long prompts come from documents no held-out prompt was cut
    from. The processes of a distributed ``world`` share the target's writing; a single process
    keeps its finished batches in ``keep_in`` (:class:`FinishedBatches`) and continues after them."""
    eos = min(target.eos_token_ids) if target.eos_token_ids else None
    if self_distill:
        prompts = cut_prompts(docs, seq_len, prompt_len)
        prompts, held = split_heldout(prompts, heldout)
        longs = _long_prompts(
            docs,
            held,
            seq_len=seq_len,
            prompt_len=prompt_len,
            share=long_share,
            long_len=long_len,
            short=len(prompts),
            rng=rng,
        )
        if max_sequences and len(prompts) + len(longs) > max_sequences:
            keep_long = round(max_sequences * len(longs) / (len(prompts) + len(longs)))
            longs = [longs[i] for i in sorted(rng.choice(len(longs), keep_long, replace=False))]
            prompts = [prompts[i] for i in sorted(rng.choice(len(prompts), max_sequences - keep_long, replace=False))]
        if not prompts:
            raise DsparkError("the training data gave no prompts")
        say(
            f"self-distillation: the target writes {len(prompts)} sequences of {seq_len} tokens"
            + (f" and {len(longs)} after long prompts of up to {long_len}" if longs else "")
        )
        write = dict(progress=progress, world=world, keep_in=keep_in, say=say)
        parts = [greedy_continuations(target, prompts, seq_len, **write)]
        for L in sorted({len(p) for p in longs}):
            group = [p for p in longs if len(p) == L]
            parts.append(greedy_continuations(target, group, L + seq_len - prompt_len, **write))
        return Sequences.concat(parts), held
    seqs = data_sequences(docs, seq_len, eos)
    heads = [list(map(int, row[: min(prompt_len, n - 1)])) for row, n in zip(seqs.tokens, seqs.lengths)]
    train, held = split_heldout(heads, heldout)
    held_ids = {tuple(h) for h in held}
    keep = [i for i, h in enumerate(heads) if tuple(h) not in held_ids]
    if max_sequences and len(keep) > max_sequences:
        keep = sorted(rng.choice(keep, max_sequences, replace=False))
    return _subset(seqs, keep), held


def _long_prompts(
    docs, held, *, seq_len: int, prompt_len: int, share: float, long_len: int, short: int, rng: np.random.Generator
) -> list[list[int]]:
    """The long prompts ``build_training_data`` adds: ``share`` of all sequences, ``short`` of
    them short ones; up to ``long_len`` tokens each, cut (drawn with ``rng``) from ``docs`` no
    ``held`` prompt was cut from, continued to as many tokens as a short prompt of ``prompt_len``
    is in a sequence of ``seq_len``."""
    if not 0 < share < 1 or long_len <= prompt_len:
        return []
    held_ids = {tuple(h) for h in held}
    clean = [d for d in docs if not any(tuple(p) in held_ids for p in cut_prompts([d], seq_len, prompt_len))]
    lengths = sorted({max(prompt_len + 1, round(long_len * f)) for f in (0.25, 0.5, 0.75, 1.0)})
    found = long_prompts(clean, lengths, long_len + seq_len - prompt_len)
    n = min(len(found), round(share / (1 - share) * short))
    return [found[i] for i in sorted(rng.choice(len(found), n, replace=False))] if n else []

"""Training data for drafters: sequences (optionally written by the target itself) and the
frozen target's features for them, cached per sequence. See ``dspark.training.train``."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import mlx.core as mx
import numpy as np

from ..errors import DsparkError
from ..sampling import greedy_choice
from ..target import Target
from .distributed import World

# ----------------------------------------------------------------------------- data
@dataclass
class Sequences:
    """Training sequences: ``tokens`` [N, S] (padded after ``lengths``), and per sequence the
    first position an anchor may take (the last prompt token under self-distillation)."""

    tokens: np.ndarray
    lengths: np.ndarray
    first_anchor: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def concat(cls, parts: list["Sequences"]) -> "Sequences":
        """One set of sequences, each kept as long as it is (the shorter padded after its end)."""
        width = max(p.tokens.shape[1] for p in parts)
        tokens = np.concatenate([np.pad(p.tokens, ((0, 0), (0, width - p.tokens.shape[1]))) for p in parts])
        return cls(tokens, np.concatenate([p.lengths for p in parts]), np.concatenate([p.first_anchor for p in parts]))

    def save(self, path: Path, heldout: list[list[int]]) -> None:
        """Write the sequences and the held-out prompts (JSON metadata) for ``--resume``."""
        from ..files import save_safetensors

        arrays = {"tokens": mx.array(self.tokens), "lengths": mx.array(self.lengths), "first_anchor": mx.array(self.first_anchor)}
        save_safetensors(path, arrays, {"heldout": json.dumps([list(map(int, h)) for h in heldout])})

    @classmethod
    def load(cls, path: Path, vocab_size: int) -> tuple["Sequences", list[list[int]]]:
        """Sequences and held-out prompts that ``save`` wrote, checked whole before any is used:
        shapes, lengths and anchors inside each row, token ids inside the target's vocabulary
        (an id past it would index past the embedding)."""
        from ..modeldir import read_header
        from ..reading import parse_json

        header = read_header(path)
        want = {"tokens": 2, "lengths": 1, "first_anchor": 1}
        if set(header) - {"__metadata__"} != set(want) or any(
                header[k]["dtype"] != "I32" or len(header[k]["shape"]) != n for k, n in want.items()):
            raise DsparkError(f"{path} is not training data written by dspark train (tokens, lengths, first_anchor)")
        try:
            a, meta = mx.load(str(path), return_metadata=True)
        except Exception as e:  # mlx raises RuntimeError/ValueError for damaged files
            raise DsparkError(f"{path} is not a readable safetensors file ({e})") from None
        seqs = cls(np.array(a["tokens"]), np.array(a["lengths"]), np.array(a["first_anchor"]))
        held = parse_json(meta.get("heldout", "[]"), f"{path} (its held-out prompts)", allow_nan=False)
        seqs.check(vocab_size, path)
        if not isinstance(held, list) or len(held) > 100_000 or not all(
                isinstance(h, list) and len(h) <= seqs.tokens.shape[1] and
                all(type(t) is int and 0 <= t < vocab_size for t in h) for h in held):
            raise DsparkError(f"{path}: its held-out prompts are not lists of token ids in the vocabulary")
        return seqs, held

    def check(self, vocab_size: int, where) -> None:
        N, S = self.tokens.shape
        if not (N >= 1 and 2 <= S <= 1_000_000 and self.lengths.shape == (N,) and self.first_anchor.shape == (N,)):
            raise DsparkError(f"{where}: the training data's arrays do not agree in shape")
        if not ((self.lengths >= 2) & (self.lengths <= S)).all():
            raise DsparkError(f"{where}: a training sequence's length is outside 2..{S}")
        if not ((self.first_anchor >= 0) & (self.first_anchor <= self.lengths - 2)).all():
            raise DsparkError(f"{where}: a training sequence's first anchor is outside the sequence")
        if not ((self.tokens >= 0) & (self.tokens < vocab_size)).all():
            raise DsparkError(f"{where}: a token id is outside the target's vocabulary ({vocab_size})")


def encode_all(target: Target, texts: Sequence[str | Sequence[int]]) -> list[list[int]]:
    """Token ids of each text (token-id lists pass through, for targets without a tokenizer)."""
    docs = [target.encode(t) if isinstance(t, str) else [int(x) for x in t] for t in texts]
    return [d for d in docs if d]


def cut_prompts(docs: list[list[int]], seq_len: int, prompt_len: int) -> list[list[int]]:
    """One prompt per ``seq_len`` stretch of each document: its first ``prompt_len`` tokens."""
    return [d[s : s + prompt_len] for d in docs for s in range(0, len(d), seq_len) if len(d[s : s + prompt_len]) >= 1]


def long_prompts(docs: list[list[int]], lengths: list[int], stride: int) -> list[list[int]]:
    """Prompts of several long lengths, taken in turn: one per ``stride`` tokens of each
    document that still holds that many tokens from there."""
    out: list[list[int]] = []
    for d in docs:
        for s in range(0, len(d), stride):
            L = lengths[len(out) % len(lengths)]
            if len(d) - s >= L:
                out.append(d[s : s + L])
    return out


def split_heldout(prompts: list[list[int]], n: int) -> tuple[list[list[int]], list[list[int]]]:
    """(train, held-out): the ``n`` prompts with the smallest content hash are held out
    (deterministic, independent of order, and never the whole set)."""
    n = min(n, len(prompts) // 2)
    key = [hashlib.sha256(np.asarray(p, np.int64).tobytes()).hexdigest() for p in prompts]
    held = set(sorted(range(len(prompts)), key=lambda i: key[i])[:n])
    return [p for i, p in enumerate(prompts) if i not in held], [p for i, p in enumerate(prompts) if i in held]


def data_sequences(docs: list[list[int]], seq_len: int, eos: int | None, pad: int = 0) -> Sequences:
    """Plain training on the data: documents joined by EOS and cut into ``seq_len`` windows."""
    stream: list[int] = []
    for d in docs:
        stream.extend(d + ([eos] if eos is not None else []))
    rows, lengths = [], []
    for s in range(0, len(stream), seq_len):
        piece = stream[s : s + seq_len]
        if len(piece) >= 2:
            rows.append(piece + [pad] * (seq_len - len(piece)))
            lengths.append(len(piece))
    if not rows:
        raise DsparkError("the training data has fewer than 2 tokens")
    return Sequences(np.array(rows, np.int32), np.array(lengths, np.int32), np.zeros(len(rows), np.int32))


def greedy_continuations(target: Target, prompts: list[list[int]], seq_len: int, batch: int = 64,
                         progress: bool = False, world: World | None = None) -> Sequences:
    """Each prompt followed by the target's own greedy continuation up to ``seq_len`` tokens
    (cut after the first EOS). Prompts of equal length decode together in one batch (on 2 CPU
    cores, 16 rows decode ~300 tok/s, 64 rows ~500, 128 rows ~900 for the demo target). The
    processes of a distributed ``world`` each decode their share of those batches (the very
    batches one process decodes, so the same tokens) and then swap them."""
    world = world or World()
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(min(len(p), seq_len - 1), []).append(i)
    batches = [(n, members[b : b + batch]) for n, members in sorted(by_len.items())
               for b in range(0, len(members), batch)]
    mine = batches[world.rank :: world.size]
    tokens = np.zeros((len(prompts), seq_len), np.int32)
    lengths = np.zeros(len(prompts), np.int32)  # rows another process writes stay 0 until the swap
    first = np.zeros(len(prompts), np.int32)
    bar = progress_bar(sum(len(idx) * (seq_len - n) for n, idx in mine), progress, "self-distill", "tok")
    for n, idx in mine:
        gen = _greedy_batch(target, [prompts[i][:n] for i in idx], seq_len - n)
        eos = set(target.eos_token_ids)
        for row, i in enumerate(idx):
            tokens[i, :n], tokens[i, n:] = prompts[i][:n], gen[row]
            stops = [j for j, t in enumerate(gen[row]) if int(t) in eos]
            lengths[i] = n + stops[0] + 1 if stops else seq_len
            first[i] = n - 1
        if bar:
            bar.update(len(idx) * (seq_len - n))
    if bar:
        bar.close()
    if world.size > 1:
        tokens, lengths, first = (np.array(a) for a in world.sum([mx.array(a) for a in (tokens, lengths, first)],
                                                                 "the self-distilled data"))
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


class TargetFeatures:
    """The frozen target's tap rows [S, m*H] and final normed hidden states [S, H] per
    sequence, computed on first use and kept (up to ``capacity`` sequences, then evicting
    the oldest) because the target forward is the expensive part of a training step."""

    def __init__(self, target: Target, tap_layers: Sequence[int], seqs: Sequences, capacity: int):
        self.target, self.seqs, self.capacity = target, seqs, max(1, capacity)
        self.taps = tuple(tap_layers)
        self.last = target.dims.num_layers - 1
        self.store: dict[int, tuple[mx.array, mx.array]] = {}
        self.forwards = 0
        self.seconds = 0.0

    def get(self, i: int) -> tuple[mx.array, mx.array]:
        return self.get_many([i])[0]

    def get_many(self, indices: Sequence[int], width: int | None = None) -> list[tuple[mx.array, mx.array]]:
        """Features of several sequences, each ``width`` rows (default: the sequences' own width;
        rows past a sequence's end are zeros, never attended to); the missing ones come from one
        batched target pass over no more rows than the longest of them holds."""
        found = {int(i): self.store[int(i)] for i in indices if int(i) in self.store}
        missing = list(dict.fromkeys(int(i) for i in indices if int(i) not in found))
        width = width or self.seqs.tokens.shape[1]
        if missing:
            t0 = time.perf_counter()
            rows_needed = int(self.seqs.lengths[missing].max())
            # Tapping the last layer too gives the final hidden (its output, normed) from the
            # same pass, without materialising [S, V] logits.
            _, rows = self.target.forward(mx.array(self.seqs.tokens[missing, :rows_needed]), None,
                                          self.taps + (self.last,), logits=False)
            rows = mx.stop_gradient(rows)
            H = self.target.dims.hidden_size
            taps, final = rows[..., : len(self.taps) * H], self.target.final_norm(rows[..., len(self.taps) * H :])
            mx.eval(taps, final)
            for j, i in enumerate(missing):
                while len(self.store) >= self.capacity:
                    self.store.pop(next(iter(self.store)))
                n = int(self.seqs.lengths[i])  # a sequence keeps its own rows only
                self.store[i] = found[i] = (taps[j, :n], final[j, :n])
            self.forwards += len(missing)
            self.seconds += time.perf_counter() - t0
        return [tuple(_rows(a, width) for a in found[int(i)]) for i in indices]


def _rows(a: mx.array, width: int) -> mx.array:
    """``a`` [n, ...] as exactly ``width`` rows: cut, or padded with zeros after its end."""
    if a.shape[0] >= width:
        return a[:width]
    return mx.concatenate([a, mx.zeros((width - a.shape[0], *a.shape[1:]), a.dtype)])


def progress_bar(total: int, progress: bool, desc: str, unit: str):
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, file=sys.stderr)


# ----------------------------------------------------------------------------- the run
def _subset(seqs: Sequences, keep: Sequence[int]) -> Sequences:
    keep = np.asarray(keep, np.int64)
    return Sequences(seqs.tokens[keep], seqs.lengths[keep], seqs.first_anchor[keep])


def build_training_data(target: Target, docs, *, seq_len: int, prompt_len: int, self_distill: bool,
                        max_sequences: int | None, heldout: int, rng: np.random.Generator, progress: bool, say,
                        long_share: float = 0.0, long_len: int = 0, world: World | None = None):
    """(training sequences, held-out prompts). Without explicit held-out texts, ``heldout``
    stretches of the data are set aside: their prompts evaluate the drafter and they are
    never trained on. With self-distillation and ``long_share``, that share of the sequences
    start from a long prompt (a quarter, half, three quarters or all of ``long_len`` tokens) and
    continue for as many target-written tokens as a short one: a drafter learns the contexts users
    give it, not only short windows. Long prompts come from documents no held-out prompt was cut
    from. The processes of a distributed ``world`` share the target's writing."""
    eos = min(target.eos_token_ids) if target.eos_token_ids else None
    if self_distill:
        prompts = cut_prompts(docs, seq_len, prompt_len)
        prompts, held = split_heldout(prompts, heldout)
        longs = _long_prompts(docs, held, seq_len, prompt_len, long_share, long_len, len(prompts), rng)
        if max_sequences and len(prompts) + len(longs) > max_sequences:
            keep_long = round(max_sequences * len(longs) / (len(prompts) + len(longs)))
            longs = [longs[i] for i in sorted(rng.choice(len(longs), keep_long, replace=False))]
            prompts = [prompts[i] for i in sorted(rng.choice(len(prompts), max_sequences - keep_long, replace=False))]
        if not prompts:
            raise DsparkError("the training data gave no prompts")
        say(f"self-distillation: the target writes {len(prompts)} sequences of {seq_len} tokens"
            + (f" and {len(longs)} after long prompts of up to {long_len}" if longs else ""))
        parts = [greedy_continuations(target, prompts, seq_len, progress=progress, world=world)]
        for L in sorted({len(p) for p in longs}):
            group = [p for p in longs if len(p) == L]
            parts.append(greedy_continuations(target, group, L + seq_len - prompt_len, progress=progress, world=world))
        return Sequences.concat(parts), held
    seqs = data_sequences(docs, seq_len, eos)
    heads = [list(map(int, row[: min(prompt_len, n - 1)])) for row, n in zip(seqs.tokens, seqs.lengths)]
    train, held = split_heldout(heads, heldout)
    held_ids = {tuple(h) for h in held}
    keep = [i for i, h in enumerate(heads) if tuple(h) not in held_ids]
    if max_sequences and len(keep) > max_sequences:
        keep = sorted(rng.choice(keep, max_sequences, replace=False))
    return _subset(seqs, keep), held


def _long_prompts(docs, held, seq_len: int, prompt_len: int, share: float, long_len: int, short: int,
                  rng: np.random.Generator) -> list[list[int]]:
    """The long prompts ``build_training_data`` adds: ``share`` of all sequences."""
    if not 0 < share < 1 or long_len <= prompt_len:
        return []
    held_ids = {tuple(h) for h in held}
    clean = [d for d in docs if not any(tuple(p) in held_ids for p in cut_prompts([d], seq_len, prompt_len))]
    lengths = sorted({max(prompt_len + 1, round(long_len * f)) for f in (0.25, 0.5, 0.75, 1.0)})
    found = long_prompts(clean, lengths, long_len + seq_len - prompt_len)
    n = min(len(found), round(share / (1 - share) * short))
    return [found[i] for i in sorted(rng.choice(len(found), n, replace=False))] if n else []


def held_out_prompts(target: Target, heldout_texts, seq_len: int) -> list[list[int]]:
    return [d[-seq_len:] for d in encode_all(target, heldout_texts)]


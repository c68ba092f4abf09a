"""Training data for drafters: sequences (optionally written by the target itself) and the
frozen target's features for them, cached per sequence. See ``dspark.training.train``."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np
from tqdm import tqdm

from ..errors import DsparkError
from ..files import save_safetensors
from ..modeldir import read_header
from ..reading import parse_json
from ..target import Target
from .inputs import encode_text


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
    def concat(cls, parts: list[Sequences]) -> Sequences:
        """One set of sequences, each kept as long as it is (the shorter padded after its end)."""
        width = max(p.tokens.shape[1] for p in parts)
        tokens = np.concatenate([np.pad(p.tokens, ((0, 0), (0, width - p.tokens.shape[1]))) for p in parts])
        return cls(tokens, np.concatenate([p.lengths for p in parts]), np.concatenate([p.first_anchor for p in parts]))

    def save(self, path: Path, heldout: list[list[int]], texts: str | None = None) -> None:
        """Write the sequences and the held-out prompts (JSON metadata) for ``--resume``, with
        ``texts``, the digest of the texts they were made from (``texts.texts_digest``), when known."""
        arrays = {
            "tokens": mx.array(self.tokens),
            "lengths": mx.array(self.lengths),
            "first_anchor": mx.array(self.first_anchor),
        }
        meta = {"heldout": json.dumps([list(map(int, h)) for h in heldout])}
        if texts is not None:
            meta["texts"] = texts
        save_safetensors(path, arrays, meta)

    @classmethod
    def load(cls, path: Path, vocab_size: int) -> tuple[Sequences, list[list[int]]]:
        """Sequences and held-out prompts that ``save`` wrote, checked whole before any is used:
        shapes, lengths and anchors inside each row, token ids inside the target's vocabulary
        (an id past it would index past the embedding)."""
        header = read_header(path)
        want = {"tokens": 2, "lengths": 1, "first_anchor": 1}
        if set(header) - {"__metadata__"} != set(want) or any(
            header[k]["dtype"] != "I32" or len(header[k]["shape"]) != n for k, n in want.items()
        ):
            raise DsparkError(f"{path} is not training data written by dspark train (tokens, lengths, first_anchor)")
        try:
            a, meta = mx.load(str(path), return_metadata=True)
        except Exception as e:  # mlx raises RuntimeError/ValueError for damaged files
            raise DsparkError(f"{path} is not a readable safetensors file ({e})") from None
        seqs = cls(np.array(a["tokens"]), np.array(a["lengths"]), np.array(a["first_anchor"]))
        held = parse_json(meta.get("heldout", "[]"), f"{path} (its held-out prompts)", allow_nan=False)
        seqs.check(vocab_size, path)
        if (
            not isinstance(held, list)
            or len(held) > 100_000
            or not all(
                isinstance(h, list)
                and len(h) <= seqs.tokens.shape[1]
                and all(type(t) is int and 0 <= t < vocab_size for t in h)
                for h in held
            )
        ):
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


def encode_all(target: Target, texts: Sequence[str | Sequence[int]], *, prompts: bool = False) -> list[list[int]]:
    """Token ids of each text (token-id lists pass through, for targets without a tokenizer; a
    chat rendered with the target's chat template, with ``prompts`` up to its last user turn:
    ``dspark.training.inputs.encode_text``)."""
    docs = [encode_text(target, t, prompt=prompts) if isinstance(t, str) else [int(x) for x in t] for t in texts]
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


class TargetFeatures:
    """The frozen target's tap rows [n, m*H] and final normed hidden states [n, H] of each
    sequence (its own n rows), computed on first use and kept in up to ``capacity_mb`` of memory
    (then evicting the oldest), because the target forward is the expensive part of a training
    step. Each is a copy of its own: a slice of the batched forward's output would keep the whole
    batch's buffer alive."""

    def __init__(self, target: Target, tap_layers: Sequence[int], seqs: Sequences, capacity_mb: float):
        self.target, self.seqs, self.capacity = target, seqs, capacity_mb * 2**20
        self.stored_bytes = 0
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
            _, rows = self.target.forward(
                mx.array(self.seqs.tokens[missing, :rows_needed]), None, self.taps + (self.last,), logits=False
            )
            rows = mx.stop_gradient(rows)
            H = self.target.dims.hidden_size
            taps, final = rows[..., : len(self.taps) * H], self.target.final_norm(rows[..., len(self.taps) * H :])
            mx.eval(taps, final)
            for j, i in enumerate(missing):
                n = int(self.seqs.lengths[i])  # a sequence keeps its own rows only
                kept = found[i] = (mx.contiguous(taps[j, :n]), mx.contiguous(final[j, :n]))
                size = kept[0].nbytes + kept[1].nbytes
                while self.store and self.stored_bytes + size > self.capacity:
                    self.stored_bytes -= sum(a.nbytes for a in self.store.pop(next(iter(self.store))))
                self.store[i] = kept
                self.stored_bytes += size
            mx.eval([a for i in missing for a in found[i]])  # the copies, so the batch's buffer is freed
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
    return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, file=sys.stderr)


def held_out_prompts(target: Target, heldout_texts, seq_len: int) -> list[list[int]]:
    return [d[-seq_len:] for d in encode_all(target, heldout_texts, prompts=True)]

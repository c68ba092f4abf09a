"""The user's training texts as the target reads them, and what they must be to train on: a chat
(``"messages"`` in a ``.jsonl`` line) rendered with the target's chat template; data with
fewer anchor positions than one batch, or that the tokenizer splits mostly into single bytes,
refused in one sentence before the run spends anything on it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from .. import chat_template
from ..errors import DsparkError
from ..rust_calls import rust_call
from ..target import Target
from .texts import Chat

#: The share of byte tokens above which the data is refused (:func:`check_bytes`).
BYTE_SHARE = 0.5
#: Tokens of the data looked at to tell its share of byte tokens (a sample is evidence enough).
BYTE_SAMPLE = 200_000


def encode_text(target: Target, text: str, *, prompt: bool = False) -> list[int]:
    """Token ids of a text; a :class:`Chat` rendered with the target's chat template, whole, or
    with ``prompt`` up to its last user turn with the generation prompt (what the target answers)."""
    if not isinstance(text, Chat):
        return target.encode(text)
    if not target.has_chat_template:
        raise DsparkError(
            'the training data holds chats ("messages"), but the target\'s tokenizer has no chat template to '
            'render them with: give the texts as "text" instead'
        )
    messages = text.prompt() if prompt else list(text.messages)
    size = sum(len(m["content"]) for m in messages)

    def apply() -> str:
        return target.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=prompt, enable_thinking=False
        )

    rendered = rust_call("the target's chat template failed on a chat of the data", chat_template.render, apply, size)
    return rust_call(
        "the target's tokenizer could not encode a chat of the data",
        target.tokenizer.encode,
        rendered,
        add_special_tokens=False,
    )


def check_anchors(seqs, batch: int) -> None:
    """Refuse training sequences that hold fewer anchor positions than one batch draws."""
    anchors = int(np.maximum(seqs.lengths - 1 - seqs.first_anchor, 0).sum()) if len(seqs) else 0
    if anchors < batch:
        raise DsparkError(
            f"the training data is too short: its {len(seqs)} training sequence(s) hold {anchors} positions to "
            f"train at, fewer than one batch of {batch} (--batch): give more text, or a smaller --batch"
        )


def check_bytes(target: Target, docs: Sequence[Sequence[int]]) -> None:
    """Refuse data that the target's tokenizer mostly splits into single bytes (a script its
    vocabulary does not hold): such a drafter learns to guess the bytes of characters, several
    tokens each, and what it learns is little use on the text the target was made for."""
    if target.tokenizer is None:
        return
    sample: list[int] = []
    for d in docs:
        sample.extend(int(t) for t in d[: BYTE_SAMPLE - len(sample)])
        if len(sample) >= BYTE_SAMPLE:
            break
    if not sample:
        return
    counts = Counter(sample)
    byte_ids = {i for i in counts if _is_byte(target, i)}
    share = sum(counts[i] for i in byte_ids) / len(sample)
    if share > BYTE_SHARE:
        raise DsparkError(
            f"the training data is mostly in a script the target's tokenizer splits into single bytes ({share:.0%} "
            f"of its tokens are bytes of a character): a drafter trained on it learns to guess bytes, several a "
            f"character, and drafts little of use; train on text in the languages the target's vocabulary holds "
            f"(mixed in, such data is taken below half of the tokens)"
        )


def _is_byte(target: Target, token: int) -> bool:
    """Whether ``token`` is a byte token: SentencePiece's ``<0xNN>`` fallback, or a byte-level
    BPE token that is part of a character (decoded alone, it is no text)."""
    piece = target.tokenizer.convert_ids_to_tokens(token) if hasattr(target.tokenizer, "convert_ids_to_tokens") else ""
    if isinstance(piece, str) and len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return int(piece[3:5], 16) >= 0x80
    return "\ufffd" in target.decode([token])


__all__ = ["check_anchors", "check_bytes", "encode_text"]

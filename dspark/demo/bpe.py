"""The demo target's tokenizer: byte-level BPE with Gemma's special-token ids.

``<pad>``=0, ``<eos>``=1, ``<bos>``=2, ``<unk>``=3, ``<mask>``=4 (``<mask>`` is id 4 in Gemma
too; the drafter uses it). Nothing is prepended at training or inference, so ``decode(encode(t))
== t`` for any text, whitespace included.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ..files import write_text
from ..reading import read_text
from ..rust_calls import rust_call

SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]  # ids 0..4, in this order
PAD_ID, EOS_ID, BOS_ID, UNK_ID, MASK_ID = range(5)
VOCAB_SIZE = 4096
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def train_tokenizer(texts: Iterable[str], vocab_size: int = VOCAB_SIZE):
    """Byte-level BPE: every byte is representable, whitespace and newlines survive."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    for i, name in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(name) == i, f"special token {name} did not get id {i}"
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    return tok


def save_tokenizer(tok, out_dir: Path) -> None:
    """``tokenizer.json`` plus the config files ``transformers``/``mlx_lm.load`` read."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(out_dir / "tokenizer.json", tok.to_str(pretty=True))
    special = {
        "pad_token": "<pad>",
        "eos_token": "<eos>",
        "bos_token": "<bos>",
        "unk_token": "<unk>",
        "mask_token": "<mask>",
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "add_bos_token": False,  # nothing is prepended, at training or inference
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,  # keep code spacing exact on decode
        # No model_max_length: transformers would warn on every long document encoded
        # (drafter training tokenizes whole files); the model's limit is in config.json.
    }
    write_text(out_dir / "tokenizer_config.json", json.dumps(config, indent=2) + "\n")
    write_text(out_dir / "special_tokens_map.json", json.dumps(special, indent=2) + "\n")


#: The demo tokenizer's file is some 260 KB; a larger one is not it.
MAX_TOKENIZER_BYTES = 64 * 2**20


def load_tokenizer(directory: Path):
    """The tokenizer saved in ``directory``; a DsparkError when its file is missing, not a
    regular file, or not a tokenizer (half-written by a run that was killed)."""
    path = Path(directory) / "tokenizer.json"
    text = read_text(path, MAX_TOKENIZER_BYTES, "tokenizer file")
    return rust_call(f"{path} is not a readable tokenizer", Tokenizer.from_str, text)


def encode_documents(tok, texts: list[str]) -> np.ndarray:
    """All texts as one token stream, each followed by ``<eos>`` (uint16: vocab is 4096)."""
    parts = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        parts.append(np.asarray(enc.ids, dtype=np.uint16))
        parts.append(np.array([EOS_ID], dtype=np.uint16))
    return np.concatenate(parts) if parts else np.zeros(0, np.uint16)

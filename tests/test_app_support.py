"""Tiny model directories for the app tests: a random Gemma-4 target with a word-level
tokenizer, a drafter made for it, a drafter made for another target, and a broken one.

No tests here; ``test_app*.py`` import these helpers.
"""

from __future__ import annotations

import json
from pathlib import Path

WORDS = (
    "the a of and to in is it that was for on are with as his they be at one have this from "
    "or had by hot word but what some we can out other were all there when up use your how "
    "said an each she which do their time if will way about many then them write would like so"
).split()


def _tokenizer_files(out: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    words = specials + WORDS
    words = (words + [f"w{i}" for i in range(vocab_size)])[:vocab_size]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins pieces with spaces
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": "<eos>",
                "bos_token": "<bos>",
                "unk_token": "<unk>",
                "pad_token": "<pad>",
            }
        )
    )


def save_tiny_target(out: Path, seed: int = 0, vocab: int = 96, **kw) -> Path:
    """Write a tiny random Gemma-4 target directory that ``dspark.load_target`` reads."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from tiny import tiny_args, tiny_model

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model = tiny_model(seed, scale=0.15, vocab=vocab, **kw)
    args = tiny_args(vocab=vocab, **kw)
    cfg = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    cfg["eos_token_id"] = 1
    (out / "config.json").write_text(json.dumps(cfg, default=str))
    weights = {f"model.{k}" if not k.startswith("model.") else k: v for k, v in tree_flatten(model.parameters())}
    mx.save_safetensors(str(out / "model.safetensors"), weights)
    _tokenizer_files(out, vocab)
    return out


def save_tiny_drafter(target_dir: Path, out: Path, seed: int = 1, block_size: int = 4) -> Path:
    from dspark import DflashConfig, DflashDrafter, load_target

    target = load_target(target_dir)
    DflashDrafter.init(target, DflashConfig(block_size=block_size, num_layers=1, markov_rank=16), seed=seed).save(out)
    return Path(out)


def make_tiny_dirs(root: Path) -> dict[str, Path]:
    """target, drafter (matches), drafter2 (matches, other seed), other_drafter (mismatch), broken."""
    root = Path(root)
    d = {"target": save_tiny_target(root / "target")}
    d["drafter"] = save_tiny_drafter(d["target"], root / "drafter", seed=1)
    d["drafter2"] = save_tiny_drafter(d["target"], root / "drafter2", seed=2, block_size=3)
    other = save_tiny_target(root / "other_target", seed=5, vocab=80)
    d["other_drafter"] = save_tiny_drafter(other, root / "other_drafter")
    broken = root / "broken"
    broken.mkdir(exist_ok=True)
    (broken / "config.json").write_text("{not json")
    d["broken"] = broken
    return d


def shown_window(qtbot, monkeypatch, home: Path, size: tuple[int, int] = (1280, 800)):
    """A main window shown at ``size`` whose settings live in ``home`` (never the user's); the
    caller closes it."""
    from dspark_studio.window.main_window import MainWindow

    monkeypatch.setenv("DSPARK_STUDIO_HOME", str(home))
    w = MainWindow(prefs=None)
    qtbot.addWidget(w)
    w.resize(*size)
    w.show()
    return w

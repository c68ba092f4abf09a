"""Fast checks of the demo corpus, user data reading and the demo tokenizer (no training)."""

import json
from pathlib import Path

import pytest

from dspark import corpus
from dspark.training.texts import read_texts

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "resources" / "demo" / "target"


def test_splits_are_disjoint_deterministic_and_sized():
    train, held = corpus.corpus_files("train"), corpus.corpus_files("heldout")
    assert train and held
    assert not set(train) & set(held)
    assert train == corpus.corpus_files("train")
    assert 0.01 < len(held) / (len(train) + len(held)) < 0.15
    root = corpus.stdlib_root()
    rels = [p.relative_to(root).as_posix() for p in train]
    assert rels == sorted(rels)
    assert not any(part in corpus.SKIP_DIRS for r in rels for part in r.split("/")[:-1])


def test_heldout_prompts_deterministic():
    prompts = corpus.heldout_prompts(5)
    assert len(prompts) == 5
    assert prompts == corpus.heldout_prompts(5)
    assert all(p.strip() and len(p) <= 400 for p in prompts)


def test_training_prompt_sites_are_headers_from_train_files_only():
    sites = corpus.prompt_sites("train")
    assert len(sites) > 1000 and len(set(sites)) == len(sites)
    assert all(corpus._HEADER.match(s) and len(s) <= 400 for s in sites[:200])
    # The drafters train on these; the evaluation prompts must not be among them.
    held = corpus.heldout_prompts(8)
    assert not set(held) & set(sites)


def test_read_texts(tmp_path):
    (tmp_path / "a.txt").write_text("hello\n")
    (tmp_path / "b.jsonl").write_text('{"text": "one"}\n\n{"prompt": "two"}\n')
    expected = ["hello\n", "one", "two"]
    assert read_texts([tmp_path / "a.txt", tmp_path / "b.jsonl"]) == expected
    assert read_texts([tmp_path]) == expected


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("missing.txt", None, "not found"),
        ("empty.txt", "  \n", "empty"),
        ("bad.jsonl", '{"text": "ok"}\n{oops\n', "line 2 is not valid JSON"),
        ("nofield.jsonl", '{"body": "x"}\n', "no string"),
        ("latin1.txt", b"caf\xe9", "not UTF-8"),
    ],
)
def test_read_texts_errors(tmp_path, name, content, message):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=message):
        read_texts([path])


@pytest.mark.skipif(not (TARGET / "tokenizer.json").exists(), reason="demo target not built")
def test_demo_tokenizer_round_trip_and_special_ids():
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    tok = load_tokenizer(TARGET)
    text = 'def f(a,  b):\n\t"""Doc."""\n    return a  +  b  # é ✓\n\n\n  x = \'π\'\r\n'
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert ids[0] != 2  # nothing (no <bos>) is prepended
    assert [tok.convert_tokens_to_ids(t) for t in ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>")] == [0, 1, 2, 3, 4]
    assert tok.eos_token_id == 1 and tok.bos_token_id == 2
    config = json.loads((TARGET / "config.json").read_text())
    assert config["model_type"] == "gemma4_text"
    assert config["eos_token_id"] == 1 and config["bos_token_id"] == 2
    assert config["vocab_size"] == len(tok) == 4096

"""What ``dspark train --data`` reads, and what it refuses: ``.jsonl`` chats (``"messages"``)
rendered with the target's chat template, besides ``"text"``/``"prompt"``; empty, binary, too
short, mostly-bytes data, each one sentence (exit 2) that leaves the run's status saying so;
and a run folder written by another version of dspark."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from hostile_fixtures import TRAIN
from tiny import write_tiny_target_dir

from dspark import load_target
from dspark.cli import main
from dspark.training.texts import Chat, read_texts

TEMPLATE = (
    "{% for m in messages %}<bos>{{ m['role'] }}\n{{ m['content'] }}<eos>\n{% endfor %}"
    "{% if add_generation_prompt %}<bos>assistant\n{% endif %}"
)
WORDS = "def class return self if else for in while import from as with print value name".split()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_data")
    plain = write_tiny_target_dir(root / "plain", window=16)
    chat = write_tiny_target_dir(root / "chat", window=16)
    config = json.loads((chat / "tokenizer_config.json").read_text())
    (chat / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    rng = np.random.default_rng(0)
    chats = root / "chats.jsonl"
    lines = []
    for _ in range(30):
        ask, answer = (" ".join(rng.choice(WORDS, size=8)) for _ in range(2))
        messages = [{"role": "user", "content": ask}, {"role": "assistant", "content": answer}]
        lines.append(json.dumps({"messages": messages}))
    chats.write_text("\n".join(lines) + "\n")
    return {"root": root, "plain": plain, "chat": chat, "chats": chats}


def train(world, target: str, data: Path, out: Path, *extra: str, distill: bool = True) -> int:
    argv = ["train", "--target", str(world[target]), "--data", str(data), "--out", str(out), "--steps", "2"]
    return main([*argv, *[a for a in TRAIN if distill or a != "--self-distill"], *extra])


def test_chats_are_read_as_conversations_and_rendered_with_the_chat_template(world, tmp_path):
    texts = read_texts([world["chats"]])
    assert len(texts) == 30 and all(isinstance(t, Chat) for t in texts)
    first = texts[0]
    assert [m["role"] for m in first.messages] == ["user", "assistant"] and first == first.messages[0]["content"]
    out = tmp_path / "run"
    plain = [a for a in TRAIN if a != "--self-distill"]
    argv = ["train", "--target", str(world["chat"]), "--data", str(world["chats"]), "--out", str(out)]
    assert main([*argv, *plain, "--steps", "2", "--max-sequences", "1000"]) == 0  # every row, in order
    target = load_target(world["chat"])
    rendered = target.tokenizer.apply_chat_template(list(first.messages), tokenize=False)
    assert rendered.startswith("<bos>user\n") and first.messages[1]["content"] in rendered
    ids = target.tokenizer.encode(rendered, add_special_tokens=False)
    tokens = np.array(mx.load(str(out / ".train" / "train_data.safetensors"))["tokens"]).reshape(-1).tolist()
    at = [i for i in range(len(tokens) - len(ids) + 1) if tokens[i : i + len(ids)] == ids]
    assert at, "the rendered conversation is not among the training tokens"
    # under --self-distill the target answers: each prompt is the chat up to its last user turn
    distilled = tmp_path / "distilled"
    assert train(world, "chat", world["chats"], distilled, "--seq-len", "96", "--prompt-len", "64") == 0
    seqs = np.array(mx.load(str(distilled / ".train" / "train_data.safetensors"))["tokens"])
    prompt = target.tokenizer.encode(
        target.tokenizer.apply_chat_template(first.prompt(), tokenize=False, add_generation_prompt=True),
        add_special_tokens=False,
    )
    assert prompt[-3:] == target.tokenizer.encode("<bos>assistant\n", add_special_tokens=False)[-3:]
    rows = [row for row in seqs if row[: len(prompt)].tolist() == prompt]
    assert len(prompt) < 64 and rows
    whole = target.tokenizer.encode(rendered, add_special_tokens=False)  # the chat's own answer follows the prompt
    assert whole[: len(prompt)] == prompt
    assert all(row[len(prompt) : len(prompt) + 4].tolist() != whole[len(prompt) : len(prompt) + 4] for row in rows)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "name, content, target, says",
    [
        ("empty.txt", b"", "plain", "file is empty"),
        ("blank.jsonl", b"\n\n", "plain", "file is empty"),
        ("binary.txt", b"\x00\x01\x02ELF" * 100, "plain", "looks like a binary file"),
        ("latin1.txt", "caf\xe9 cr\xe8me".encode("latin-1") * 40, "plain", "not UTF-8 text"),
        ("short.txt", b"def f", "plain", "the training data is too short"),
        (
            "thai.txt",
            ("\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 " * 400).encode(),
            "plain",
            "splits into single bytes",
        ),
        ("chats.jsonl", None, "plain", "has no chat template"),
        ("bad.jsonl", b'{"messages": [{"role": "user", "content": ["a", "b"]}]}\n', "chat", "is not a text"),
        ("none.jsonl", b'{"title": "x"}\n', "plain", 'no string "text" or "prompt" field, nor a "messages" list'),
    ],
)
def test_bad_data_is_one_sentence(world, tmp_path, capsys, name, content, target, says):
    data = world["chats"] if content is None else tmp_path / name
    if content is not None:
        data.write_bytes(content)
    out = tmp_path / "run"
    # too short: without --self-distill (with it, the target writes each prompt's continuation)
    assert train(world, target, data, out, distill=name != "short.txt") == 2
    err = _one_line(capsys)
    assert says in err, err
    status = out / ".train" / "status.json"
    if status.exists():  # a refusal after the run began says so in its status
        entry = json.loads(status.read_text())
        assert entry["state"] == "failed" and says in entry["message"]
    if says in ("the training data is too short", "splits into single bytes", "has no chat template"):
        assert status.exists()


def test_a_run_folder_of_another_version_is_refused_naming_both(world, tmp_path, capsys):
    rng = np.random.default_rng(1)
    data = tmp_path / "data.txt"
    data.write_text("\n".join(" ".join(rng.choice(WORDS, size=12)) for _ in range(40)))
    out = tmp_path / "run"
    assert train(world, "plain", data, out) == 0
    state = out / ".train" / "train_state.safetensors"
    arrays, meta = mx.load(str(state), return_metadata=True)
    inner = json.loads(meta["meta"])
    assert inner["version"] == 2 and inner["dspark"]
    mx.save_safetensors(str(state), arrays, metadata={"meta": json.dumps({**inner, "version": 7, "dspark": "9.4.0"})})
    capsys.readouterr()
    assert train(world, "plain", data, out, "--resume", "--steps", "3") == 2
    err = _one_line(capsys)
    assert "written by dspark 9.4.0 (training state version 7)" in err and "reads versions 1 to 2" in err, err
    # a checkpoint from before versions were recorded (0.1.0's) is version 1, and resumes
    legacy = {k: v for k, v in inner.items() if k not in ("version", "dspark")}
    mx.save_safetensors(str(state), arrays, metadata={"meta": json.dumps(legacy)})
    assert train(world, "plain", data, out, "--resume", "--steps", "3") == 0

"""Building the bad inputs of the hostile tables: copies of good model directories with one thing
changed (a config value, a weight, a safetensors header byte for byte, a special file where a
regular one belongs), and crafted JSON."""

from __future__ import annotations

import json
import os
import socket
import tempfile
from pathlib import Path

import mlx.core as mx
from tiny import write_tiny_target_dir

from dspark.cli import main

#: ``dspark train`` options for a run of a few seconds on :func:`good_pair`'s target (a tiny
#: drafter, self-distilled 32-token sequences, no evaluation): what the training tests damage.
TRAIN = [
    "--block-size",
    "3",
    "--layers",
    "1",
    "--taps",
    "1,3",
    "--markov-rank",
    "8",
    "--batch",
    "8",
    "--seq-len",
    "32",
    "--prompt-len",
    "8",
    "--self-distill",
    "--eval-prompts",
    "0",
    "--no-progress",
    "--no-compile",
]

#: TRAIN's options that are not the drafter's shape: what a fine-tune, which takes its shape from
#: the drafter it starts from, runs with.
RUN = TRAIN[TRAIN.index("--batch") :]


def train_world(root: Path) -> dict:
    """A tiny target and a text of 40 lines of Python words in ``root``, for :data:`TRAIN` runs."""
    import numpy as np

    target = write_tiny_target_dir(root / "target", window=16)
    rng = np.random.default_rng(0)
    words = "def class return self if else for in while import from as with print value name".split()
    data = root / "data.txt"
    data.write_text("\n".join(" ".join(rng.choice(words, size=12)) for _ in range(40)))
    return {"target": target, "data": data}


def good_pair(root: Path, *init_options: str) -> dict:
    """The good inputs every hostile table starts from: a tiny target whose window (16) ordinary
    runs wrap, and an untrained 1-layer drafter for it (block 4, taps 1,3, Markov rank 16)."""
    t = write_tiny_target_dir(root / "target", window=16)
    assert (
        main(
            [
                "init",
                "--target",
                str(t),
                "--out",
                str(root / "drafter"),
                "--block-size",
                "4",
                "--layers",
                "1",
                "--taps",
                "1,3",
                "--markov-rank",
                "16",
                *init_options,
            ]
        )
        == 0
    )
    return {"root": root, "target": t, "drafter": root / "drafter"}


def copy(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file():
            (dst / f.name).write_bytes(f.read_bytes())
    return dst


def edit_json(path: Path, change) -> Path:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return path


def drafter_variant(base: Path, root: Path, name: str, change=None, weights=None) -> Path:
    d = copy(base, root / name)
    if change is not None:
        edit_json(d / "config.json", change)
    if weights is not None:
        arrays = mx.load(str(d / "model.safetensors"))
        weights(arrays)
        mx.save_safetensors(str(d / "model.safetensors"), arrays)
    return d


def target_variant(base: Path, root: Path, name: str, change=None, weights=None) -> Path:
    return drafter_variant(base, root, name, change, weights)


def cfg(key, value):
    """A change to a native drafter's ``cfg`` section."""
    return lambda c: c["cfg"].__setitem__(key, value)


def setting(key, value):
    return lambda c: c.__setitem__(key, value)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# --------------------------------------------------------------------------- safetensors byte for byte
def read_st(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def write_st(path: Path, header: dict | str, data: bytes) -> None:
    text = (header if isinstance(header, str) else json.dumps(header)).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


def header_variant(base: Path, root: Path, name: str, change) -> Path:
    """A copy whose model.safetensors has ``change(header, data) -> (header or raw text, data)``
    applied to its header and data as they are on disk."""
    d = copy(base, root / name)
    header, data = read_st(d / "model.safetensors")
    write_st(d / "model.safetensors", *change(header, data))
    return d


def alias(a: str, b: str):
    """Tensor ``b`` points at tensor ``a``'s bytes (both the same shape and dtype)."""

    def change(h, data):
        h[b]["data_offsets"] = list(h[a]["data_offsets"])
        return h, data

    return change


def overlap(a: str, b: str, shift: int = 16):
    """Tensor ``b``'s range starts inside tensor ``a``'s."""

    def change(h, data):
        size = h[b]["data_offsets"][1] - h[b]["data_offsets"][0]
        begin = h[a]["data_offsets"][0] + shift
        h[b]["data_offsets"] = [begin, begin + size]
        return h, data

    return change


def duplicate_key_to_zeros(name: str):
    """The header names ``name`` twice (raw JSON), the later entry pointing at all-zero bytes
    appended to the data: a parser that keeps the last key loads zeros."""

    def change(h, data):
        info = h[name]
        size = info["data_offsets"][1] - info["data_offsets"][0]
        later = {"dtype": info["dtype"], "shape": info["shape"], "data_offsets": [len(data), len(data) + size]}
        text = json.dumps(h)[:-1] + f', "{name}": {json.dumps(later)}}}'
        return text, data + bytes(size)

    return change


def huge_shape(name: str):
    def change(h, data):
        h[name]["shape"] = [1_000_000, 1_000_000]
        return h, data

    return change


# --------------------------------------------------------------------------- special files
def fifo(path: Path) -> Path:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def link_to_dev_zero(path: Path) -> Path:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")
    return path


def unix_socket(path: Path) -> Path:
    """A socket file at ``path``, bound through a short link to its folder: an AF_UNIX address
    holds 104 bytes on macOS (108 on Linux), and pytest's folders under macOS's per-user
    temporary folder (/private/var/folders/xx/<30 characters>/T/pytest-of-…) pass that. The
    link is taken on every platform, so Linux runs what a Mac needs."""
    path.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="s") as short:
        link = Path(short) / "d"
        link.symlink_to(path.parent, target_is_directory=True)
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(link / path.name))
    return path


__all__ = [
    "alias",
    "cfg",
    "copy",
    "drafter_variant",
    "duplicate_key_to_zeros",
    "edit_json",
    "fifo",
    "header_variant",
    "huge_shape",
    "link_to_dev_zero",
    "nested",
    "overlap",
    "read_st",
    "setting",
    "target_variant",
    "unix_socket",
    "write_st",
]

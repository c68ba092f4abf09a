"""The user's own text files for drafter training and calibration (``--data``, ``--prompts``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import DsparkError
from ..reading import parse_json, read_bytes

#: A data file larger than this is read in pieces by no one: split it.
MAX_DATA_BYTES = 2**30


class DataFileError(DsparkError, ValueError):
    """A user data file is missing, empty or unreadable (one clear sentence)."""


#: Extensions read as plain UTF-8 text; ``.jsonl`` is read as JSON lines.
TEXT_SUFFIXES = (".txt", ".py", ".md")


class Chat(str):
    """A conversation from a ``.jsonl`` line's ``"messages"``: ``messages`` is its turns as
    ``{"role": ..., "content": ...}``, rendered with the target's chat template when it is
    tokenized (:func:`dspark.training.data.encode_all`). As a string it is its last user turn's
    text, so whatever reads the data as prompts (``dspark calibrate``, the app) reads a prompt."""

    messages: tuple[dict, ...]

    def __new__(cls, messages: list[dict]) -> Chat:
        users = [m["content"] for m in messages if m["role"] == "user"]
        chat = super().__new__(cls, users[-1] if users else messages[-1]["content"])
        chat.messages = tuple({"role": m["role"], "content": m["content"]} for m in messages)
        return chat

    def prompt(self) -> list[dict]:
        """The turns up to its last user turn: what the target answers (``--self-distill``)."""
        last = max((i for i, m in enumerate(self.messages) if m["role"] == "user"), default=len(self.messages) - 1)
        return list(self.messages[: last + 1])


def _messages(path: Path, lineno: int, value) -> Chat:
    """A line's ``"messages"``, checked: a list of turns, each a role and a text."""
    where = f'{path}: line {lineno}\'s "messages"'
    if not isinstance(value, list) or not value:
        raise DataFileError(f'{where} is not a list of {{"role": ..., "content": ...}} turns.')
    for i, m in enumerate(value, start=1):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not m["role"].strip():
            raise DataFileError(f'{where}: turn {i} has no string "role".')
        if not isinstance(m.get("content"), str):
            raise DataFileError(f'{where}: turn {i}\'s "content" is not a text.')
    return Chat(value)


def _read_jsonl(path: Path, raw: str) -> list[str]:
    texts = []
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = parse_json(line, f"{path}: line {lineno}")
        except DsparkError as e:
            raise DataFileError(str(e)) from None
        value = None
        if isinstance(record, dict) and "messages" in record:
            chat = _messages(path, lineno, record["messages"])
            if any(m["content"].strip() for m in chat.messages):
                texts.append(chat)
            continue
        if isinstance(record, dict):
            value = record.get("text", record.get("prompt"))
        if not isinstance(value, str):
            raise DataFileError(f'{path}: line {lineno} has no string "text" or "prompt" field, nor a "messages" list.')
        if value.strip():
            texts.append(value)
    return texts


def read_texts(paths: Iterable[str | Path]) -> list[str]:
    """Read user data files into a list of texts (one per text file, one per JSONL record).

    Accepted: ``.txt``/``.py``/``.md`` files (UTF-8, whole file is one text) and ``.jsonl``
    files (one JSON object per line with a ``"text"`` or ``"prompt"`` string, or a chat's
    ``"messages"`` list, read as a :class:`Chat`). A directory
    stands for the accepted files inside it, recursively, in sorted order. Anything missing,
    empty, not UTF-8 or malformed raises :class:`DataFileError` (a ``ValueError``) naming the
    file, because drafter training should stop before it starts on bad data.
    """
    files: list[Path] = []
    for p in paths:
        path = Path(p).expanduser()
        if path.is_dir():
            inside = sorted(
                f for f in path.rglob("*") if f.is_file() and f.suffix.lower() in TEXT_SUFFIXES + (".jsonl",)
            )
            if not inside:
                raise DataFileError(f"{path}: folder holds no .txt, .py, .md or .jsonl files.")
            files.extend(inside)
        elif not path.exists():
            raise DataFileError(f"{path}: file not found.")
        elif path.suffix.lower() not in TEXT_SUFFIXES + (".jsonl",):
            raise DataFileError(f"{path}: unsupported file type; use .txt, .py, .md or .jsonl.")
        else:
            files.append(path)
    if not files:
        raise DataFileError("No data files given.")

    texts: list[str] = []
    for path in files:
        try:  # only a regular file, bounded (a FIFO or a link to /dev/zero would never end)
            raw = read_bytes(path, MAX_DATA_BYTES, "data file").decode("utf-8")
        except UnicodeDecodeError:
            raise DataFileError(f"{path}: not UTF-8 text.") from None
        except DsparkError as e:
            raise DataFileError(str(e)) from None
        if "\x00" in raw:
            raise DataFileError(f"{path}: looks like a binary file, not text.")
        if path.suffix.lower() == ".jsonl":
            found = _read_jsonl(path, raw)
        else:
            found = [raw] if raw.strip() else []
        if not found:
            raise DataFileError(f"{path}: file is empty.")
        texts.extend(found)
    return texts


def texts_digest(texts: Sequence[str | Sequence[int]]) -> str:
    """A fingerprint of the training texts (strings, or token-id lists) in their order: what a
    run's saved data records, so ``--resume`` can tell when ``--data`` now names other texts."""
    h = hashlib.sha256()
    for t in texts:
        if isinstance(t, Chat):
            data = b"chat|" + json.dumps(t.messages, ensure_ascii=False).encode("utf-8", "surrogatepass")
        elif isinstance(t, str):
            data = t.encode("utf-8", "surrogatepass")
        else:
            data = json.dumps([int(x) for x in t]).encode()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()[:32]

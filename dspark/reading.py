"""Reading anything from disk, bounded: the one way this project opens a file it did not just
write. Wherever a path comes from (the user, a model directory, a saved file, a setting), only a
regular file is opened, after following links: a FIFO would block forever, ``/dev/zero`` never
ends. Every read has a size limit, and every JSON document a depth and a number-length limit, so
a crafted file is one sentence (``DsparkError``) naming it, never a hang, a RecursionError or a
gigabyte of memory.

The bottom of the library with ``errors``: it imports nothing else of dspark.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from .errors import DsparkError

#: Nesting deeper than this is no file of ours or of a checkpoint (a Gemma-4 config nests 3 deep).
MAX_JSON_DEPTH = 64
#: A JSON number longer than this is crafted (a float64 needs 24 characters, a 128-bit random state 39).
MAX_NUMBER_CHARS = 100
_LONG_NUMBER = re.compile(rb"[-+0-9.eE]{%d,}" % (MAX_NUMBER_CHARS + 1))
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS_ONLY = bytes(range(256)).translate(None, b"[]{}")


def kind_of_file(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "a special file"


def regular_file(path: str | Path, what: str = "file") -> Path:
    """``path`` when it is, after following links, a regular file; else one sentence. For paths
    handed to code that opens them itself (MLX, mlx-lm, tokenizers, Qt)."""
    p = Path(path).expanduser()
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise DsparkError(f"{what} not found: {p}") from None
    except OSError as e:
        raise DsparkError(f"cannot read {p} ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        raise DsparkError(f"{p} is not a regular file but {kind_of_file(mode)}: dspark reads only regular files")
    return p


def read_bytes(path: str | Path, limit: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes. The file is opened without
    blocking and checked on the open descriptor, so a FIFO swapped in after a check cannot
    block the read either."""
    p = Path(path).expanduser()
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise DsparkError(f"{what} not found: {p}") from None
    except OSError as e:  # a socket (ENXIO), a folder on some systems, no permission
        raise DsparkError(f"cannot read {p} ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DsparkError(
                f"{p} is not a regular file but {kind_of_file(st.st_mode)}: dspark reads only regular files"
            )
        if st.st_size > limit:
            raise DsparkError(f"{p} is {_size(st.st_size)}, larger than a {what} can be ({_size(limit)})")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 24, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew while being read
                raise DsparkError(f"{p} is larger than a {what} can be ({_size(limit)})")
        return b"".join(chunks)
    except OSError as e:
        raise DsparkError(f"cannot read {p} ({e.strerror or e})") from None
    finally:
        os.close(fd)


def read_text(path: str | Path, limit: int, what: str = "file") -> str:
    """A regular file of at most ``limit`` bytes as UTF-8 text."""
    data = read_bytes(path, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DsparkError(
            f"{Path(path).expanduser()} is not UTF-8 text (byte {e.start}): convert it to UTF-8"
        ) from None


def parse_json(data: bytes | str, where: str | Path, allow_nan: bool = True):
    """A JSON document, or one sentence naming ``where``: not JSON, a key given twice in an
    object (a reader would silently keep one of them), nested deeper than ``MAX_JSON_DEPTH``, a
    number longer than ``MAX_NUMBER_CHARS``. ``allow_nan``: whether NaN and Infinity are read
    (Python writes them; each field's validator decides whether it may hold one)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)

    def no_duplicates(pairs):
        out = dict(pairs)
        if len(out) != len(pairs):
            seen: set = set()
            twice = next(k for k, _ in pairs if k in seen or seen.add(k))
            raise DsparkError(f"{where} gives the key {twice!r} twice in one object")
        return out

    def no_constant(name):
        raise DsparkError(f"{where} holds {name}, which is not a number")

    def finite(text):
        value = float(text)
        if value in (float("inf"), float("-inf")):
            no_constant(text)
        return value

    strict = {} if allow_nan else {"parse_constant": no_constant, "parse_float": finite}
    try:
        # The C parser gives up by itself past a few thousand levels (RecursionError), so a deep
        # document fails fast here and the precise limits below see only valid JSON.
        doc = json.loads(raw, object_pairs_hook=no_duplicates, **strict)
    except RecursionError:
        raise DsparkError(f"{where} is nested deeper than {MAX_JSON_DEPTH} levels: not a file dspark reads") from None
    except UnicodeDecodeError as e:
        raise DsparkError(f"{where} is not valid JSON (not UTF-8 at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise DsparkError(f"{where} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except ValueError:  # Python's limit on integer digits
        raise DsparkError(f"{where} holds a number longer than {MAX_NUMBER_CHARS} characters") from None
    _check_shape(raw, where)
    return doc


def _check_shape(raw: bytes, where) -> None:
    """Depth and number length of a valid JSON text, at C speed: strings are cut out (in valid
    JSON every quote pairs, so the pattern is linear), then brackets are counted."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH and not _LONG_NUMBER.search(raw):
        return
    bare = _STRING.sub(b'""', raw)
    if _LONG_NUMBER.search(bare):
        raise DsparkError(f"{where} holds a number longer than {MAX_NUMBER_CHARS} characters")
    brackets = bare.translate(None, _BRACKETS_ONLY)
    if len(brackets) <= MAX_JSON_DEPTH:
        return
    import numpy as np  # noqa: PLC0415 (slow: numpy, only for deeply nested JSON)

    codes = np.frombuffer(brackets, np.uint8)
    depth = np.cumsum(np.where((codes == ord("[")) | (codes == ord("{")), 1, -1), dtype=np.int64)
    if int(depth.max()) > MAX_JSON_DEPTH:
        raise DsparkError(f"{where} is nested deeper than {MAX_JSON_DEPTH} levels: not a file dspark reads")


def read_json(path: str | Path, limit: int, what: str = "JSON file", allow_nan: bool = True):
    """A regular file of at most ``limit`` bytes, parsed by :func:`parse_json`."""
    p = Path(path).expanduser()
    return parse_json(read_bytes(p, limit, what), p, allow_nan=allow_nan)


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n:,} bytes"


__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_NUMBER_CHARS",
    "kind_of_file",
    "parse_json",
    "read_bytes",
    "read_json",
    "read_text",
    "regular_file",
]

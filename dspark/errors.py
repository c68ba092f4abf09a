"""User-facing errors: one clear sentence, no traceback (the CLI and the app print ``str(e)``).

Anything else that escapes is a bug: ``report_bug`` keeps its traceback in a log file and gives
the one line to show instead (the CLI prints it, the app puts it in its message bar).
"""

import os
import sys
import time
import traceback
import unicodedata
from pathlib import Path


def printable(text: str) -> str:
    """``text`` safe to show on a terminal or in a window: line breaks and tabs become spaces and
    every other control or format character (ESC, which can retitle a terminal, clear it or fake
    a line; bidirectional overrides, which reorder what is read) is written as an escape such as
    ``\\x1b``, so a value quoted from a crafted file is seen, never obeyed."""
    out = []
    for ch in str(text):
        if ch in "\n\r\t\v\f":
            out.append(" ")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") and ch != "\u200d":
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


class DsparkError(Exception):
    """Something the user can fix: a path, a file, an argument. The message is made printable
    (:func:`printable`) when the error is made, so whoever shows it (the CLI, the app) shows what
    a crafted value says, never what it would make a terminal do."""

    #: A sentence is cut here: a crafted value quoted whole could be megabytes.
    MAX_CHARS = 2000

    def __init__(self, message: object = "", *args):
        text = str(message)
        if len(text) > self.MAX_CHARS:
            text = text[: self.MAX_CHARS] + "…"
        super().__init__(printable(text), *args)


class NotGemma4Error(DsparkError):
    pass


class DrafterMismatchError(DsparkError):
    pass


def log_dir() -> Path:
    """Where bug reports are kept (``DSPARK_STUDIO_HOME/logs`` when set, else the user log folder)."""
    home = os.environ.get("DSPARK_STUDIO_HOME")
    if home:
        return Path(home) / "logs"
    from platformdirs import user_log_dir  # noqa: PLC0415 (slow: platformdirs, not needed for --help)

    return Path(user_log_dir("dspark-studio", "DSpark"))


def report_bug(exc: BaseException, program: str = "dspark") -> str:
    """Save ``exc``'s traceback to a log file; the one line to show (with the file's path).
    It cannot fail itself: text that cannot be encoded (a command line with undecodable bytes)
    is written escaped, and whatever goes wrong while saving leaves the line without a path."""
    try:
        what = printable(f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
    except BaseException:  # an exception whose str() itself raises
        what = type(exc).__name__
    folder = None
    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        folder = log_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{program}-error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
        path.write_text(f"{program} {' '.join(sys.argv[1:])}\n\n{text}", encoding="utf-8", errors="backslashreplace")
        where = f"details in {printable(str(path))}"
    except Exception as e:  # a report that cannot be saved still gets its one line, and why
        why = printable(getattr(e, "strerror", None) or type(e).__name__)
        where = "the details could not be saved" + (f" in {printable(str(folder))} ({why})" if folder else f" ({why})")
    return f"internal error (a bug, please report it): {what}; {where}"

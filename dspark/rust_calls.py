"""Calls into Rust code a model directory configures (the tokenizers library): a Rust panic
there reaches Python as ``PanicException``, which is no ``Exception`` (a catch-all misses it),
and Rust's panic hook first prints its own report straight to the process's stderr, several
lines with a backtrace. :func:`rust_call` turns the exception into one sentence and keeps that
report off the terminal, so a crafted tokenizer is one line, like every other bad input.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .errors import DsparkError


def is_panic(e: BaseException) -> bool:
    return type(e).__name__ == "PanicException"


@contextmanager
def panic_report_held() -> Iterator[None]:
    """File descriptor 2 goes to a temporary file for the duration; what was written there is
    passed on to stderr afterwards, unless the block ended in a Rust panic (its report is what
    the caller's sentence replaces)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no stderr to hold
        yield
        return
    held = tempfile.TemporaryFile()
    panicked = False
    os.dup2(held.fileno(), 2)
    try:
        yield
    except BaseException as e:
        panicked = is_panic(e)
        raise
    finally:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, 2)
        os.close(saved)
        if not panicked:
            held.seek(0)
            data = held.read()
            if data:
                os.write(2, data)
        held.close()


def rust_call(what: str, fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)``; whatever it raises, a Rust panic included, is a DsparkError
    saying it could not ``what``."""
    try:
        with panic_report_held():
            return fn(*args, **kwargs)
    except (KeyboardInterrupt, SystemExit, DsparkError):
        raise
    except BaseException as e:
        detail = " ".join(str(e).split())[:300]
        raise DsparkError(f"{what} ({type(e).__name__}: {detail})") from None


__all__ = ["is_panic", "panic_report_held", "rust_call"]

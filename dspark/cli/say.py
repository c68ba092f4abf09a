"""How a command speaks besides its output: one line on stderr, after ``dspark:``."""

from __future__ import annotations

import sys

from ..errors import printable


def say(text: str) -> None:
    """A line the library says while it works (the ``say=`` of its calls)."""
    print(f"dspark: {text}", file=sys.stderr)


def say_printable(text: str) -> None:
    """:func:`say` for a text that may quote a file (a model's config, a path): its control
    characters escaped (:func:`dspark.errors.printable`)."""
    print(f"dspark: {printable(text)}", file=sys.stderr)

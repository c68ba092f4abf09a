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


def show(text: str) -> None:
    """Print ``text`` (a command's output) on stdout, each line with its control characters
    escaped: the names it quotes (a path, a verifier, a profile's source) come from the user or
    from files, and a terminal must show them, never obey them."""
    print("\n".join(printable(line) for line in str(text).split("\n")))

"""Prompt sets: a built-in one for the demo target (trained on Python source), plus any
``resources/prompts/*.json`` (a list of strings, or {"name": .., "prompts": [..]}) and
``resources/prompts/*.txt`` (prompts separated by lines holding only ``---``)."""

from __future__ import annotations

import json
from pathlib import Path

from dspark import resources

BUILTIN = {
    "Python snippets": [
        'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
        "class Stack:\n    \"\"\"A last-in, first-out stack.\"\"\"\n\n    def __init__(self):\n",
        "import os\nimport sys\n\n\ndef main(argv=None):\n    if argv is None:\n",
        'def read_lines(path):\n    """Return the lines of the file at *path*."""\n    with open(path) as f:\n',
        "    def __repr__(self):\n        return",
        'def is_prime(n):\n    """Return True if n is a prime number."""\n    if n < 2:\n',
    ],
}


def _read_txt(path: Path) -> list[str]:
    parts = path.read_text(encoding="utf-8", errors="replace").split("\n---\n")
    return [p.strip("\n") + "\n" for p in parts if p.strip()]


def _read_json(path: Path) -> tuple[str, list[str]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, dict):
        return str(data.get("name") or path.stem), [str(p) for p in data.get("prompts", [])]
    return path.stem, [str(p) for p in data]


def prompt_sets(folder: Path | None = None) -> dict[str, list[str]]:
    """Name -> prompts. Unreadable files are skipped (the built-in set is always there)."""
    sets = dict(BUILTIN)
    folder = resources.prompts_dir() if folder is None else folder
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            try:
                if path.suffix == ".json":
                    name, prompts = _read_json(path)
                elif path.suffix == ".txt":
                    name, prompts = path.stem, _read_txt(path)
                else:
                    continue
            except (OSError, ValueError, AttributeError):
                continue
            if prompts:
                sets[name] = prompts
    return sets

"""Prompt sets: named lists of prompts that the app and ``dspark bench --prompt-set`` share.

A set is a file in ``resources/prompts/``: ``<key>.json`` holding a list of strings or
``{"name": .., "description": .., "prompts": [..]}``, or ``<key>.txt`` with prompts separated by
lines holding only ``---``. The key (the file's stem) is what the command line takes; the name
is what the app shows. A user's own folder of such files can be given instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import resources
from .errors import DsparkError
from .reading import read_json, read_text

#: The set the app and ``dspark bench`` start with.
DEFAULT = "demo"


@dataclass(frozen=True)
class PromptSet:
    key: str
    name: str
    prompts: tuple[str, ...]
    description: str = ""


#: A prompt set file larger than this is not one.
MAX_SET_BYTES = 64 * 2**20


def _read_txt(path: Path) -> PromptSet:
    # line by line: splitting the text at "\n---\n" left a run of separator lines (or one on the
    # first line) inside a part, and ran the dashes as a prompt
    parts: list[list[str]] = [[]]
    for line in read_text(path, MAX_SET_BYTES, "prompt set file").split("\n"):
        if line.rstrip("\r") == "---":
            parts.append([])
        else:
            parts[-1].append(line)
    texts = ("\n".join(p) for p in parts)
    return PromptSet(path.stem, path.stem, tuple(t.strip("\n") + "\n" for t in texts if t.strip()))


def _texts(entries: list) -> tuple[str, ...]:
    """The prompts of a JSON set: each must be a string (``str()`` of anything else ran
    ``'None'`` or ``"{'a': 2}"`` as a prompt)."""
    for i, p in enumerate(entries):
        if not isinstance(p, str):
            shown = json.dumps(p)
            shown = shown if len(shown) <= 40 else shown[:40] + "…"
            raise ValueError(f"prompt {i} is {shown}, not a text")
    return tuple(entries)


def _read_json(path: Path) -> PromptSet:
    data = read_json(path, MAX_SET_BYTES, "prompt set file")
    if isinstance(data, dict):
        prompts = data.get("prompts", [])
        if not isinstance(prompts, list):
            raise ValueError("prompts is not a list")
        return PromptSet(
            path.stem,
            str(data.get("name") or path.stem),
            _texts(prompts),
            str(data.get("description") or ""),
        )
    if not isinstance(data, list):
        raise ValueError("neither a list nor an object")
    return PromptSet(path.stem, path.stem, _texts(data))


def read_set(path: Path) -> PromptSet:
    """One set file; DsparkError when it cannot be read as one."""
    try:
        s = _read_json(path) if path.suffix == ".json" else _read_txt(path)
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise DsparkError(f"{path} is not a prompt set ({e})") from None
    if len(s.prompts) > 100_000:
        raise DsparkError(f"{path} holds {len(s.prompts):,} prompts: more than a prompt set can")
    if not s.prompts:
        raise DsparkError(f"{path} holds no prompts")
    return s


def prompt_sets(folder: Path | None = None) -> dict[str, PromptSet]:
    """Key -> set for every readable set file in ``folder`` (default: the bundled ones), the
    default set first. Unreadable files are skipped: a browser of sets must not fail on one."""
    folder = resources.prompts_dir() if folder is None else folder
    found = {}
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if path.suffix in (".json", ".txt") and path.is_file():
                try:
                    found[path.stem] = read_set(path)
                except DsparkError:
                    continue
    first = {k: found.pop(k) for k in (DEFAULT,) if k in found}
    return {**first, **found}


#: resources/prompts/demo.json: held-out openings on which the demo target writes plausible code
#: (tests/test_demo.py checks it), not a repeated line that any drafter, even a broken one,
#: predicts. The self-test and the first-launch GPU check run on its first prompt.
HELD_OUT_SET = "demo"


def held_out_prompt() -> str | None:
    """The first prompt of :data:`HELD_OUT_SET` (None when the set is missing)."""
    found = prompt_sets().get(HELD_OUT_SET)
    return found.prompts[0] if found and found.prompts else None


def get(key_or_file: str) -> PromptSet:
    """A bundled set by key or name, or a set file by path; DsparkError naming the choices."""
    p = Path(key_or_file).expanduser()
    if p.suffix in (".json", ".txt") and p.exists():
        return read_set(p)
    sets = prompt_sets()
    for s in sets.values():
        if key_or_file in (s.key, s.name):
            return s
    raise DsparkError(
        f"no prompt set {key_or_file!r}: choose one of {', '.join(sets) or '(none bundled)'}, "
        f"or give a .json / .txt file"
    )

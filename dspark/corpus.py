"""The demo corpus: the Python standard library's source (the demo build's text, ``dspark train``'s
and ``dspark calibrate``'s default data, and ``dspark bench --context``'s padding).

The demo target model is trained from scratch here because no model hub is reachable. Its
corpus must exist offline on every machine and be redistributable, so it is the standard
library source (``.py`` files) of the running Python interpreter (PSF licence). The corpus
therefore depends on the interpreter version; ``corpus_info()`` records which one was used.

Everything here is deterministic: files are listed in sorted order of their path relative to
the stdlib root, and each file's split (train / held-out) comes from a stable hash of that
relative path, so the same interpreter always gives the same corpus and the same prompts.
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

#: Directories skipped anywhere in the stdlib tree: installed third-party code, the test
#: suite (huge, full of deliberately odd code), and a few rarely representative packages.
SKIP_DIRS = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3", "turtledemo", "__pycache__"}
)
#: Files larger than this are mostly generated tables (e.g. unicode data); skip them.
MAX_FILE_BYTES = 200_000
#: Percentage of files held out for evaluation and prompts.
HELDOUT_PERCENT = 5

SPLITS = ("train", "heldout")


def stdlib_root() -> Path:
    """The running interpreter's standard-library directory."""
    return Path(sysconfig.get_paths()["stdlib"])


def split_of(rel_path: str) -> str:
    """'train' or 'heldout' for a path relative to the stdlib root (stable across runs and
    machines: sha256 of the POSIX path, unlike Python's salted ``hash``)."""
    digest = hashlib.sha256(rel_path.encode("utf-8")).digest()
    return "heldout" if int.from_bytes(digest[:4], "big") % 100 < HELDOUT_PERCENT else "train"


def _all_files(root: Path | None = None) -> tuple[tuple[str, Path], ...]:
    return _scan(root or stdlib_root())


@functools.lru_cache(maxsize=4)
def _scan(root: Path) -> tuple[tuple[str, Path], ...]:
    """Walk the tree once per process (the stdlib does not change while we run)."""
    found = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if any(part in SKIP_DIRS for part in rel.parts[:-1]):
            continue
        try:
            if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
                continue
        except OSError:
            continue
        found.append((rel.as_posix(), path))
    found.sort(key=lambda item: item[0])
    return tuple(found)


def corpus_files(split: str, root: Path | None = None) -> list[Path]:
    """The corpus files of one split ('train' or 'heldout'), sorted by relative path."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    return [path for rel, path in _all_files(root) if split_of(rel) == split]


def _read_source(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):  # a few stdlib files use other encodings
        return None


def iter_texts(split: str, root: Path | None = None) -> Iterator[str]:
    """The text of each non-empty file of a split, in corpus order."""
    for path in corpus_files(split, root):
        text = _read_source(path)
        if text and text.strip():
            yield text


def corpus_info() -> dict:
    """What the corpus was built from (recorded next to the trained model)."""
    files = _all_files()
    n_held = sum(split_of(rel) == "heldout" for rel, _ in files)
    return {
        "source": "Python standard library .py files (PSF License)",
        "python_version": sys.version.split()[0],
        "files_train": len(files) - n_held,
        "files_heldout": n_held,
        "skip_dirs": sorted(SKIP_DIRS),
        "max_file_bytes": MAX_FILE_BYTES,
        "heldout_percent": HELDOUT_PERCENT,
    }


_HEADER = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+\w")


def _prompt_sites(text: str, max_lines: int, max_chars: int) -> list[str]:
    """Prompts cut from one file: each ``def``/``class`` header with the lines that follow
    it (its docstring start), at most ``max_lines`` lines and ``max_chars`` characters."""
    lines = text.splitlines(keepends=True)
    prompts = []
    for i, line in enumerate(lines):
        if _HEADER.match(line):
            prompt = "".join(lines[i : i + max_lines])[:max_chars]
            if prompt.strip():
                prompts.append(prompt)
    return prompts


def prompt_sites(split: str, max_lines: int = 6, max_chars: int = 400) -> list[str]:
    """Every distinct ``def``/``class`` prompt of a split, in file order: prompts of the kind
    :func:`heldout_prompts` evaluates on, for drafter training data from the train split.

    Boilerplate repeats across files (every ``encodings`` module has the same ``Codec``
    class), so a site of the train split that also occurs verbatim in another split is left
    out: an evaluation prompt is never a training prompt."""
    others = {
        site
        for s in SPLITS
        if s != split
        for text in iter_texts(s)
        for site in _prompt_sites(text, max_lines, max_chars)
    }
    seen: dict[str, None] = {}
    for text in iter_texts(split):
        for site in _prompt_sites(text, max_lines, max_chars):
            if site not in others:
                seen.setdefault(site)
    return list(seen)


def heldout_prompts(n: int, max_lines: int = 6, max_chars: int = 400) -> list[str]:
    """``n`` short prompts from held-out files, deterministic.

    A prompt is a function or class header plus the next few lines (typically the start of
    its docstring), so a model has something to continue. Prompts are taken round-robin over
    the held-out files (first header of every file, then the second, ...) so they are
    varied, and a prompt identical to an earlier one is skipped. A file without any header
    contributes its first ``max_lines`` lines instead.
    """
    if n <= 0:
        return []
    per_file = []
    for text in iter_texts("heldout"):
        sites = _prompt_sites(text, max_lines, max_chars)
        if not sites:
            sites = ["".join(text.splitlines(keepends=True)[:max_lines])[:max_chars]]
        per_file.append(sites)
    prompts: list[str] = []
    depth = 0
    while len(prompts) < n and any(depth < len(s) for s in per_file):
        for sites in per_file:
            # Identical boilerplate (the codec modules share their class headers) would make an
            # evaluation set look larger and easier than it is: keep one copy.
            if depth < len(sites) and sites[depth] not in prompts:
                prompts.append(sites[depth])
                if len(prompts) == n:
                    break
        depth += 1
    return prompts

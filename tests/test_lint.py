"""The linter's exceptions say why (#39): ruff (``make lint``, run by ``make test``) reads every
``# noqa`` of the library, the app, the tests, the measurement scripts and the packaging, and each
must give its reason after the codes, e.g. ``import mlx.core as mx  # noqa: PLC0415 (slow: mlx)``. A bare
``# noqa: X`` is a silenced rule nobody can judge."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("dspark", "app", "tests", "measure", "packaging")
NOQA = re.compile(r"#\s*noqa\b(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*))?(?P<rest>.*)", re.I)


def bare_noqas(source: str) -> list[int]:
    """Lines of ``source`` whose ``# noqa`` comment names no code, or gives no reason after them."""
    bad = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        m = NOQA.search(tok.string)
        if m and (not m["codes"] or len(m["rest"].strip(" -:()—")) < 4):
            bad.append(tok.start[0])
    return bad


def test_every_noqa_names_its_rule_and_says_why():
    bad = [
        f"{p.relative_to(ROOT)}:{n}"
        for folder in FOLDERS
        for p in sorted((ROOT / folder).rglob("*.py"))
        for n in bare_noqas(p.read_text())
    ]
    assert not bad, "a # noqa without its code and reason"


def test_the_check_finds_a_bare_noqa():
    assert bare_noqas("import x  # noqa\n") == [1]
    assert bare_noqas("import x  # noqa: PLC0415\n") == [1]
    assert bare_noqas("f = lambda: 0  # noqa: E731, F401\n") == [1]
    assert bare_noqas("import x  # noqa: PLC0415 (slow: mlx, not needed for --help)\n") == []
    assert bare_noqas("s = '# noqa'  # a string is no comment\n") == []

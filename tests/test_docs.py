"""The manual against the command line: README.md and the pages of docs/ say only what runs.

Every `dspark` or `dspark-studio` command in a fenced sh or console block names a subcommand that
exists and only options its `--help` lists; every relative link in the manual leads to a file, and
to a heading that exists in it; the README's first examples run for real on the bundled demo
models. Everything goes through the command line as a reader types it (the entry points
pyproject.toml names, in a child process), never through the CLI's internals.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MANUAL = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# the pages that link into the manual, checked for links too
LINKING = [*MANUAL, *(ROOT / d / "README.md" for d in ("tests", "packaging", "resources/demo"))]
# a link that leaves the repository on purpose: GitHub's Releases page, relative to the README's page on github.com
OUTSIDE = {(ROOT / "README.md", "../../releases")}
SHELL_BLOCKS = {"sh", "shell", "bash", "console"}
PROGRAMS = {
    "dspark": "dspark",
    ".venv/bin/dspark": "dspark",
    "dspark-studio": "dspark-studio",
    ".venv/bin/dspark-studio": "dspark-studio",
}
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
FENCE = re.compile(r"^```(\S*)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# the examples run for real, each where the manual shows it (cheap: the demo models, a few tokens)
RUNS = [
    (ROOT / "README.md", 'dspark generate --prompt "def fib(n):" --max-tokens 8 --json'),
    (ROOT / "README.md", "dspark inspect resources/demo/dspark"),
    (ROOT / "docs" / "formats.md", "dspark inspect resources/demo/dflash --json"),
]


def blocks(text: str):
    """(language, lines) of every fenced block, and the text outside them with inline code blanked."""
    found, outside, lang, lines = [], [], None, []
    for line in text.splitlines():
        fence = FENCE.match(line.strip())
        if fence and lang is None:
            lang, lines = fence.group(1) or "text", []
        elif line.strip() == "```" and lang is not None:
            found.append((lang, lines))
            lang = None
        elif lang is not None:
            lines.append(line)
        else:
            outside.append(re.sub(r"`[^`]*`", "``", line))
    return found, "\n".join(outside)


def commands(text: str) -> list[str]:
    """Every command line of the sh and console blocks, continuation lines joined, prompts dropped."""
    out = []
    for lang, lines in blocks(text)[0]:
        if lang not in SHELL_BLOCKS:
            continue
        joined, pending = [], ""
        for line in lines:
            if lang == "console":
                if not (line.startswith("$ ") or pending):
                    continue  # the output the command printed
                line = line.removeprefix("$ ")
            pending += line.strip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
            else:
                joined.append(pending)
                pending = ""
        out += [c for c in joined if c.split(" ", 1)[0] in PROGRAMS]
    return out


def parsed(command: str) -> tuple[str, str | None, set[str]]:
    """(program, subcommand or None, the options used), comments left out."""
    words = shlex.split(command, comments=True)
    program = PROGRAMS[words[0]]
    sub = words[1] if program == "dspark" else None
    return program, sub, {o for w in words[1:] for o in OPTION.findall(w)}


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown page (headings inside fenced blocks are not headings)."""
    seen: dict[str, int] = {}
    for line in blocks(path.read_text())[1].splitlines():
        heading = re.match(r"^#{1,6}\s+(.*)", line)
        if heading:
            base = slug(heading.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
    return {f"{b}-{i}" if i else b for b, n in seen.items() for i in range(n)}


def broken_links(text: str, page: Path) -> list[str]:
    """The relative links of a page (code left out) whose file or heading does not exist."""
    broken = []
    for target in LINK.findall(blocks(text)[1]):
        if re.match(r"^[a-z]+:", target) or (page, target) in OUTSIDE:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists() or ROOT not in dest.parents:
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor}")
    return broken


def script(program: str) -> tuple[str, str]:
    """(module, function) of an entry point as installed: pyproject.toml's [project.scripts]."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, fn = scripts[program].split(":")
    return module, fn


def entry(program: str) -> list[str]:
    """The command line of an entry point, as its console script runs it."""
    module, fn = script(program)
    return [sys.executable, "-c", f"import sys; from {module} import {fn}; sys.exit({fn}())"]


ENV = {**os.environ, "COLUMNS": "200", "QT_QPA_PLATFORM": "offscreen"}


def run(program: str, *args: str) -> subprocess.CompletedProcess:
    """A documented command, run from the checkout's root as a reader runs it."""
    return subprocess.run([*entry(program), *args], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)


def missing(command: str, helps: dict) -> list[str]:
    """What a documented command uses that the command line does not offer."""
    program, sub, options = parsed(command)
    if program == "dspark" and sub not in helps["dspark", None][1]:
        return [f"no subcommand {sub!r}"]
    offered = helps[program, sub][0]
    return sorted(options - offered)


@pytest.fixture(scope="module")
def documented() -> dict[Path, list[str]]:
    return {page: commands(page.read_text()) for page in MANUAL}


# one child per program asks the entry point for every --help in turn (an import of MLX each time would
# cost seconds): sys.argv set as the console script sets it, the text it prints kept, its exit code checked
HELP_DRIVER = """
import contextlib, io, json, sys
from {module} import {fn}
texts = []
for args in json.loads(sys.argv[1]):
    sys.argv, out = ["{program}", *args], io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = {fn}()
        except SystemExit as stop:
            code = stop.code
    texts.append([code or 0, out.getvalue()])
print(json.dumps(texts))
"""


def help_texts(program: str, subs: list[str | None]) -> dict[str | None, tuple[int, str]]:
    """(exit code, what it prints) of `PROGRAM [SUB] --help` for each SUB, from one child process."""
    module, fn = script(program)
    args = [[*([s] if s else []), "--help"] for s in subs]
    code = HELP_DRIVER.format(module=module, fn=fn, program=program)
    r = subprocess.run(
        [sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return dict(zip(subs, map(tuple, json.loads(r.stdout.splitlines()[-1]))))


def offered(text: str) -> tuple[set[str], set[str]]:
    """The options a --help lists, and the subcommands it lists."""
    subs = re.search(r"\{([a-z,-]+)\}", text)
    return set(OPTION.findall(text)), set(subs.group(1).split(",")) if subs else set()


@pytest.fixture(scope="module")
def helps(documented) -> dict:
    """(program, subcommand) -> offered(its --help), for every command the manual shows."""
    subs = {parsed(c)[1] for cs in documented.values() for c in cs if parsed(c)[0] == "dspark"}
    texts = help_texts("dspark", [None, *sorted(subs)])  # a subcommand that does not exist exits 2: missing() says so
    every = offered(texts[None][1])[1]
    assert every and all(texts[s][0] == 0 for s in [None, *subs & every]), {s: c for s, (c, _) in texts.items()}
    studio = help_texts("dspark-studio", [None])[None]
    assert studio[0] == 0
    found = {("dspark", s): offered(texts[s][1]) for s in [None, *subs & every]}
    return {**found, ("dspark-studio", None): offered(studio[1])}


def test_the_pages_that_teach_commands_show_them(documented):
    assert documented[ROOT / "README.md"], "the README shows no command"
    for page in ("command-line", "speed", "formats", "export", "training", "diagnosis"):
        assert documented[ROOT / "docs" / f"{page}.md"], page


def test_every_documented_command_uses_options_its_help_lists(documented, helps):
    wrong = [
        f"{page.relative_to(ROOT)}: {c}: {m}" for page, cs in documented.items() for c in cs for m in missing(c, helps)
    ]
    assert not wrong, "\n".join(wrong)


def test_a_wrong_option_or_subcommand_is_caught(helps):
    assert missing("dspark generate --max-tokens 8 --no-such-option", helps) == ["--no-such-option"]
    assert missing("dspark no-such-command --json", helps) == ["no subcommand 'no-such-command'"]
    assert missing("dspark-studio --screenshot out.png --no-such-flag", helps) == ["--no-such-flag"]
    # a comment is not part of the command
    assert missing("dspark inspect DIR   # --no-such-option in a comment", helps) == []


def test_every_link_leads_to_a_file_and_heading_that_exist():
    wrong = [f"{page.relative_to(ROOT)}: {b}" for page in LINKING for b in broken_links(page.read_text(), page)]
    assert not wrong, "\n".join(wrong)


def test_a_planted_broken_link_is_caught():
    page = ROOT / "README.md"
    text = (
        "[ok](docs/speed.md#verify-policies), [file](docs/no-such-page.md), "
        "[heading](docs/speed.md#no-such-heading), [outside](../elsewhere.md), [web](https://example.org)\n"
        "```sh\n# [in a block](docs/not-checked.md)\n```\n`[in code](docs/not-checked-either.md)`\n"
    )
    assert broken_links(text, page) == [
        "docs/no-such-page.md: no such file",
        "docs/speed.md#no-such-heading: no heading #no-such-heading",
        "../elsewhere.md: no such file",
    ]
    assert slug("`dspark bench`") == "dspark-bench" and slug("Engine changes, measured") == "engine-changes-measured"
    assert slug("Linux: built and tested on every CI run") == "linux-built-and-tested-on-every-ci-run"


def test_the_readme_is_two_screens_that_link_every_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 120
    assert "make run" in readme and "make test" in readme and "![" in readme
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name}" in readme, page.name


def test_the_options_promise_lives_where_test_options_cites_it():
    # tests/test_options.py holds this sentence of docs/command-line.md
    page = " ".join((ROOT / "docs" / "command-line.md").read_text().split())
    assert "`--help` on any command lists every option with its default" in page


@pytest.mark.parametrize("page, command", RUNS, ids=[c.split(" ", 2)[1] + " " + p.name for p, c in RUNS])
def test_the_first_examples_run_on_the_demo_models(page, command):
    shown = [c.split(" ", 1)[1] for c in commands(page.read_text())]
    assert command.split(" ", 1)[1] in [re.sub(r"\s+#.*$", "", s).strip() for s in shown], (command, page.name)
    words = shlex.split(command)
    r = run(PROGRAMS[words[0]], *words[1:])
    assert r.returncode == 0, r.stderr[-2000:]
    if "--json" in words:
        out = json.loads(r.stdout)
        if words[1] == "generate":
            assert len(out["tokens"]) == 8 and isinstance(out["text"], str) and out["method"] == "speculative"
            # auto (the default) decodes plainly where its costs say no round pays: on a busy
            # machine the 8 tokens may come from plain steps alone
            assert out["rounds"] + out["plain_steps"] >= 1
        else:
            assert out
    else:
        assert r.stdout.startswith(f"{words[-1]}: ") and "block size" in r.stdout

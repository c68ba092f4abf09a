"""Hostile files given to the app (issue #26), run headless as a user would run them: each in its
own ``dspark-studio --screenshot`` process with a time limit. A saved run or benchmark summary the
app cannot draw is one sentence and exit status 2 before any window is made; a special file never
blocks; ``--timeout`` always ends the process.

Replay files are meant to be shared, so the audit's cases are files a stranger could send: NaN or
text where a time is expected, nesting past any parser's stack, indices and counts that would
allocate gigabytes, arrays of a million entries."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny import write_tiny_target_dir

from dspark.cli import main

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 120  # each headless run's wall-clock limit; the refusals take a few seconds


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A real recording (a generation's events and summary, as the app saves them) and a
    benchmark summary, for the cases below to damage."""
    from dspark.config import GenerationConfig
    from dspark.engine import generate
    from dspark.events import RoundEvent, Summary, event_to_dict
    from dspark.loading import load_drafter, load_target

    root = tmp_path_factory.mktemp("hostile_app")
    t = write_tiny_target_dir(root / "target", window=16)
    assert (
        main(
            [
                "init",
                "--target",
                str(t),
                "--out",
                str(root / "drafter"),
                "--block-size",
                "4",
                "--layers",
                "1",
                "--taps",
                "1,3",
                "--markov-rank",
                "16",
            ]
        )
        == 0
    )
    target = load_target(t)
    drafter = load_drafter(root / "drafter", target)
    events = list(generate(target, drafter, "x = 1", GenerationConfig(policy="fixed", max_tokens=12)))
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    summary = next(e for e in events if isinstance(e, Summary))
    run = {
        "label": "drafter",
        "method": "speculative",
        "drafter": str(root / "drafter"),
        "prompt": "x = 1",
        "prompt_index": 0,
        "config": {"max_tokens": 12, "temperature": 0.0},
        "events": [event_to_dict(e) for e in rounds],
        "drafted_text": [[f"#{i}" for i in e.drafted] for e in rounds],
        "summary": summary.to_dict(),
        "verdict": None,
    }
    doc = {
        "app": "dspark-studio",
        "version": "0",
        "created": "2026-12-01T10:00:00",
        "kind": "run",
        "prompts": 1,
        "target": str(t),
        "runs": [run],
    }
    bench = {
        "command": "dspark bench",
        "environment": {"cpu": "x", "cpus": 2, "load_average": [0.5, 0.5, 0.5]},
        "target": str(t),
        "prompts": {"key": "k", "name": "n", "count": 2},
        "settings": {"max_tokens": 8, "repeats": 1, "temperature": 0.0},
        "costs": {},
        "arms": [
            {"arm": "plain", "trials": 2, "tokens_per_sec": 100.0, "per_position_acceptance": []},
            {
                "arm": "drafter fixed",
                "drafter": "drafter",
                "policy": "fixed",
                "trials": 2,
                "tokens_per_sec": 150.0,
                "speedup": 1.5,
                "tau": 2.0,
                "acceptance_rate": 0.5,
                "per_position_acceptance": [0.6, 0.4],
                "identical": 2,
                "compared": 2,
                "lossless": 2,
            },
        ],
    }
    return {"root": root, "target": t, "run": doc, "bench": bench}


def env(tmp_path: Path) -> dict:
    e = dict(os.environ, QT_QPA_PLATFORM="offscreen", DSPARK_STUDIO_HOME=str(tmp_path / "home"))
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")])
    return e


def studio(tmp_path: Path, *args, timeout: float = LIMIT_S) -> tuple[subprocess.CompletedProcess, float]:
    start = time.time()
    r = subprocess.run(
        [sys.executable, "-m", "dspark_studio", "--screenshot", str(tmp_path / "shot.png"), *args],
        env=env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return r, time.time() - start


def _round(doc: dict, change) -> dict:
    doc = copy.deepcopy(doc)
    change(doc["runs"][0]["events"][1])
    return doc


def _run(doc: dict, change) -> dict:
    doc = copy.deepcopy(doc)
    change(doc["runs"][0])
    return doc


def _arm(bench: dict, change) -> dict:
    bench = copy.deepcopy(bench)
    change(bench["arms"][1])
    return bench


def _many_rounds(doc: dict, n: int) -> dict:
    """``n`` rounds as small as a round can be, so that the file stays under the size limit."""
    doc = copy.deepcopy(doc)
    ev = {k: (v if not isinstance(v, (list, tuple)) else []) for k, v in doc["runs"][0]["events"][0].items()}
    doc["runs"][0]["events"] = [ev] * n
    doc["runs"][0]["drafted_text"] = None
    return doc


# name, the file's text (from the saved run ``r`` and benchmark ``b``), a fragment of the sentence
FILES = [
    # the audit's examples
    (
        "NaN times",
        lambda r, b: _round(r, lambda e: e.__setitem__("elapsed_seconds", math.nan)),
        "elapsed_seconds must be a finite number",
    ),
    (
        "a string where a time is expected",
        lambda r, b: _round(r, lambda e: e.__setitem__("elapsed_seconds", "0.5")),
        "elapsed_seconds must be a finite number",
    ),
    ("JSON nested 10^5 deep", lambda r, b: "[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
    (
        "a prompt_index of 10^9",
        lambda r, b: _run(r, lambda x: x.__setitem__("prompt_index", 10**9)),
        "prompt_index must be a whole number from 0 to 9,999",
    ),
    ("prompts of 10^10", lambda r, b: {**r, "prompts": 10**10}, "prompts must be a whole number from 0 to 10,000"),
    ("more rounds than a replay draws", lambda r, b: _many_rounds(r, 100_001), "more than 100,000 rounds"),
    (
        "a benchmark summary with NaN values",
        lambda r, b: _arm(b, lambda a: a.update(tokens_per_sec=math.nan, speedup=math.nan)),
        "tokens_per_sec must be a finite number",
    ),
    (
        "a benchmark summary with a 10^6-entry array",
        lambda r, b: _arm(b, lambda a: a.__setitem__("per_position_acceptance", [0.5] * 1_000_000)),
        "per_position_acceptance must be a list of at most 65",
    ),
    (
        "a string tokens_per_sec",
        lambda r, b: _run(r, lambda x: x["summary"].__setitem__("tokens_per_sec", "fast")),
        "tokens_per_sec must be a finite number",
    ),
    # variants
    (
        "a time that goes back",
        lambda r, b: _round(r, lambda e: e.__setitem__("elapsed_seconds", 0.0)),
        "its time goes back",
    ),
    (
        "a time of a year",
        lambda r, b: _round(r, lambda e: e.__setitem__("elapsed_seconds", 3.2e7)),
        "elapsed_seconds must be a finite number from 0 to",
    ),
    (
        "more accepted than drafted",
        lambda r, b: _round(r, lambda e: e.update(accepted=60, verify_width=60)),
        "its accepted, verified and drafted counts disagree",
    ),
    (
        "a round with a field no event has",
        lambda r, b: _round(r, lambda e: e.__setitem__("warp", 1)),
        "has an unknown field 'warp'",
    ),
    (
        "a negative draft time",
        lambda r, b: _round(r, lambda e: e.__setitem__("draft_seconds", -1.0)),
        "draft_seconds must be a finite number",
    ),
    (
        "a token id of -1",
        lambda r, b: _round(r, lambda e: e["committed"][0].__setitem__("id", -1)),
        "id must be a whole number",
    ),
    (
        "a probability of 2",
        lambda r, b: _round(r, lambda e: e["committed"][0].__setitem__("target_prob", 2.0)),
        "target_prob must be a finite number from 0 to 1",
    ),
    (
        "rounds that are not objects",
        lambda r, b: _run(r, lambda x: x.__setitem__("events", [1, 2])),
        "must be an object",
    ),
    (
        "drafted text that does not match",
        lambda r, b: _run(r, lambda x: x["drafted_text"][0].append("extra")),
        "drafted_text does not match",
    ),
    ("a thousand and one runs", lambda r, b: {**r, "runs": r["runs"] * 1001}, "holds 1,001 runs"),
    (
        "a config holding an object",
        lambda r, b: _run(r, lambda x: x["config"].__setitem__("seed", {"a": 1})),
        "config seed must be a finite number",
    ),
    (
        "a summary of an unknown finish",
        lambda r, b: _run(r, lambda x: x["summary"].__setitem__("finish_reason", "x")),
        "finish_reason must be one of",
    ),
    (
        "an infinite speedup",
        lambda r, b: _arm(b, lambda a: a.__setitem__("speedup", math.inf)),
        "speedup must be a finite number",
    ),
    ("a thousand and one arms", lambda r, b: {**b, "arms": b["arms"] * 501}, "arms must be a list of at most 1,000"),
    (
        "costs asking for 10^6 BLAS threads",
        lambda r, b: {
            **b,
            "costs": {
                "drafter": {"verify_ms": [1.0, 2.0], "draft_ms": 1.0, "step_ms": 1.0, "threads": {"step": 10**6}}
            },
        },
        "threads must map phases to BLAS thread counts",
    ),
    ("a prompt count written as text", lambda r, b: {**b, "prompts": {"count": "2"}}, "count must be a whole number"),
    ("identical counts past the compared", lambda r, b: _arm(b, lambda a: a.update(identical=5)), "counts disagree"),
]


def _write(tmp_path: Path, name: str, content) -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


@pytest.mark.parametrize("name, make, says", FILES, ids=[f[0] for f in FILES])
def test_a_file_the_app_cannot_draw_is_one_sentence_and_exit_2(saved, tmp_path, name, make, says):
    content = make(saved["run"], saved["bench"])
    path = _write(tmp_path, "summary.json" if isinstance(content, dict) and "arms" in content else "run.json", content)
    r, took = studio(tmp_path, "--replay", str(path), "--timeout", "60")
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dspark-studio: error:") and says in lines[0], r.stderr[-2000:]
    assert not (tmp_path / "shot.png").exists() and took < 60


@pytest.mark.parametrize("kind", ["a FIFO", "/dev/zero through a link", "a folder", "a sparse 100 MB file"])
def test_a_replay_that_is_not_a_regular_file_of_a_sane_size_never_blocks(saved, tmp_path, kind):
    path = tmp_path / "run.json"
    if kind == "a FIFO":
        os.mkfifo(path)
    elif kind == "a folder":
        path.mkdir()
    elif kind == "a sparse 100 MB file":
        with path.open("wb") as f:
            f.truncate(100 * 2**20)
    else:
        path.symlink_to("/dev/zero")
    r, took = studio(tmp_path, "--replay", str(path), "--timeout", "60")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and took < 60, (r.returncode, r.stderr[-2000:])


def test_a_good_replay_still_plays(saved, tmp_path):
    """The checks refuse what the app did not write, not what it did."""
    path = _write(tmp_path, "run.json", saved["run"])
    r, _ = studio(tmp_path, "--replay", str(path), "--timeout", "100")
    assert r.returncode == 0 and (tmp_path / "shot.png").exists(), r.stderr[-2000:]
    path = _write(tmp_path, "summary.json", saved["bench"])
    r, _ = studio(tmp_path, "--replay", str(path), "--timeout", "100")
    assert r.returncode == 0, r.stderr[-2000:]


def test_timeout_always_ends_the_process(saved, tmp_path):
    """The audit's case: the app printed "timed out" and kept running. A replay of an hour at its
    recorded speed, with --timeout 3: the process ends, status 2, well within the grace period."""
    doc = copy.deepcopy(saved["run"])
    for i, ev in enumerate(doc["runs"][0]["events"]):
        ev["elapsed_seconds"] = 3600.0 * (i + 1) / len(doc["runs"][0]["events"])
    doc["runs"][0]["summary"]["total_seconds"] = 3600.0
    path = _write(tmp_path, "slow.json", doc)
    r, took = studio(tmp_path, "--replay", str(path), "--replay-speed", "1", "--timeout", "3", timeout=90)
    assert r.returncode == 2 and "timed out" in r.stderr and took < 3 + 10 + 30, (r.returncode, took, r.stderr[-2000:])


def test_a_special_file_as_the_settings_file_does_not_keep_the_window_away(tmp_path):
    """The audit's case: a FIFO as the app's settings file, and no window ever appeared (QSettings
    opens it as it is). The settings are set aside for the session, in one line."""
    home = tmp_path / "home"
    home.mkdir()
    os.mkfifo(home / "settings.ini")
    code = (
        "from dspark_studio.files.settings import Settings; s = Settings(); s.set('a', 1); "
        "print(s.get('a', 0), 'PROBLEM' if s.problem else 'NONE')"
    )
    r = subprocess.run([sys.executable, "-c", code], env=env(tmp_path), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["1", "PROBLEM"], (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "is not a regular file" in r.stderr


def test_a_target_whose_tokenizer_is_a_fifo_fails_and_ends(saved, tmp_path):
    """The audit's case: the last-used target's tokenizer.json a FIFO, and the window showed
    "loading target…" for ever and could not be closed. Loading refuses it at once."""
    t = tmp_path / "target"
    t.mkdir()
    for f in saved["target"].iterdir():
        (t / f.name).write_bytes(f.read_bytes())
    (t / "tokenizer.json").unlink()
    os.mkfifo(t / "tokenizer.json")
    r, took = studio(tmp_path, "--target", str(t), "--max-tokens", "4", "--timeout", "60")
    assert r.returncode == 1 and "timed out" not in r.stderr and took < 60, (r.returncode, r.stderr[-2000:])

"""The app on stage (issue #22): each thing that was wrong or confusing for a newcomer or a
speaker, driven through the real widgets (pytest-qt) on plain worker messages or tiny models."""

from __future__ import annotations

import dataclasses
import json

import pytest

pytest.importorskip("pytestqt")

from test_app import dirs  # noqa: F401  (the shared tiny models)
from test_app_replay import fresh, saved  # noqa: F401  (a window, and runs saved by the app)
from test_session import event, summary

from dspark import metrics
from dspark.events import Source
from dspark.lossless import Verdict
from dspark_studio.panes.header import HeaderStrip
from dspark_studio.panes.results import ResultsPanel
from dspark_studio.state.messages import Arm, Checked, JobDone, RoundDone, RunDone, RunStarted
from dspark_studio.state.runs import PLAIN_LABEL
from dspark_studio.state.session import COMPARE_TAB, Session

ARMS = (Arm("d1", "/d1"), Arm("d2", "/d2"), Arm(PLAIN_LABEL, None))


def run(s: Session, job, key: int, arm: Arm, prompt: int, tokens: list[int], tps: float, stop_after: int | None = None):
    """One run of ``arm`` on ``prompt`` (4 tokens a round for a drafter), ended, or stopped after
    ``stop_after`` rounds."""
    s.apply(
        RunStarted(
            job=job.id,
            key=key,
            label=arm.label,
            method="speculative" if arm.drafter else "plain",
            drafter=arm.drafter,
            prompt="p",
            prompt_index=prompt,
            config={},
        )
    )
    step = 4 if arm.drafter else 1
    rounds = 0
    for i in range(0, len(tokens), step):
        if stop_after is not None and rounds == stop_after:
            break
        n = min(i + step, len(tokens))
        accepted = (3 if arm.label == "d1" else 1) if arm.drafter else 0
        ev = event(
            rounds,
            min(accepted, n - i - 1),
            3 if arm.drafter else 0,
            tokens[i:n],
            Source.CORRECTION if arm.drafter else Source.TARGET,
            generated=n,
            seconds=n / tps,
        )
        s.apply(RoundDone(key, ev, ("a", "b", "c") if arm.drafter else ()))
        rounds += 1
    made = tokens[: min(len(tokens), rounds * step)]
    done = summary("speculative" if arm.drafter else "plain", made, rounds, tps)
    if stop_after is not None:
        done = dataclasses.replace(done, finish_reason="cancelled")
    s.apply(RunDone(key, done))


def prompt_done(s: Session, job, prompt: int, key0: int, rates=(150.0, 120.0, 100.0)) -> None:
    tokens = list(range(10 + prompt, 26 + prompt))
    for k, (arm, tps) in enumerate(zip(ARMS, rates)):
        run(s, job, key0 + k, arm, prompt, tokens, tps)
    for k in (0, 1):
        s.apply(Checked(key0 + k, Verdict(True)))


def pooled(runs, label):
    rs = [r for r in runs if r.label == label]
    n = sum(len(r.summary.tokens) for r in rs)
    return n / sum(len(r.summary.tokens) / r.summary.tokens_per_sec for r in rs)


# --- 2: a comparison stopped part-way pools the same runs into every figure -------------------
def test_a_stopped_pooled_comparison_s_header_equals_the_figures_of_the_runs_it_pooled(qtbot):
    s = Session()
    job = s.new_job("compare", "/t", ["p0", "p1", "p2"], ARMS, config={}, focus="d1")
    prompt_done(s, job, 0, 1)
    prompt_done(s, job, 1, 4, rates=(180.0, 90.0, 110.0))
    run(s, job, 7, ARMS[0], 2, list(range(40, 56)), 200.0, stop_after=1)  # Stop during prompt 3
    s.apply(JobDone(job.id, True, True))
    s.show_tab(COMPARE_TAB)
    header = HeaderStrip()
    qtbot.addWidget(header)
    view = s.view()
    header.show_view(view)
    kept = [r for r in s.comparison if r.prompt_index in (0, 1)]  # what the figures may pool: prompts 1 and 2
    speculative_runs = [r for r in kept if r.label == "d1"]
    pairs = [
        (r.rounds, b.rounds)
        for r in speculative_runs
        for b in kept
        if b.label == PLAIN_LABEL and b.prompt_index == r.prompt_index
    ]
    ratio, compared = metrics.comparable_speedup(pairs)
    tau = metrics.summarize(e for r in speculative_runs for e in r.rounds).tau
    shown = {k: header.values[k].text() for k in ("speculative", "plain", "speedup", "tau", "same")}
    assert shown == {
        "speculative": f"{pooled(kept, 'd1'):.1f}",
        "plain": f"{pooled(kept, PLAIN_LABEL):.1f}",
        "speedup": f"{ratio:.2f}×",
        "tau": f"{tau:.2f}",
        "same": "✓",
    }
    assert header.headline.text() == "d1 vs plain decoding · pooled over 2 of 3 prompts · stopped"
    assert "Pooled over the 2 prompts" in header.values["speedup"].toolTip()
    assert f"{compared} tokens compared" in header.values["speedup"].toolTip() and compared == 32
    assert {(r["label"], r["finished"], r["planned"], r["runs"]) for r in view.rows} == {
        ("d1", 2, 3, 2),
        ("d2", 2, 3, 2),
        (PLAIN_LABEL, 2, 3, 2),
    }


def test_while_a_comparison_runs_every_row_covers_the_same_prompts(qtbot):
    s = Session()
    job = s.new_job("compare", "/t", ["p0", "p1", "p2"], ARMS, config={}, focus="d1")
    prompt_done(s, job, 0, 1)
    s.apply(
        RunStarted(
            job=job.id, key=4, label="d1", method="speculative", drafter="/d1", prompt="p", prompt_index=1, config={}
        )
    )  # prompt 2: d1 running
    s.apply(RoundDone(4, event(0, 3, 3, [1, 2, 3, 4], generated=4, seconds=0.01), ("a", "b", "c")))
    s.show_tab(COMPARE_TAB)
    panel = ResultsPanel()
    qtbot.addWidget(panel)
    panel.show_view(s.view())
    table = panel.compare.table
    cells = [[table.item(r, c).text() for c in (1, 7)] for r in range(table.rowCount())]
    assert cells == [["1/3", "✓"], ["1/3", "✓"], ["1/3", "–"]]  # not "–" for one drafter and ✓ for the other
    assert panel.header.headline.text() == "d1 vs plain decoding · pooled over 1 of 3 prompts (the rest running)"


# --- 12: one snapshot per redraw -------------------------------------------------------------
def test_the_header_and_the_histogram_draw_the_same_rounds_however_many_arrive_meanwhile(qtbot, monkeypatch):
    s = Session()
    job = s.new_job("run", "/t", ["p"], (ARMS[0], ARMS[2]), config={})
    s.apply(
        RunStarted(
            job=job.id, key=1, label="d1", method="speculative", drafter="/d1", prompt="p", prompt_index=0, config={}
        )
    )
    for i in range(3):
        s.apply(RoundDone(1, event(i, 3, 3, [1, 2, 3, 4], generated=4 * (i + 1), seconds=0.1 * (i + 1)), ("a",) * 3))
    panel = ResultsPanel()
    qtbot.addWidget(panel)
    drawn_header = HeaderStrip.show_view

    def header_then_a_message_arrives(header, view):
        drawn_header(header, view)
        s.apply(RoundDone(1, event(3, 0, 3, [5], generated=13, seconds=0.4), ("a",) * 3))  # τ moves to 3.25

    monkeypatch.setattr(HeaderStrip, "show_view", header_then_a_message_arrives)
    panel.show_view(s.view())
    tau = panel.header.values["tau"].text()
    assert (
        tau == "4.00" and f"τ\u00a0=\u00a0{tau}" in panel.plots.hist.getPlotItem().titleLabel.text
    )  # never split over lines
    assert len(panel.drafts.grid.rounds) == 3 and panel.text.text.count == 12  # the same three rounds


# --- 1: a replay after a replay of another run shows the file's text --------------------------
def test_a_replay_after_a_replay_of_another_run_shows_that_run_s_text(qtbot, saved, fresh, tmp_path):
    """Both files' speculative runs are run 1 of their replay; the text pane used to take the
    second for the first and keep (or splice onto) the first one's text."""
    w = fresh
    doc = json.loads(saved["compare"]["file"].read_text())
    first = [r for r in doc["runs"] if r["prompt_index"] == 0 and r["label"] in ("drafter", PLAIN_LABEL)]
    other = tmp_path / "other.json"
    other.write_text(
        json.dumps({**{k: v for k, v in doc.items() if k != "comparison"}, "kind": "run", "prompts": 1, "runs": first})
    )
    for path in (saved["run"]["file"], other):
        with qtbot.waitSignal(w.job_finished, timeout=30_000):
            assert w.open_replay([str(path)], "instant"), w.session.message
        w.refresh()
        speculative = next(r for r in json.loads(path.read_text())["runs"] if r["method"] == "speculative")
        text = speculative["prompt"] + "".join(t["text"] for ev in speculative["events"] for t in ev["committed"])
        assert w.results.text.text.toPlainText() == text
        assert len(w.results.drafts.grid.rounds) == len(speculative["events"])

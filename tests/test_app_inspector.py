"""The rejection inspector in the app (issue #25), headless on the tiny models: a draft-rows cell
tells its story (the drafted token and its q, the target's five best tokens with their
probabilities, the rank, and why it was kept or not), checked against the recorded RoundEvent;
the Rejections tab's two views hold exactly ``dspark.metrics``' figures, one per drafter after a
comparison, and export as CSV; a saved run replays with its inspector data, a run saved before it
still opens, and a damaged inspector field is one sentence. The runs to inspect are made by an
oracle drafter (the target's own continuation with planted mistakes), so they have accepted and
rejected drafts whatever the random weights."""

from __future__ import annotations

import csv
import json

import pytest

pytest.importorskip("pytestqt")

from oracle import OracleDrafter
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocument
from test_app import dirs, run_job, setup  # noqa: F401  (dirs: the shared fixture)
from test_app_support import shown_window

from dspark import GenerationConfig, generate, generate_plain, load_target, metrics
from dspark.engine import prompt_ids
from dspark.errors import DsparkError
from dspark_studio.files import run_export
from dspark_studio.files.checking import check_document
from dspark_studio.state import inspector
from dspark_studio.state.inspector import visible
from dspark_studio.state.runs import PLAIN_LABEL, Run
from dspark_studio.window.main_window import MainWindow

PROMPT = "the a of and to in"
CONFIG = {"max_tokens": 40, "temperature": 0.0, "policy": "fixed", "stop_at_eos": False}


def _run(target, label: str, drafter: str | None, events: list, key: int, prompt_index: int = 0) -> Run:
    """A run as the app keeps it from the worker's messages (texts decoded as the worker does)."""
    piece = lambda t: target.tokenizer.decode([t])
    run = Run(
        key=key,
        label=label,
        method="speculative" if drafter else "plain",
        prompt=PROMPT,
        prompt_index=prompt_index,
        drafter=drafter,
        config=dict(CONFIG),
    )
    for ev in events[:-1]:
        run.rounds.append(ev)
        run.drafted_text.append(tuple(piece(t) for t in ev.drafted))
        run.top_text.append(tuple(tuple(piece(t) for t, _p in row) for row in ev.target_top or ()))
    run.summary = events[-1]
    return run


def _oracle_events(target, seed: int, corrupt: float) -> list:
    cfg = GenerationConfig(policy="fixed", max_tokens=CONFIG["max_tokens"], stop_at_eos=False)
    plain = list(generate_plain(target, PROMPT, cfg))
    oracle = OracleDrafter(
        prompt_ids(target, PROMPT, cfg) + list(plain[-1].tokens),
        target.dims.vocab_size,
        block_size=4,
        corrupt=corrupt,
        seed=seed,
    )
    return list(generate(target, oracle, PROMPT, cfg, inspect=True)), plain


@pytest.fixture(scope="module")
def saved(dirs, tmp_path_factory):
    """A run and a comparison of two oracle "drafters", inspected, saved as the app saves them."""
    root = tmp_path_factory.mktemp("inspected")
    target = load_target(dirs["target"])
    a, plain = _oracle_events(target, seed=0, corrupt=0.3)
    b, _ = _oracle_events(target, seed=3, corrupt=0.6)
    run = [_run(target, "oracle-a", "/models/oracle-a", a, 1), _run(target, PLAIN_LABEL, None, plain, 2)]
    compare = run[:1] + [_run(target, "oracle-b", "/models/oracle-b", b, 3), run[1]]
    files = {"run": root / "run.json", "compare": root / "compare.json"}
    run_export.write_json(files["run"], run, str(dirs["target"]), comparison=False, prompts=1)
    run_export.write_json(files["compare"], compare, str(dirs["target"]), comparison=True, prompts=1)
    return {"files": files, "events": {"oracle-a": a[:-1], "oracle-b": b[:-1]}, "tokenizer": target.tokenizer}


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    w = shown_window(qtbot, monkeypatch, tmp_path / "home")
    yield w
    w.close()


def _show_rejections(w) -> None:
    """The Rejections tab, as clicking it does."""
    w.results.tabs.setCurrentWidget(w.results.rejections)
    w.refresh()


def _replay(qtbot, w, path) -> None:
    assert run_job(qtbot, w, lambda: w.open_replay([str(path)], "instant"))["ok"]


def _cells(events) -> dict[str, tuple[int, int]]:
    """(row, draft) of an accepted draft, a rejected one, one after a rejection and one not verified."""
    out = {}
    for row, e in enumerate(events):
        for k in range(len(e.drafted)):
            state = inspector.cell_state(k, e.accepted, e.verify_width)
            out.setdefault(state, (row, k))
    return out


def _plain(html: str) -> str:
    doc = QTextDocument()
    doc.setHtml(html)
    return doc.toPlainText()


def _click(qtbot, w, row: int, col: int):
    grid = w.results.drafts.grid
    qtbot.mouseClick(grid, Qt.LeftButton, pos=grid.cell_rect(row, col).center())
    return w.results.story


def test_clicking_a_cell_tells_its_story_from_the_recorded_event(qtbot, window, saved):
    w, events, tok = window, saved["events"]["oracle-a"], saved["tokenizer"]
    _replay(qtbot, w, saved["files"]["run"])
    cells = _cells(events)
    assert {"accepted", "rejected"} <= set(cells)
    for state, (row, k) in cells.items():
        panel = _click(qtbot, w, row, k)
        s, ev = panel.story, events[row]
        assert panel.isVisible() and w.results.drafts.grid.selected == (row, k)
        assert (s.round, s.draft, s.token, s.state) == (ev.index, k + 1, ev.drafted[k], state)
        assert s.text == visible(tok.decode([ev.drafted[k]])) and s.q == ev.draft_probs[k]
        html = _plain(panel.label.text())
        assert s.verdict in html and s.why in html and f"q {inspector.prob(s.q)}" in html
        if state == "unverified":
            assert s.top == () and s.rank is None and s.verdict == "not verified"
            continue
        want = tuple((t, visible(tok.decode([t])), p) for t, p in ev.target_top[k])
        assert s.top == want and len(want) == 5 and s.rank == ev.draft_rank[k] and s.tie == ev.draft_tie[k]
        for _t, text, p in want:  # the target's top 5, decoded, with their probabilities, on screen
            assert inspector.prob(p) in html and text[:10] in html
        if state == "accepted":
            assert s.rank == 0 and s.top[0][0] == ev.drafted[k] and "rank 0" in html and "accepted" in html
        if state == "rejected":
            fix = ev.committed[k]
            assert s.rank >= 1 and s.top[0][0] == fix.id and f"rank {s.rank}" in html
            assert s.verdict.startswith("rejected") and visible(fix.text) in s.why
    qtbot.keyClick(w.results.drafts.grid, Qt.Key_Escape)
    assert not w.results.story.isVisible() and w.results.drafts.grid.selected is None


def test_the_arrow_keys_walk_the_cells_and_the_target_s_token_has_its_story(qtbot, window, saved):
    w = window
    _replay(qtbot, w, saved["files"]["run"])
    grid, n = w.results.drafts.grid, len(saved["events"]["oracle-a"])
    grid.setFocus()
    qtbot.keyClick(grid, Qt.Key_Down)
    assert grid.selected == (n - 1, 0) and w.results.story.isVisible()
    qtbot.keyClick(grid, Qt.Key_Up)
    qtbot.keyClick(grid, Qt.Key_Right)
    assert grid.selected == (n - 2, min(1, len(grid.rounds[n - 2].drafted)))
    for _ in range(8):
        qtbot.keyClick(grid, Qt.Key_Right)  # stops at the round's own token
    ev = grid.rounds[n - 2]
    s = w.results.story.story
    assert grid.selected == (n - 2, len(ev.drafted)) and s.draft == 0 and s.token == ev.committed[-1].id
    assert s.state == ev.committed[-1].source.value


def test_the_two_views_hold_the_metrics_figures_and_export_them(qtbot, window, saved, tmp_path):
    w, events = window, saved["events"]["oracle-a"]
    _replay(qtbot, w, saved["files"]["run"])
    _show_rejections(w)
    pane = w.results.rejections
    assert w.results.tabs.currentWidget() is pane and pane.isVisible()
    edges = metrics.context_edges(max(e.position for e in events))
    assert pane.context == (edges, {"oracle-a": metrics.by_context(events, edges)})
    shown, per = pane.wrong
    want = metrics.rejections(events, 10)
    assert want and [{k: p[k] for k in want[0]} for p in per["oracle-a"]] == want
    assert shown == [(p["drafted"], p["target"]) for p in want]
    assert all(p["drafted_text"] == saved["tokenizer"].decode([p["drafted"]]) for p in per["oracle-a"])
    bars = [i for i in pane.by_context.getPlotItem().items if type(i).__name__ == "BarGraphItem"]
    assert len(bars) == sum(b["acceptance_rate"] is not None for b in pane.context[1]["oracle-a"])
    ticks = pane.pairs.getAxis("left")._tickLevels[0]
    assert len(ticks) == len(want) and "→" in ticks[-1][1]
    out = w.export_rejections(str(tmp_path / "csv"))
    assert [p.name for p in out] == ["acceptance_by_context.csv", "what_it_gets_wrong.csv"]
    rows = list(csv.DictReader(out[0].open()))
    text = lambda v: "" if v is None else str(v)  # how csv writes a value
    assert [(r["drafter"], r["from"], r["to"], r["rounds"], r["acceptance_rate"]) for r in rows] == [
        ("oracle-a", text(b["from"]), text(b["to"]), text(b["rounds"]), text(b["acceptance_rate"]))
        for b in pane.context[1]["oracle-a"]
    ]
    rows = list(csv.DictReader(out[1].open()))
    assert [(int(r["drafted"]), int(r["target"]), int(r["count"])) for r in rows] == [
        (p["drafted"], p["target"], p["count"]) for p in want
    ]
    assert {p.name for p in w.export_pngs(str(tmp_path / "png"))} >= {
        "acceptance_by_context.png",
        "what_it_gets_wrong.png",
    }


def test_after_a_comparison_the_views_are_per_drafter(qtbot, window, saved, tmp_path):
    w, events = window, saved["events"]
    _replay(qtbot, w, saved["files"]["compare"])
    _show_rejections(w)
    pane = w.results.rejections
    edges, per = pane.context
    assert edges == metrics.context_edges(max(e.position for es in events.values() for e in es))
    assert per == {label: metrics.by_context(es, edges) for label, es in events.items()}
    shown, wrong = pane.wrong
    for label, es in events.items():  # each drafter's own counts of the pairs shown
        every = {(p["drafted"], p["target"]): p["count"] for p in metrics.rejections(es, None)}
        assert {(p["drafted"], p["target"]): p["count"] for p in wrong[label]} == {
            k: n for k, n in every.items() if k in shown
        }
    assert len(set(pane.colours.values())) == 2  # one colour per drafter, as on the other tabs
    out = w.export_rejections(str(tmp_path / "csv"))
    assert {r["drafter"] for r in csv.DictReader(out[0].open())} == {"oracle-a", "oracle-b"}


def _without_inspector(doc: dict) -> dict:
    for run in doc["runs"]:
        run.pop("top_text", None)
        for ev in run["events"]:
            for key in ("target_top", "draft_rank", "draft_tie", "position"):
                ev.pop(key, None)
    return doc


def test_a_run_saved_before_the_inspector_still_opens(qtbot, window, saved, tmp_path):
    w, events = window, saved["events"]["oracle-a"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_without_inspector(json.loads(saved["files"]["run"].read_text()))))
    _replay(qtbot, w, old)
    speculative, _ = w.session.shown_runs()
    # from the prompt and the tokens made
    assert [e.position for e in speculative.rounds] == [e.position for e in events]
    row, k = _cells(events)["rejected"]
    s = _click(qtbot, w, row, k).story
    assert s.top == () and s.rank is None and s.verdict == "rejected"
    assert "not recorded" in w.results.story.label.text()
    _show_rejections(w)
    assert w.results.rejections.wrong[1]["oracle-a"]  # counted from the committed tokens alone


BAD = {  # (what is done to the first speculative round i that verified a draft, what the sentence names)
    "a probability above 1": (
        lambda run, i: run["events"][i]["target_top"][0][0].__setitem__(1, 1.5),
        "round {n}: target_top entry 1",
    ),
    "a pair of three": (lambda run, i: run["events"][i]["target_top"][0][0].append(3), "[token, probability] pair"),
    "a row too few": (lambda run, i: run["events"][i]["target_top"].pop(), "round {n}: target_top has"),
    "not best first": (lambda run, i: run["events"][i]["target_top"][0].reverse(), "best first"),
    "a negative rank": (lambda run, i: run["events"][i]["draft_rank"].__setitem__(0, -1), "round {n}: draft_rank"),
    "a tie that is a text": (lambda run, i: run["events"][i]["draft_tie"].__setitem__(0, "yes"), "draft_tie entry 1"),
    "a negative position": (lambda run, i: run["events"][i].__setitem__("position", -4), "round {n}: position"),
    "top_text of another shape": (lambda run, i: run["top_text"][i].append(["x"] * 5), "top_text does not match"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_damaged_inspector_field_is_one_sentence(saved, case):
    doc = json.loads(saved["files"]["run"].read_text())
    check_document(doc, "run.json")  # the app's own file passes
    run = doc["runs"][0]
    first = next(i for i, ev in enumerate(run["events"]) if ev["verify_width"])
    damage, says = BAD[case]
    damage(run, first)
    says = says.format(n=first + 1)
    with pytest.raises(DsparkError) as e:
        check_document(doc, "run.json")
    assert says in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("run.json"), str(e.value)


def test_every_app_run_records_the_inspector_and_dspark_bench_never_computes_it(qtbot, dirs, tmp_path, monkeypatch):
    import dspark.rounds
    from dspark import load_drafter
    from dspark.bench.arms import Speculative

    monkeypatch.setenv("DSPARK_STUDIO_HOME", str(tmp_path / "home"))
    w = MainWindow(prefs=None)
    qtbot.addWidget(w)
    w.show()
    try:
        setup(w, dirs)
        assert run_job(qtbot, w, w.start_run)["ok"]
        speculative, plain = w.session.shown_runs()
        tok = load_target(dirs["target"]).tokenizer
        verified = [(e, t) for e, t in zip(speculative.rounds, speculative.top_text) if e.verify_width]
        assert verified and all(len(e.target_top) == len(e.draft_rank) == e.verify_width for e, _ in verified)
        assert all(t == tuple(tuple(tok.decode([i]) for i, _p in row) for row in e.target_top) for e, t in verified)
        assert all(e.target_top is None for e in plain.rounds)  # plain decoding has nothing to inspect
    finally:
        w.close()
    target = load_target(dirs["target"])
    arm = Speculative(
        target,
        load_drafter(dirs["drafter"], target),
        drafter_name="drafter",
        policy="fixed",
        config=GenerationConfig(policy="fixed"),
    )

    def refuse(*_a, **_k):
        raise AssertionError("dspark bench inspected a round")

    monkeypatch.setattr(dspark.rounds, "inspection", refuse)
    assert arm.trial(prompt_ids(target, PROMPT), 12, 0)["tokens"] == 12


def test_the_screenshot_flags_are_read_and_refused_in_one_line():
    from dspark_studio.startup import build_parser

    p = build_parser()
    assert p.parse_args(["--inspect", "rejected", "--tab", "rejections"]).inspect == "rejected"
    assert p.parse_args(["--inspect=-1:0"]).inspect == "-1:0"  # a negative round needs the = form
    for bad in ("3", "a:b", "1:-2"):
        with pytest.raises(SystemExit):
            p.parse_args(["--inspect", bad])


def test_the_inspector_s_words_and_figures_import_no_qt():
    import subprocess
    import sys

    code = (
        "import sys, dspark_studio.state.inspector; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'PySide6', 'pyqtgraph', 'mlx'}))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr[-2000:]

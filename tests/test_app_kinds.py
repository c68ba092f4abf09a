"""Every drafter kind in the app, headless: a Gemma-4 assistant, an EAGLE-3 head and a DFlash 2
head (the miniature writers' layouts) beside a DSpark and a DFlash drafter on one tiny target.
The drafter list names each kind; Compare runs them all, lossless, on the same prompt, its table
and header naming the kinds; an autoregressive drafter's draft rows have no confidences and its
rejected drafts still tell their story; a saved run records the kind and replays with it, and
one saved before kinds opens without; Run ▸ Diagnose diagnoses an EAGLE-3 head without a block
finding and names an assistant made for another Gemma-4 size (``target_refused``)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pytestqt")

import assistant_checkpoints as ac
import dflash2_checkpoints as d2
import drafter_checkpoints as ckpt
import eagle3_checkpoints as e3
from PySide6.QtCore import Qt
from test_app import LONG, run_job
from test_app_support import save_tiny_drafter, shown_window
from test_app_truth import menu_action

from dspark_studio.state import inspector

#: directory name -> the kind the app names it by (dspark.loading.drafter_kind)
KINDS = {
    "assistant": "Gemma-4 assistant",
    "eagle3": "EAGLE-3",
    "dflash2": "DFlash 2",
    "dspark": "DSpark",
    "zlab": "DFlash",
}
PROMPT = "the a of and to in"


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    root = tmp_path_factory.mktemp("kinds")
    model = ckpt.target_model()
    t = ckpt.write_target(root / "target", model)
    table = model.model.embed_tokens.weight
    return {
        "target": t,
        "assistant": ac.write(root / "assistant", t),
        "eagle3": e3.write_eagle3(root / "eagle3", table, ckpt.PROMPT * 4, num_target_layers=6, aux_ids=[2, 4, 6]),
        "dflash2": d2.write_dflash2(root / "dflash2"),
        "dspark": save_tiny_drafter(t, root / "dspark"),
        "zlab": ckpt.write_zlab(root / "zlab"),
        "other_size": ac.write(root / "other_size", t, backbone=128),
    }


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    w = shown_window(qtbot, monkeypatch, tmp_path / "home", (1400, 900))
    yield w
    w.close()
    assert not w.engine.thread.isRunning()


def setup(w, kinds, names, max_tokens=24):
    w.restore(str(kinds["target"]), [str(kinds[n]) for n in names])
    w.controls.prompt.setPlainText(PROMPT)
    w.controls.form.widget("max_tokens").setValue(max_tokens)
    # every draft verified: these tests read each kind's rounds, which auto (the default) may leave
    # to plain steps, and need no costs measured for five drafter shapes
    w.controls.form.widget("policy").setCurrentText("fixed")


def listed(w) -> list[str]:
    return [w.controls.drafters.item(i).text() for i in range(w.controls.drafters.count())]


def test_compare_names_every_kind_and_each_is_lossless(qtbot, window, kinds):
    w = window
    setup(w, kinds, list(KINDS))
    assert run_job(qtbot, w, w.start_compare)["ok"]
    assert listed(w) == [f"{name} · {kind}" for name, kind in KINDS.items()]
    tips = {d.label: d.detail for d in w.session.choices.drafters}
    assert (
        "Gemma-4 assistant drafter (gemma4-assistant), drafts a token a step, 4 a round by default" in tips["assistant"]
    )
    assert "EAGLE-3 drafter (eagle3), drafts a token a step, 5 a round by default" in tips["eagle3"]
    assert "DFlash 2 drafter (dflash2), 7 drafts per round" in tips["dflash2"]
    table = w.results.compare.table
    cells = [table.item(r, 0).text() for r in range(table.rowCount())]
    assert cells == [f"{name} · {kind}" for name, kind in KINDS.items()] + ["plain decoding"]
    assert [table.item(r, 7).text() for r in range(len(KINDS))] == ["✓"] * len(KINDS)  # greedy: identical
    runs = {r.label: r for r in w.session.runs}
    assert {label: runs[label].drafter_kind for label in KINDS} == KINDS
    for name in ("assistant", "eagle3"):  # a token a step: no confidence head
        assert runs[name].rounds and all(e.confidences is None for e in runs[name].rounds)
    assert any(e.confidences is not None for e in runs["dspark"].rounds)  # the DSpark drafter's head
    table.selectRow(0)
    w.refresh()
    assert w.results.header.headline.text().startswith("assistant (Gemma-4 assistant) vs plain decoding")
    w.presenter.enter()  # presentation mode: the same words, larger
    w.refresh()
    assert "(Gemma-4 assistant)" in w.results.header.headline.text()
    w.presenter.leave()


def test_an_autoregressive_run_draws_its_rows_and_its_rejections_tell_their_story(qtbot, window, kinds, tmp_path):
    w = window
    setup(w, kinds, ["eagle3"], max_tokens=40)
    assert run_job(qtbot, w, w.start_run)["ok"]
    assert w.results.header.headline.text() == "eagle3 (EAGLE-3) vs plain decoding"
    assert w.results.header.values["same"].text() == "✓"
    run = next(r for r in w.session.runs if r.method == "speculative")
    grid = w.results.drafts.grid
    found = None
    for row, e in enumerate(run.rounds):
        for k in range(len(e.drafted)):
            if inspector.cell_state(k, e.accepted, e.verify_width) == "rejected":
                found = found or (row, k)
    assert found is not None, "the planted head has rejected drafts"
    row, k = found
    qtbot.mouseClick(grid, Qt.LeftButton, pos=grid.cell_rect(row, k).center())
    story = w.results.story.story
    assert w.results.story.isVisible() and story.state == "rejected" and story.token == run.rounds[row].drafted[k]
    center = grid.cell_rect(row, k).center()
    tip = grid.tip_at(center.x(), center.y())
    assert "draft probability q =" in tip and "confidence" not in tip  # no head: no confidence line
    # the saved run records the kind, and replays with it
    path = w.export_data("json", False, str(tmp_path / "run.json"))
    doc = json.loads(path.read_text())
    assert [r.get("drafter_kind") for r in doc["runs"]] == ["EAGLE-3", None]  # plain decoding has none
    assert run_job(qtbot, w, lambda: w.open_replay([str(path)], "instant"))["ok"]
    assert w.results.header.headline.text().startswith("eagle3 (EAGLE-3) vs plain decoding")
    # a run saved before runs recorded their kind still opens, without one
    for r in doc["runs"]:
        r.pop("drafter_kind")
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    assert run_job(qtbot, w, lambda: w.open_replay([str(old)], "instant"))["ok"]
    assert w.results.header.headline.text().startswith("eagle3 vs plain decoding")


def test_diagnose_runs_an_eagle3_head_and_names_an_assistant_for_another_size(qtbot, window, kinds):
    w = window
    setup(w, kinds, ["eagle3", "other_size"], max_tokens=24)
    w.controls.form.widget("block_size").setValue(8)  # past its default 5: a setting, no trained block
    assert run_job(qtbot, w, w.start_run)["ok"]  # loading marks the assistant refused for this target
    assert listed(w) == ["eagle3 · EAGLE-3", "other_size  ⚠"]
    with qtbot.waitSignal(w.job_finished, timeout=LONG * 2) as sig:
        menu_action(w, "Run", "Diagnose").trigger()
    w.refresh()
    assert sig.args[0]["ok"]
    entries = {e.label: e for e in w.session.diagnoses}
    eagle = entries["eagle3"].diagnosis
    assert eagle is not None and eagle.rounds > 0 and len(eagle.per_position_acceptance) == 8
    assert "block_beyond_trained" not in {f.code for f in eagle.findings}
    refused = entries["other_size"].findings()
    assert [(f.code, f.severity) for f in refused] == [("target_refused", "error")]
    assert "made for a Gemma-4 of hidden size 128" in refused[0].sentence
    html = w.results.diagnosis.label.text()
    assert "target_refused" in html and "not run: it does not load for this target" in html

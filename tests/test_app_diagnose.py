"""Run ▸ Diagnose in the app (#25), headless: ``dspark.diagnose`` runs on the model-owner thread
for the ticked drafters, on the app's prompt and the settings of its form; the findings are
listed beside the plots, the most severe first, each severity a word and a mark as well as a
colour; a healthy pair says so; Stop ends it; a Run during it is refused in one sentence; it
never replaces the runs on screen nor enters the run history.

The pairs: the bundled demo pair (healthy when greedy; sampling and a block past the trained one
planted through the form) and an untrained drafter on the demo target (low_acceptance)."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QThread
from test_app import LONG, ROOT, run_job
from test_app_truth import menu_action

from dspark.cli import main as dspark
from dspark.diagnose.findings import SEVERITIES, Diagnosis, Finding
from dspark.resources import demo_model
from dspark_studio.panes.diagnosis import view_html
from dspark_studio.panes.theme import NORMAL, PRESENTATION
from dspark_studio.state import diagnoses
from dspark_studio.state.diagnoses import HEALTHY, MARKS, Entry
from dspark_studio.state.messages import JobDone, Loaded
from dspark_studio.state.session import Session
from dspark_studio.window.main_window import MainWindow

CHIP = re.compile("(" + "|".join(MARKS.values()) + r")&nbsp;(ERROR|WARN|INFO)")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo target, its DSpark drafter, and an untrained drafter made for the target."""
    target, drafter = demo_model("target"), demo_model("dspark")
    if target is None or drafter is None:
        pytest.skip("the demo models are not built")
    untrained = tmp_path_factory.mktemp("untrained") / "untrained"
    assert dspark(["init", "--target", str(target), "--out", str(untrained), "--seed", "3"]) == 0
    return {"target": str(target), "dspark": str(drafter), "untrained": str(untrained)}


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("DSPARK_STUDIO_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DSPARK_PROFILES_DIR", str(tmp_path / "profiles"))  # never the person's records
    w = MainWindow(prefs=None)
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    yield w
    w.close()
    assert not w.engine.thread.isRunning()


def setup(w, demo, drafters, max_tokens=48, temperature=0.0, block_size=0):
    """The demo target and these drafters (all ticked), the demo set's first prompt, the form's values."""
    w.restore(demo["target"], [demo[d] for d in drafters])
    form = w.controls.form
    form.widget("max_tokens").setValue(max_tokens)
    form.widget("temperature").setValue(temperature)
    form.widget("block_size").setValue(block_size)  # 0: the drafter's own


def diagnose(qtbot, w) -> dict:
    with qtbot.waitSignal(w.job_finished, timeout=LONG * 2) as sig:
        menu_action(w, "Run", "Diagnose").trigger()
    w.refresh()
    return sig.args[0]


def shown_severities(html: str) -> list[str]:
    """The severities of the list's chips, top to bottom."""
    found = CHIP.findall(html)
    assert all(MARKS[word.lower()] == mark for mark, word in found)  # each word with its own mark
    return [word.lower() for _mark, word in found]


def test_a_healthy_pair_is_said_healthy_and_the_diagnosis_runs_on_the_model_owner_thread(
    qtbot, window, demo, monkeypatch, tmp_path
):
    import dspark.diagnose.run as run

    called = []
    real = run.diagnose

    def spy(target, drafter, prompts, settings, **kw):
        called.append((QThread.currentThread().objectName(), list(prompts), settings))
        return real(target, drafter, prompts, settings, **kw)

    monkeypatch.setattr(run, "diagnose", spy)
    w = window
    setup(w, demo, ["dspark"])
    info = diagnose(qtbot, w)
    assert info["ok"] and not info["cancelled"]
    [(thread, prompts, settings)] = called
    assert thread == "dspark-model-owner" and prompts == [w.session.choices.prompt]
    assert settings.max_tokens == 48 and settings.temperature == 0 and settings.block_size is None
    [entry] = w.session.diagnoses
    assert entry.label == "dspark" and entry.what == "1 prompt · 48 tokens · greedy · its own block size"
    assert entry.diagnosis.rounds >= 8 and all(f.severity == "info" for f in entry.diagnosis.findings)
    pane = w.results.diagnosis
    assert pane.isVisible() and not w.results.compare_diagnosis.isVisible()  # the Run tab is on screen
    html = pane.label.text()
    assert "WARN" not in html and "ERROR" not in html
    if not entry.diagnosis.findings:
        assert HEALTHY in html and "✔" in html
    assert w.session.runs == [] and w.session.message == ""  # no run shown was replaced
    assert not list((tmp_path / "home").rglob("*-run.json"))  # nor entered the run history


def test_planted_sampling_and_a_block_past_the_trained_one_are_named_most_severe_first(qtbot, window, demo, tmp_path):
    w = window
    # 96 tokens: enough greedy and sampled rounds for the sampling finding to judge (48 were too few)
    setup(w, demo, ["dspark"], max_tokens=96, temperature=1.0, block_size=12)
    assert run_job(qtbot, w, w.start_run)["ok"]
    shown = [r.serial for r in w.session.runs]
    assert diagnose(qtbot, w)["ok"]
    assert [r.serial for r in w.session.runs] == shown  # the run stays on screen
    assert len(list((tmp_path / "home").rglob("*-run.json"))) == 1  # and the diagnosis is no run of the history
    [entry] = w.session.diagnoses
    found = {f.code: f.severity for f in entry.diagnosis.findings}
    assert found["sampling"] == "warn" and "block_beyond_trained" in found
    html = w.results.diagnosis.label.text()
    severities = shown_severities(html)
    assert severities == [f.severity for f in entry.findings()] == sorted(severities, key=SEVERITIES.index)
    assert severities[0] == "warn" and "<b>sampling</b>" in html and "<b>block_beyond_trained</b>" in html
    assert "temperature 1 · block size 12" in w.results.diagnosis.title.text()  # what it ran with, once
    assert "the Block size setting at 7" in html and "--block-size" not in html  # the app's control, not the flag


def test_each_ticked_drafter_is_diagnosed_in_turn_with_its_own_findings(qtbot, window, demo):
    w = window
    setup(w, demo, ["dspark", "untrained"], max_tokens=128)  # enough rounds to put the untrained one near chance
    assert diagnose(qtbot, w)["ok"]
    good, bad = w.session.diagnoses
    assert (good.label, bad.label) == ("dspark", "untrained")
    assert [f.severity for f in good.diagnosis.findings if f.severity != "info"] == []
    assert [(f.code, f.severity) for f in bad.findings() if f.severity != "info"] == [("low_acceptance", "error")]
    html = w.results.diagnosis.label.text()
    assert html.index("<b>dspark</b>") < html.index("<b>untrained</b>") < html.index("<b>low_acceptance</b>")
    assert html.count("■") == 2  # each drafter's colour, as in the Compare table
    assert w.results.compare_diagnosis.label.text() == html  # the same list beside the Compare tab's plots


def test_stop_ends_a_diagnosis_and_a_run_meanwhile_is_refused_in_one_sentence(qtbot, window, demo):
    w = window
    setup(w, demo, ["dspark"], max_tokens=2000)
    with qtbot.waitSignal(w.job_finished, timeout=LONG * 2) as sig:
        menu_action(w, "Run", "Diagnose").trigger()
        qtbot.waitUntil(lambda: w.session.progress is not None, timeout=LONG)  # the worker is diagnosing
        w.refresh()
        assert not w.actions.run_b.isEnabled() and w.actions.stop_b.isEnabled()
        assert w.results.progress.isVisible() and "diagnosing dspark" in w.results.progress.label.text()
        assert "diagnosing …" in w.results.diagnosis.label.text()
        w.start_run()  # Ctrl+R, or Space in presentation mode
        assert w.session.message == diagnoses.RUN_REFUSED and w.session.job.kind == diagnoses.KIND
        menu_action(w, "Run", "Diagnose").trigger()
        assert w.session.message == diagnoses.BUSY_DIAGNOSING
        w.refresh()
        assert w.results.message.text() == diagnoses.BUSY_DIAGNOSING
        w.stop()
    assert sig.args[0]["cancelled"]
    w.refresh()
    [entry] = w.session.diagnoses
    assert entry.diagnosis is None and entry.ended == "stopped"  # 2,000 tokens were not generated
    assert "stopped" in w.results.diagnosis.label.text() and w.results.progress.isHidden()
    assert w.actions.run_b.isEnabled()
    w.controls.form.widget("max_tokens").setValue(8)
    info = run_job(qtbot, w, w.start_run)  # and Run works again
    assert info["ok"] and [r.method for r in w.session.runs] == ["speculative", "plain"]
    assert w.session.diagnoses == [entry]  # a run leaves the diagnosis beside its plots


def _entry(*findings: Finding) -> Entry:
    return Entry(
        label="d",
        drafter="/models/d",
        target="/models/t",
        what="1 prompt",
        diagnosis=Diagnosis(
            findings=tuple(findings),
            per_position_acceptance=(0.5, 0.2),
            expected_per_position=(0.8, 0.6),
            tau=1.7,
            rounds=20,
            prompts=1,
            profile_source="training",
        ),
    )


def test_the_list_orders_by_severity_and_names_the_app_s_controls():
    """Whatever order the findings come in, the most severe first; a sentence's command-line advice
    becomes the form's control."""
    entry = _entry(
        Finding("sampling", "info", "costs 6%: lower it"),
        Finding("block_beyond_trained", "warn", "--block-size 12 is past 7: use --block-size 7"),
        Finding("low_acceptance", "error", "does not fit"),
        Finding("chat_template_off", "warn", "off (--ignore-chat-template): drop --ignore-chat-template"),
    )
    view = dataclasses.replace(Session().view(), diagnoses=(entry,))
    for theme in (NORMAL, PRESENTATION):
        html = view_html(view, theme)
        assert shown_severities(html) == ["error", "warn", "warn", "info"]
        assert html.index("low_acceptance") < html.index("chat_template_off") < html.index("sampling")
    assert "the Block size setting at 12 is past 7: use the Block size setting at 7" in html
    assert "(the Chat template setting off): tick the Chat template setting" in html and "--" not in html
    assert "first draft accepted in 50% (its profile: 80%)" in html
    assert HEALTHY in view_html(dataclasses.replace(view, diagnoses=(_entry(),)), NORMAL)


def test_a_diagnosis_that_cannot_start_is_one_sentence_and_another_target_s_is_dropped():
    s = Session({"set": ["a prompt"]})
    assert s.diagnose_job() is None and "no target model chosen" in s.message
    s.choices.set_target("/models/t")
    assert s.diagnose_job() is None and s.message == diagnoses.NO_DRAFTER
    s.choices.add_drafter("/models/d")  # not a directory here: marked, so nothing to diagnose
    assert s.diagnose_job() is None and s.message == diagnoses.NO_DRAFTER
    s.choices.mark("/models/d", None)
    s.choices.tick("/models/d", True)
    run = s.run_job()
    assert run is not None and s.diagnose_job() is None and s.message == diagnoses.BUSY_RUN
    s.apply(JobDone(run.id, True, False))
    job = s.diagnose_job()
    assert job.kind == diagnoses.KIND and [a.drafter for a in job.arms] == ["/models/d"] and s.message == ""
    s.apply(JobDone(job.id, False, False))
    assert [e.ended for e in s.diagnoses] == ["not diagnosed"]
    s.loaded(Loaded(target="/models/t", target_id="id", drafters={}, errors={}))
    assert len(s.view().diagnoses) == 1
    s.loaded(
        Loaded(target="/models/other", target_id="id", drafters={}, errors={})
    )  # another target loaded: that diagnosis is not of it
    assert s.view().diagnoses == ()


def test_the_screenshot_run_diagnoses_after_its_run(demo, tmp_path):
    png, home = tmp_path / "diagnosis.png", tmp_path / "home"
    cmd = [
        sys.executable,
        "-m",
        "dspark_studio",
        "--target",
        demo["target"],
        "--drafter",
        demo["dspark"],
        "--max-tokens",
        "32",
        "--temperature",
        "1",
        "--block-size",
        "9",
        "--diagnose",
        "--size",
        "1280x800",
        "--screenshot",
        str(png),
        "--timeout",
        "240",
    ]
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "DSPARK_STUDIO_HOME": str(home),
        "DSPARK_PROFILES_DIR": str(tmp_path / "profiles"),
    }
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0 and png.stat().st_size > 10_000, r.stderr[-2000:]
    assert len(list((home / "data" / "runs").glob("*-run.json"))) == 1  # the run kept, the diagnosis not a run
    helptext = subprocess.run(
        [sys.executable, "-m", "dspark_studio", "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT
    ).stdout
    for option in ("--diagnose", "--temperature", "--block-size"):
        assert option in helptext
    assert "(default: off)" in helptext and "else the drafter's own)" in helptext


def test_a_narrow_plot_labels_every_kth_position(qtbot):
    """Beside the diagnosis the plots narrow: 12 draft positions labelled side by side ran together
    ("91011"); a tick stays at each, the labels thin out to what fits, and come back when wide."""
    from dspark_studio.panes.plots import integer_ticks, make_plot, style_plot

    w = make_plot("Acceptance by position", "rate", "draft position k")
    qtbot.addWidget(w)
    style_plot(w, NORMAL)
    w.show()
    for width, every in ((900, 1), (140, None)):
        w.resize(width, 300)
        integer_ticks(w, range(1, 13))
        labelled, unlabelled = w.getAxis("bottom")._tickLevels
        assert sorted(v for v, _ in labelled + unlabelled) == list(range(1, 13))  # a tick at every position
        if every == 1:
            assert [s for _v, s in labelled] == [str(v) for v in range(1, 13)]
        else:
            assert 1 < len(labelled) < 12 and labelled[0] == (1.0, "1")

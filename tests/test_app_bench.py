"""The app and ``dspark bench`` share one format: a comparison saves as a benchmark, a
benchmark (the app's or ``dspark bench``'s) opens on the Compare tab, and the costs the auto
policy schedules by are drawn there. Headless, on tiny random models."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

pytest.importorskip("pytestqt")

from test_app import LONG, dirs, run_job, setup, window  # noqa: F401  (shared fixtures)

from dspark.bench import report
from dspark.cli import main
from dspark_studio.files import benchmark
from dspark_studio.state.runs import PLAIN_LABEL
from dspark_studio.state.session import COMPARE_TAB

pytestmark = pytest.mark.usefixtures("costs_measured_once")  # benchmarks need costs; test_policy tests measuring


def _table(w) -> list[list[str]]:
    t = w.results.compare.table
    return [[t.item(r, c).text() for c in range(t.columnCount())] for r in range(t.rowCount())]


def test_an_auto_comparison_draws_its_costs_saves_as_a_benchmark_and_opens_again(qtbot, window, dirs, tmp_path):
    w = window
    setup(w, dirs, drafters=("drafter", "drafter2"), max_tokens=10)
    w.controls.form.widget("policy").setCurrentText("auto")
    assert run_job(qtbot, w, w.start_compare)["ok"]
    live = {r["label"]: r for r in w.results.compare.rows}
    # the scheduler's costs reached the window and are drawn, one verify curve per drafter
    assert set(w.session.costs) == {str(dirs["drafter"]), str(dirs["drafter2"])}
    assert not w.results.compare.boxes[2].isHidden()
    curves = [c for c in w.results.compare.costs.getPlotItem().listDataItems()]
    assert sorted(len(c.getData()[0]) for c in curves) == [4, 5]  # block sizes 3 and 4: widths 0..G

    out = w.save_comparison(str(tmp_path / "saved"))
    doc = json.loads(out.read_text())
    assert [a["arm"] for a in doc["arms"]] == ["drafter auto", "drafter2 auto", "plain"]
    trials = report.read_trials(tmp_path / "saved")
    assert len(trials) == 3 and (tmp_path / "saved" / "trials.csv").is_file()
    for arm in doc["arms"][:2]:
        row = live[arm["drafter"]]
        assert arm["speedup"] == pytest.approx(row["speedup"])  # one prompt: the app's figure, unchanged
        assert arm.get("tau", 0.0) == pytest.approx(row["tau"])  # auto may decode these tiny drafters' all plainly
        assert arm["identical"] == arm["compared"] == 1
        assert arm["limit"] > 0 and arm["efficiency"] == pytest.approx(arm["speedup"] / arm["limit"])
    assert set(doc["costs"]) == {"drafter", "drafter2"} and doc["environment"]["mlx"]

    # saving again never overwrites: one message, the first result intact
    before = out.read_text()
    assert w.save_comparison(str(tmp_path / "saved")) is None
    assert "already holds" in w.results.message.text() and out.read_text() == before

    assert w.open_replay([str(out)])  # File ▸ Open run or benchmark…
    assert w.session.tab == COMPARE_TAB and w.session.bench is not None
    rows = _table(w)
    assert [r[0] for r in rows] == ["drafter auto", "drafter2 auto", PLAIN_LABEL]
    assert rows[0][2] == f"{doc['arms'][0].get('tau', 0.0):.2f}" and rows[0][1] == "1×1"
    assert rows[0][5] == f"{doc['arms'][0]['speedup']:.2f}×" and rows[0][7] == "✓"
    assert "dspark bench" in w.results.header.headline.text() and "BENCHMARK" in w.results.header.mode.text()
    assert w.results.compare.boxes[1].isHidden()  # a benchmark keeps no tokens/sec curves

    # the next comparison takes the Compare tab back
    w.controls.form.widget("policy").setCurrentText("fixed")
    assert run_job(qtbot, w, w.start_compare)["ok"]
    assert w.session.bench is None and [r["label"] for r in w.results.compare.rows][0] == "drafter"


def test_a_dspark_bench_result_opens_on_the_compare_tab(qtbot, window, dirs, tmp_path):
    out = tmp_path / "bench"
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps(["the a of and to in"]))
    assert (
        main(
            [
                "bench",
                "--target",
                str(dirs["target"]),
                "--drafter",
                str(dirs["drafter"]),
                "--prompts",
                str(prompts),
                "--max-tokens",
                "8",
                "--repeats",
                "1",
                "--policy",
                "fixed:2",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    doc = json.loads((out / "summary.json").read_text())
    w = window
    assert w.open_bench(str(out))  # the folder, or its summary.json
    rows = _table(w)
    assert [r[0] for r in rows] == [PLAIN_LABEL, "drafter fixed:2"]
    arm = doc["arms"][1]
    assert rows[1][4] == f"{arm['tokens_per_sec']:.1f}" and rows[1][3] == f"{arm['acceptance_rate']:.0%}"
    assert w.results.compare.boxes[2].isVisible() or not w.results.compare.isVisible()  # its measured costs
    assert "median of 1 trials" in w.results.compare.table.item(1, 5).toolTip()
    # the header's speedup is a median of trial ratios beside medians of rates: it says so
    w.refresh()
    h = w.results.header
    assert h.values["speedup"].text() == f"{arm['speedup']:.2f}×" and "median of trials" in h.captions["speedup"].text()


@pytest.mark.parametrize(
    "content, says",
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"arms": "x"}), "no arms"),
        (json.dumps({"arms": [{"arm": "plain"}], "environment": {}}), "damaged"),
    ],
)
def test_a_bad_benchmark_file_is_one_message_and_changes_nothing(window, tmp_path, content, says):
    w = window
    bad = tmp_path / "summary.json"
    bad.write_text(content)
    before = w.session.view()
    assert not w.open_bench(str(bad))
    assert says in w.results.message.text() and w.session.bench is None
    assert replace(w.session.view(), message="") == replace(before, message="")  # only the message is new
    with pytest.raises(Exception, match=says):
        benchmark.read_bench(bad)


def test_measure_costs_asks_the_worker_and_draws_what_it_measured(qtbot, window, dirs):
    w = window
    setup(w, dirs, drafters=("drafter",))
    assert w.measure_costs()
    qtbot.waitUntil(lambda: str(dirs["drafter"]) in w.session.costs, timeout=LONG)
    w.refresh()
    costs = w.session.costs[str(dirs["drafter"])]
    assert len(costs["verify_ms"]) == 5 and costs["draft_ms"] > 0 and costs["step_ms"] > 0
    assert len(w.results.compare.costs.getPlotItem().listDataItems()) == 1
    assert "plain step" in w.results.compare.costs.getPlotItem().titleLabel.text


def test_a_benchmark_opens_headless_for_a_screenshot(dirs, tmp_path):
    """``dspark-studio --replay summary.json --screenshot`` (docs/make_screenshots.sh) draws the
    benchmark on the Compare tab and exits 0 at once: nothing runs, so nothing is awaited."""
    import subprocess
    import sys

    from test_app import _env

    out = tmp_path / "bench"
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps(["the a of and to in"]))
    # the benchmark made in this process (its costs measured once: costs_measured_once), drawn in the app's own
    assert (
        main(
            [
                "bench",
                "--target",
                str(dirs["target"]),
                "--drafter",
                str(dirs["drafter"]),
                "--prompts",
                str(prompts),
                "--max-tokens",
                "8",
                "--repeats",
                "1",
                "--policy",
                "fixed",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    shot = tmp_path / "bench.png"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "dspark_studio",
            "--replay",
            str(out / "summary.json"),
            "--screenshot",
            str(shot),
            "--size",
            "1280x800",
            "--timeout",
            "60",
        ],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    from PySide6.QtGui import QImage

    img = QImage(str(shot))
    assert (img.width(), img.height()) == (1280, 800)

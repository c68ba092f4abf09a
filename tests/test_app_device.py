"""The app's first launch on a Mac whose GPU computes wrong numbers or fails: it checks the GPU
against the CPU in a child process before anything imports mlx-lm, says what it found in one
sentence, computes on the CPU, and reports the check in About and in every saved run's
environment. No GPU here, so the child's GPU is a test double (``tests/gpu_double.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FIRST_LAUNCH = r"""
import json, os, sys
from PySide6.QtWidgets import QApplication, QLabel
app = QApplication(sys.argv[:1])
from dspark import device
from dspark_studio import startup

seen, real_ask = {}, device.ask_child
def ask_child():
    seen["mlx_lm_imported_before"] = any(m == "mlx_lm" or m.startswith("mlx_lm.") for m in sys.modules)
    return real_ask([sys.executable, sys.argv[1], sys.argv[2]], timeout=300)

device.ask_child = ask_child
device.needs_check = lambda: True  # as on a Mac: MLX's default device is a GPU
args = startup.build_parser().parse_args(["--screenshot", "unused.png"])
app, win, target = startup.open_window(args, prefs_wanted=False)
win.show_about()
notes = [l.text() for l in win.statusBar().findChildren(QLabel) if "computing on the CPU" in l.text()]
print(json.dumps({**seen, "env": os.environ.get("DSPARK_DEVICE"), "status": win.statusBar().currentMessage(),
                  "notes": notes, "about": win.about_box.text(), "current": device.describe_current()}), flush=True)
win.close()
"""


def first_launch(tmp_path: Path, mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DSPARK_DEVICE"}
    env.update(QT_QPA_PLATFORM="offscreen", DSPARK_STUDIO_HOME=str(tmp_path / "home"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    r = subprocess.run(
        [sys.executable, "-c", FIRST_LAUNCH, str(ROOT / "tests" / "gpu_double.py"), mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_gpu_that_computes_wrong_numbers_sends_the_app_to_the_cpu_with_one_sentence(tmp_path):
    seen = first_launch(tmp_path, "zeros")
    assert seen["mlx_lm_imported_before"] is False  # the device could still be chosen for mlx-lm's stream
    assert seen["env"] == "cpu" and seen["current"]["device"] == "cpu" and seen["current"]["outcome"] == "wrong"
    sentence = seen["current"]["sentence"]
    assert "computed other numbers than the CPU" in sentence and "computes on the CPU" in sentence
    assert seen["status"] == sentence and seen["notes"] == [
        "⚠ computing on the CPU: the GPU check failed (Help ▸ About)"
    ]
    assert "Computes on: CPU" in seen["about"] and f"GPU check: {sentence}" in seen["about"]
    assert "unknown" not in seen["about"] and "MLX 0." in seen["about"]
    kept = json.loads((tmp_path / "home" / "data" / "device-check.json").read_text())
    assert kept["outcome"] == "wrong"  # the next launch does not ask again (tests/test_device_check.py)


def test_a_gpu_that_crashes_the_check_is_said_too(tmp_path):
    seen = first_launch(tmp_path, "crashes")
    assert seen["env"] == "cpu" and seen["current"]["outcome"] == "failed"
    assert "the GPU check crashed (signal SIGSEGV" in seen["status"]


def test_a_gpu_that_agrees_is_used_and_nothing_is_said(tmp_path):
    seen = first_launch(tmp_path, "honest")
    assert seen["env"] is None and seen["current"]["device"] == "gpu" and seen["current"]["outcome"] == "agrees"
    assert seen["notes"] == [] and "GPU check: this GPU (test double) computes what the CPU computes" in seen["about"]


def test_every_saved_run_carries_the_check_and_opens_again(tmp_path, monkeypatch):
    from dspark import device
    from dspark.bench.report import environment
    from dspark.errors import DsparkError
    from dspark_studio.files import run_export
    from dspark_studio.files.checking import check_document

    wrong = device.DeviceCheck(outcome="wrong", device="cpu", sentence="this GPU is wrong, so the CPU", gpu="Apple M9")
    monkeypatch.setitem(device._current, "check", wrong)
    env = environment()
    assert env["device_check"] == {
        "outcome": "wrong",
        "device": "cpu",
        "gpu": "Apple M9",
        "sentence": "this GPU is wrong, so the CPU",
    }
    run = run_export.Run(key=1, label="plain", method="plain", drafter=None, prompt="p", prompt_index=0, config={})
    doc = run_export.document([run], "target", False, environment=env)
    assert doc["environment"]["device_check"]["sentence"] == "this GPU is wrong, so the CPU"
    path = run_export.write_json(tmp_path / "run.json", [run], "target", environment=env)
    saved = json.loads(path.read_text())
    assert saved["environment"] == json.loads(json.dumps(env))
    try:
        check_document(saved, "run.json")
    except DsparkError as e:  # a run with no rounds may be refused, never for its environment
        assert "environment" not in str(e), e
    saved["environment"] = ["not", "an", "object"]
    try:
        check_document(saved, "run.json")
        raise AssertionError("a damaged environment was accepted")
    except DsparkError as e:
        assert "environment" in str(e)

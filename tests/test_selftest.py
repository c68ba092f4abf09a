"""What a person's first contact with an install meets: ``dspark-studio --self-test`` (the check
CI runs on every bundle), the window icon found through ``dspark.resources``, and the first start
on the demo models."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_window_icon_is_found_through_resources():
    from dspark import resources

    png = resources.path("icons", "dspark-studio.png").read_bytes()
    assert struct.unpack(">II", png[16:24]) == (256, 256)


def test_self_test_runs_the_demo_pair_and_says_what_ran():
    import mlx.core as mx

    from dspark import selftest

    ok, line = selftest.check()
    kind, name = selftest.computed_on()
    assert kind == ("gpu" if mx.default_device().type == mx.gpu else "cpu")
    assert name and f"device {kind} ({name})" in line, line  # the device MLX computed on, named
    if sys.platform == "darwin" and kind == "cpu":  # DSPARK_DEVICE=cpu on a Mac: the CPU asked for, said
        assert ok and "Metal not exercised: the CPU was asked for" in line, line
        return
    assert ok, line
    if sys.platform == "darwin":
        assert "checked against the CPU" in line and "BLAS Accelerate / Metal" in line, line
    for part in ("BLAS ", f"{selftest.TOKENS} tokens", "tau ", "speedup ", "identical to plain"):
        assert part in line, line


@pytest.mark.parametrize("asked", [False, True])
def test_on_a_mac_the_cpu_passes_only_when_asked_for_and_then_says_metal_was_not_exercised(monkeypatch, asked):
    """The macOS branch, run here: CI on a runner whose GPU does not compute asks for the CPU
    (``--device cpu``), and the line must say that Metal was not exercised; a Mac that computed on
    the CPU without being asked has no GPU for MLX, and fails."""
    import mlx.core as mx

    from dspark import device, selftest

    if mx.default_device().type == mx.gpu:
        pytest.skip("the default device is a GPU here")
    if asked:
        monkeypatch.setenv(device.ENV, "cpu")
    else:
        monkeypatch.delenv(device.ENV, raising=False)
    ok, line = selftest.check(tokens=8, platform="darwin")
    if asked:
        assert ok and "device cpu" in line and "Metal not exercised: the CPU was asked for (--device cpu)" in line, line
    else:
        assert not ok and "computed on the CPU, not on Metal" in line, line


def test_a_gpu_that_computes_garbage_fails_the_self_test_loudly():
    """A virtual GPU has been seen returning zeros from compute kernels; spec and plain decoding
    would then agree with each other, so the device is checked against the CPU (a test double of
    the GPU's decode here: this machine has none)."""
    import mlx.core as mx

    from dspark import gpu_check, load_target, resources, selftest

    target = load_target(resources.demo_model("target"))
    ids = target.encode(selftest.held_out_prompt())[:16]
    if mx.default_device().type != mx.gpu:
        assert selftest.device_check(target.model, ids) == (None, "the CPU (nothing to compare)")
    n = gpu_check.CHECK_TOKENS
    honest = lambda: gpu_check.greedy_on(target.model, ids, tokens=n, device=mx.Device(mx.cpu))
    why, found = selftest.device_check(target.model, ids, run_gpu=honest)
    assert why is None and "computes what the CPU computes" in found  # the same numbers: fine
    zeros = lambda: gpu_check.Decoded(tokens=[0] * n, logprobs=[mx.zeros((target.dims.vocab_size,))] * n)
    why, found = selftest.device_check(target.model, ids, run_gpu=zeros)
    assert why == found and "computed other numbers than the CPU" in why, why


def test_self_test_fails_with_the_reason_when_demo_models_are_missing(tmp_path, monkeypatch):
    from dspark import resources, selftest

    monkeypatch.setenv("DSPARK_RESOURCES", str(tmp_path))
    resources.root.cache_clear()
    try:
        ok, line = selftest.check()
    finally:
        monkeypatch.delenv("DSPARK_RESOURCES")
        resources.root.cache_clear()
    assert not ok and "demo model(s) missing" in line and "target, dspark" in line


FIRST_START = r"""
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QLabel, QMainWindow
app = QApplication(sys.argv[:1])
def report():
    win = next(w for w in app.topLevelWidgets() if isinstance(w, QMainWindow))
    # the first start's hint stands above the choices (it took the status bar's room before)
    hint = win.controls.hint
    hints = [hint.text()] if hint.isVisibleTo(win) and "Open target" in hint.text() else []
    print("target:", win.controls.target_path(), flush=True)
    print("hint:", hints, flush=True)
    win.close()
QTimer.singleShot(300, report)
from dspark_studio.main import main
sys.exit(main([]))
"""


def test_first_start_opens_on_the_demo_models_and_says_how_to_open_ones_own(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", DSPARK_STUDIO_HOME=str(tmp_path / "home"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    runs = [
        subprocess.run([sys.executable, "-c", FIRST_START], env=env, capture_output=True, text=True, timeout=300)
        for _ in range(2)
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
        assert "resources/demo/target" in r.stdout
    assert "File ▸ Open target…" in runs[0].stdout and "Add drafter…" in runs[0].stdout
    assert "hint: []" in runs[1].stdout  # settings were saved on quit: no longer a first start

"""What a person's first contact with an install meets: ``dspark-studio --self-test`` (the check
CI runs on every bundle), the window icon found through ``dspark.resources``, and the first start
on the demo models."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

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
    if sys.platform == "darwin" and kind == "cpu":  # DSPARK_DEVICE=cpu on a Mac: the app is built for Metal
        assert not ok and "computed on the CPU, not on Metal" in line, line
        return
    assert ok, line
    if sys.platform == "darwin":
        assert "checked against the CPU" in line and "BLAS Accelerate / Metal" in line, line
    for part in ("BLAS ", f"{selftest.TOKENS} tokens", "tau ", "speedup ", "identical to plain"):
        assert part in line, line


def test_a_gpu_that_computes_garbage_fails_the_self_test_loudly(monkeypatch):
    """A virtual GPU has been seen returning zeros from compute kernels; spec and plain decoding
    would then agree with each other, so the device is checked against the CPU."""
    import mlx.core as mx

    from dspark import load_target, resources, selftest

    target = load_target(resources.demo_model("target"))
    ids = target.encode(selftest.held_out_prompt())[:16]
    assert selftest.device_check(target.model, ids, mx.Device(mx.cpu)) is None  # the CPU is not checked against itself
    honest = selftest.logits_on
    monkeypatch.setattr(selftest, "logits_on", lambda model, ids, device: honest(model, ids, mx.Device(mx.cpu)))
    assert selftest.device_check(target.model, ids, mx.Device(mx.gpu)) is None  # the same logits: fine
    monkeypatch.setattr(selftest, "logits_on", lambda model, ids, device: (
        mx.zeros((target.dims.vocab_size,)) if device.type == mx.gpu else honest(model, ids, mx.Device(mx.cpu))))
    why = selftest.device_check(target.model, ids, mx.Device(mx.gpu))
    assert why and "the GPU computed other logits than the CPU" in why


def test_self_test_fails_with_the_reason_when_demo_models_are_missing(tmp_path, monkeypatch):
    from dspark import resources
    from dspark import selftest

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
    hints = [l.text() for l in win.statusBar().findChildren(QLabel) if "Open target" in l.text()]
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
    runs = [subprocess.run([sys.executable, "-c", FIRST_START], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
        assert "resources/demo/target" in r.stdout
    assert "File ▸ Open target…" in runs[0].stdout and "Add drafter…" in runs[0].stdout
    assert "hint: []" in runs[1].stdout  # settings were saved on quit: no longer a first start

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
    from dspark import selftest

    ok, line = selftest.check()
    assert ok, line
    for part in ("device cpu", "BLAS ", f"{selftest.TOKENS} tokens", "tau ", "speedup ", "identical to plain"):
        assert part in line, line


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

"""What a person's first contact with an install meets: ``dspark-studio --self-test`` (the check
CI runs on every bundle) and the window icon found through ``dspark.resources``."""

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
    from dspark_studio import selftest

    ok, line = selftest.check()
    assert ok, line
    for part in ("device cpu", "BLAS ", f"{selftest.TOKENS} tokens", "tau ", "speedup ", "identical to plain"):
        assert part in line, line


def test_self_test_fails_with_the_reason_when_demo_models_are_missing(tmp_path, monkeypatch):
    from dspark import resources
    from dspark_studio import selftest

    monkeypatch.setenv("DSPARK_RESOURCES", str(tmp_path))
    resources.root.cache_clear()
    try:
        ok, line = selftest.check()
    finally:
        monkeypatch.delenv("DSPARK_RESOURCES")
        resources.root.cache_clear()
    assert not ok and "demo model(s) missing" in line and "target, dspark" in line


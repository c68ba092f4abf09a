"""``dspark bench --plot``: the figures are drawn by the app's plotting code in a separate
process (``python -m dspark_studio.figures``), so the library never imports Qt."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from ..errors import DsparkError


def plot(folder: Path, say=None) -> list[Path]:
    if importlib.util.find_spec("dspark_studio") is None or importlib.util.find_spec("pyqtgraph") is None:
        raise DsparkError("--plot draws with the app's plotting code, which is not installed here "
                          "(PySide6 and pyqtgraph, as pyproject.toml lists them); the results are in " + str(folder))
    env = dict(os.environ)
    if not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        env["QT_QPA_PLATFORM"] = "offscreen"
    r = subprocess.run([sys.executable, "-m", "dspark_studio.figures", str(folder)], capture_output=True, text=True,
                       env=env, timeout=300)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise DsparkError(f"drawing the figures failed ({last}); the results are in {folder}")
    return [Path(line) for line in r.stdout.splitlines() if line.strip()]

"""Where things are kept: QSettings for UI state and recent folders, platformdirs for run
history and exports, and the bundled demo models.

``DSPARK_STUDIO_HOME`` (a folder) redirects both, so tests and screenshots never touch a
person's own settings.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QSettings

from dspark import resources

ORG, APP = "DSpark", "DSpark Studio"
RECENT_MAX = 8
# The run history keeps the newest jobs only: at most this many files and megabytes (about
# 140 KB a run). Settings keys history/keep and history/max_mb override them.
HISTORY_KEEP = 200
HISTORY_MAX_MB = 50


def _home() -> Path | None:
    h = os.environ.get("DSPARK_STUDIO_HOME")
    return Path(h) if h else None


def data_dir() -> Path:
    home = _home()
    if home is not None:
        p = home / "data"
    else:
        from platformdirs import user_data_dir

        p = Path(user_data_dir("dspark-studio", ORG))
    p.mkdir(parents=True, exist_ok=True)
    return p


def history_dir() -> Path:
    p = data_dir() / "runs"
    p.mkdir(parents=True, exist_ok=True)
    return p


def exports_dir() -> Path:
    """Where export dialogs start (the home folder when the data folder cannot be made)."""
    try:
        p = data_dir() / "exports"
        p.mkdir(parents=True, exist_ok=True)
        return p
    except OSError:
        return Path.home()


def demo_target() -> str | None:
    p = resources.demo_model("target")
    return str(p) if p else None


def demo_drafters() -> list[str]:
    return [str(p) for p in map(resources.demo_model, ("dspark", "dflash")) if p]


class Settings:
    """Typed access to the app's QSettings."""

    def __init__(self):
        home = _home()
        if home is not None:
            home.mkdir(parents=True, exist_ok=True)
            self.q = QSettings(str(home / "settings.ini"), QSettings.IniFormat)
        else:
            self.q = QSettings(ORG, APP)

    def get(self, key: str, default, kind=None):
        kind = kind or type(default)
        try:
            v = self.q.value(key, default, type=kind)
        except (TypeError, ValueError):
            return default
        # A hand-edited file can hold anything: a value of another kind is treated as unset.
        return v if isinstance(v, kind) else default

    def set(self, key: str, value) -> None:
        self.q.setValue(key, value)

    def section(self, name: str) -> dict[str, str]:
        """Every ``name/key`` value, as the strings the file holds (empty ones left out)."""
        prefix = name + "/"
        out = {}
        for k in self.q.allKeys():
            if k.startswith(prefix):
                v = self.get(k, "", str)
                if v not in (None, ""):
                    out[k[len(prefix):]] = v
        return out

    def recent(self, kind: str) -> list[str]:
        return [p for p in self.get(f"recent/{kind}", [], list) if isinstance(p, str)]

    def add_recent(self, kind: str, path: str) -> list[str]:
        items = [path] + [p for p in self.recent(kind) if p != path]
        self.set(f"recent/{kind}", items[:RECENT_MAX])
        return items[:RECENT_MAX]

    def sync(self) -> None:
        self.q.sync()

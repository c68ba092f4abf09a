"""Where things are kept: QSettings for UI state and recent folders, platformdirs for run
history and exports, and the bundled demo models.

``DSPARK_STUDIO_HOME`` (a folder) redirects both, so tests and screenshots never touch a
person's own settings.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from pathlib import Path

from platformdirs import user_data_dir
from PySide6.QtCore import QSettings

from dspark import resources
from dspark.errors import printable

ORG, APP = "DSpark", "DSpark Studio"
RECENT_MAX = 8
# The run history keeps the newest jobs only: at most this many files and megabytes (about
# 140 KB a run). Settings keys history/keep and history/max_mb override them.
HISTORY_KEEP = 200
HISTORY_MAX_MB = 50
TRAINING_KEY = "train/last_run"


def _home() -> Path | None:
    h = os.environ.get("DSPARK_STUDIO_HOME")
    return Path(h) if h else None


def data_dir() -> Path:
    home = _home()
    if home is not None:
        p = home / "data"
    else:
        p = Path(user_data_dir("dspark-studio", ORG))
    p.mkdir(parents=True, exist_ok=True)
    return p


def history_dir() -> Path:
    p = data_dir() / "runs"
    p.mkdir(parents=True, exist_ok=True)
    return p


def trained_dir() -> Path:
    """Where the Train tab's runs are written unless the person chooses another folder."""
    return data_dir() / "drafters"


def training_output(name: str) -> Path:
    """The file a training run's printed output goes to: not in its folder, which ``dspark
    train`` wants empty when it starts."""
    return data_dir() / "training" / f"{name}.log"


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
    return resources.demo_drafters()


#: A settings file larger than this was not written by the app.
MAX_SETTINGS_BYTES = 16 * 2**20


def settings_files() -> list[Path]:
    """The files QSettings reads for the app's settings (where they are files: not macOS's
    preferences daemon, not Windows' registry), the app's own first."""
    home = _home()
    if home is not None:
        return [home / "settings.ini"]
    if sys.platform == "darwin" or os.name == "nt":
        return []
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    system = [Path(d) for d in (os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":") if d]
    return [folder / name for folder in (config, *system) for name in (f"{ORG}/{APP}.conf", f"{ORG}.conf")]


def unreadable_settings() -> str | None:
    """Why the settings files cannot be read safely, or None: QSettings opens them as they are,
    so a FIFO would block the app before its window appears, and a link to /dev/zero would never
    end. Only regular files of a sane size are read."""
    for f in settings_files():
        try:
            st = f.stat()  # follows links
        except FileNotFoundError:
            continue
        except OSError as e:
            return f"{f} cannot be read ({e.strerror or e})"
        if not stat.S_ISREG(st.st_mode):
            return f"{f} is not a regular file"
        if st.st_size > MAX_SETTINGS_BYTES:
            return f"{f} is {st.st_size / 2**20:.0f} MiB, too large for a settings file"
    return None


class Settings:
    """Typed access to the app's QSettings. When its files cannot be read safely
    (:func:`unreadable_settings`), the app starts on default settings kept in a temporary file for
    this session, and ``problem`` says why (printed once on stderr)."""

    def __init__(self):
        home = _home()
        self.problem = unreadable_settings()
        if self.problem is not None:
            self.problem = f"{self.problem}: settings are not read or kept this session"
            print(f"dspark-studio: {printable(self.problem)}", file=sys.stderr)
            fd, spare = tempfile.mkstemp(prefix="dspark-studio-settings-", suffix=".ini")
            os.close(fd)
            self.q = QSettings(spare, QSettings.IniFormat)
        elif home is not None:
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
                    out[k[len(prefix) :]] = v
        return out

    def recent(self, kind: str) -> list[str]:
        return [p for p in self.get(f"recent/{kind}", [], list) if isinstance(p, str)]

    def add_recent(self, kind: str, path: str) -> list[str]:
        items = [path] + [p for p in self.recent(kind) if p != path]
        self.set(f"recent/{kind}", items[:RECENT_MAX])
        return items[:RECENT_MAX]

    def training_run(self) -> dict:
        """The Train tab's last run: its folder, command, output file and process id."""
        try:
            doc = json.loads(self.get(TRAINING_KEY, "", str) or "{}")
        except ValueError:
            return {}
        return doc if isinstance(doc, dict) and isinstance(doc.get("out"), str) else {}

    def keep_training_run(self, record: dict) -> None:
        self.set(TRAINING_KEY, json.dumps(record))
        self.q.sync()  # a crash of the app must not lose which run it started

    def sync(self) -> None:
        self.q.sync()

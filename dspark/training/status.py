"""What a training run says of itself for a program watching it (the app's Train tab):
``OUT/.train/status.json``, rewritten whole (under a temporary name, then renamed) at each change
of phase and when the process ends, so a reader never sees half of it:

``{"state": ..., "step": ..., "steps": ..., "message": ..., "pid": ..., "command": [...]}``, the
state one of :data:`STATES`, ``command`` the ``dspark`` arguments that last ran it (``["train",
...]``: a program that opens the folder shows it, and resumes with it). A run whose state is
``preparing``, ``training`` or ``measuring`` but whose ``pid`` is no longer alive was killed
(``kill -9``, a crash, the machine): its last checkpoint is what ``--resume`` continues.
``paused`` is a run stopped by a signal after its checkpoint; ``failed`` one that stopped on an
error, the error's one sentence in ``message``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import DsparkError
from ..files import write_text
from .trainer import TRAIN_DIR

STATUS_FILE = f"{TRAIN_DIR}/status.json"
STATES = ("preparing", "training", "measuring", "paused", "finished", "failed")


class RunStatus:
    """The status file of the run in ``out``; only the process that writes the run (``main``)
    writes it. Nothing is written before :meth:`set` is first called: a command refused before it
    owns the folder (a paused run's folder given without ``--resume``) leaves that run's status as
    it was."""

    def __init__(self, out: str | Path, *, main: bool = True, command: list[str] | None = None):
        self.path, self.main, self.command = Path(out) / STATUS_FILE, main, list(command or [])
        self.started = False
        self.state: str | None = None
        self.step, self.steps = 0, 0

    def set(self, state: str, *, step: int | None = None, steps: int | None = None, message: str = "") -> None:
        """The run is now in ``state`` (at ``step`` of ``steps``, when given), ``message`` saying why."""
        assert state in STATES, state
        self.started, self.state = True, state
        self.step = self.step if step is None else step
        self.steps = self.steps if steps is None else steps
        if not self.main:
            return
        entry = {"state": state, "step": self.step, "steps": self.steps, "message": message, "pid": os.getpid()}
        entry["command"] = self.command
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_text(self.path, json.dumps(entry) + "\n")
        except (OSError, DsparkError):
            # a full disk: the run's own error (its checkpoint, its log) says so; a status file
            # left behind still names this pid, so a reader sees a stopped process
            pass


def read_status(out: str | Path) -> dict | None:
    """The status the run in ``out`` last wrote, or None when it wrote none (or it is unreadable)."""
    from ..reading import parse_json, read_bytes  # noqa: PLC0415 (a reader's only)

    path = Path(out) / STATUS_FILE
    if not path.is_file():
        return None
    try:
        entry = parse_json(read_bytes(path, 1 << 16, "training status").decode("utf-8"), str(path))
    except (DsparkError, UnicodeDecodeError):
        return None
    return entry if isinstance(entry, dict) and entry.get("state") in STATES else None


__all__ = ["STATES", "STATUS_FILE", "RunStatus", "read_status"]

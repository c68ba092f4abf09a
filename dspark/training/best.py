"""Keeping the best: while ``--eval-every`` measures held-out tau during a run, the weights of the
best measurement so far are kept in ``OUT/.train/best/``, written by the drafter's own save (the
files of its format), with ``best.json`` naming the step and tau. A run asked to finish early
(SIGUSR1, or ``--resume --finish`` on a paused run) writes those weights as the drafter.

The folder is replaced whole: the new best is written beside it and swapped in by renames, so a
run killed at any moment leaves one whole best (the new one, or the one before it).

The best so far is recorded in every checkpoint, and a resumed run starts from that record: it
takes the steps after the checkpoint again, measures them again (the same weights, exactly) and
marks the same lines best, so the log of a resumed run is that of one run straight through. A run
killed after it kept a best past its last checkpoint leaves that best in the folder until the
resumed run replaces it; finishing before then writes it (it was measured, on these weights' own
path), and the report names its step.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx

from ..errors import DsparkError
from ..files import alive, reason, write_text
from ..reading import parse_json, read_bytes
from .trainer import TRAIN_DIR

BEST_DIR = f"{TRAIN_DIR}/best"
BEST_FILE = "best.json"


class Best:
    """The best held-out measurement of the run in ``out`` and its weights; ``save(folder)``
    writes the drafter as its format does. Only the process that writes the run (``main``) writes."""

    def __init__(self, out: Path, save: Callable[[Path], None], *, recorded: dict | None, main: bool = True):
        """``recorded``: the best the checkpoint a run resumes from records (None: a run from its
        first step, whose folder forgets what an earlier run in it kept)."""
        self.folder, self.save, self.main = Path(out) / BEST_DIR, save, main
        self.step, self.tau = None, float("-inf")
        if recorded is not None and type(recorded.get("step")) is int and isinstance(recorded.get("tau"), (int, float)):
            self.step, self.tau = recorded["step"], recorded["tau"]
        if main:
            if recorded is None:
                for folder in (self.folder, self.folder.with_name("best.old")):
                    shutil.rmtree(folder, ignore_errors=True)
            for stale in self.folder.parent.glob("best.*.new"):  # what a run killed while writing a best left
                pid = stale.name.split(".")[1]
                if not pid.isdigit() or not alive(int(pid)):
                    shutil.rmtree(stale, ignore_errors=True)

    def offer(self, step: int, tau: float) -> bool:
        """Keep the weights measured at ``step`` when their ``tau`` beats the best so far; returns
        whether they were kept."""
        if self.step is not None and tau <= self.tau:
            return False
        if self.main:
            self._write(step, tau)
        self.step, self.tau = step, tau
        return True

    def _write(self, step: int, tau: float) -> None:
        new = self.folder.with_name(f"best.{os.getpid()}.new")
        old = self.folder.with_name("best.old")
        try:
            shutil.rmtree(new, ignore_errors=True)
            new.mkdir(parents=True)
            self.save(new)
            write_text(new / BEST_FILE, json.dumps({"step": step, "tau": tau}) + "\n")
            shutil.rmtree(old, ignore_errors=True)
            if self.folder.exists():
                os.rename(self.folder, old)
            os.rename(new, self.folder)
            shutil.rmtree(old, ignore_errors=True)
        except OSError as e:
            shutil.rmtree(new, ignore_errors=True)
            raise DsparkError(f"could not keep the best weights in {self.folder}: {reason(e, self.folder)}") from None
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            raise

    def record(self) -> dict | None:
        """What a checkpoint and the report keep of it."""
        return None if self.step is None else {"step": self.step, "tau": self.tau}

    def kept(self) -> tuple[int | None, float]:
        """(step, tau) of the weights the folder holds (see the module's docstring)."""
        return _recorded(self.folder)

    def weights_into(self, drafter, target) -> None:
        """The kept weights, loaded into ``drafter`` (the run's own, of the same shape)."""
        from ..loading import load_drafter  # noqa: PLC0415 (slow: every format)

        best = load_drafter(_whole(self.folder), target)
        drafter.net.update(best.net.parameters())
        mx.eval(drafter.net.parameters())
        best.dispose()


def keep(trainer, best: Best, stopped: str) -> dict:
    """Which weights the run writes as its drafter, and why: the best held-out ones when it was
    asked to finish (``stopped`` "finish") and measured some, else its last (loaded into
    ``trainer.drafter`` when they are not already there)."""
    step, tau = best.kept()
    if stopped == "finish" and step is not None:
        best.weights_into(trainer.drafter, trainer.target)
        why = f"the best held-out tau of the run ({tau:.3f}, measured at step {step}); finished early"
        return {"step": step, "why": why}
    if stopped == "finish":
        why = "the last weights: finished early, with no held-out tau measured during the run (--eval-every)"
    else:
        why = f"the last weights: the run ended by its {'time budget' if stopped == 'time budget' else 'schedule'}"
    return {"step": trainer.step, "why": why}


def refuse_finish(finish: bool, resuming: bool, out: Path) -> None:
    """``--finish`` ends a paused run: one sentence when ``out`` holds none."""
    if finish and not resuming:
        raise DsparkError(f"--finish: {out} holds no paused run to finish (no training checkpoint in it)")


def _whole(folder: Path) -> Path:
    """The best folder, or the one before it when a run was killed between the two renames."""
    old = folder.with_name("best.old")
    return folder if folder.is_dir() or not old.is_dir() else old


def _recorded(folder: Path) -> tuple[int | None, float]:
    """(step, tau) of the best kept in ``folder``; (None, -inf) when there is none (or its record
    is unreadable, which the next best replaces)."""
    path = _whole(folder) / BEST_FILE
    if not path.is_file():
        return None, float("-inf")
    try:
        entry = parse_json(read_bytes(path, 1 << 12, "best record").decode("utf-8"), str(path))
        step, tau = entry["step"], float(entry["tau"])
    except (DsparkError, UnicodeDecodeError, KeyError, TypeError, ValueError):
        return None, float("-inf")
    return (step, tau) if type(step) is int and step >= 0 else (None, float("-inf"))


__all__ = ["BEST_DIR", "BEST_FILE", "Best", "keep", "refuse_finish"]

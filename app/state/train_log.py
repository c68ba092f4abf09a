"""A training run's ``train_log.jsonl`` as the Train tab's curves, without Qt: read a piece at a
time as it grows (off the GUI thread), and the figures beside the curves (steps and tokens per
second, what the held-out measurements cost, time left). Every figure is the log's own or a
difference of its lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dspark.training.curves import LOG_FILE, step_entries

#: The most of the log read in one go: a restart's first read of a long run is done in pieces.
READ_CHUNK = 4 * 2**20
#: Steps whose seconds give the current steps per second.
RATE_WINDOW = 50


@dataclass(kw_only=True)
class Curves:
    """Every line of the log read so far, as series."""

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    anchors: list[float] = field(default_factory=list)
    tokens: list[float] = field(default_factory=list)  # tokens per second, when the log has them
    total: int | None = None  # the steps the run is to take, when the log says
    held_steps: list[int] = field(default_factory=list)
    tau: list[float] = field(default_factory=list)
    positions: list[list[float]] = field(default_factory=list)
    eval_seconds: list[float] = field(default_factory=list)
    best: list[bool] = field(default_factory=list)  # each measurement: the best of the run so far
    arrays: dict = field(default_factory=dict, repr=False, compare=False)  # array()'s, kept

    def add(self, entries: list[dict]) -> None:
        for e in entries:
            if "heldout" in e and isinstance(e["heldout"], dict):
                h = e["heldout"]
                self.held_steps.append(e["step"])
                self.tau.append(_num(h.get("tau")))
                self.positions.append([_num(x) for x in h.get("per_position_acceptance") or []])
                self.eval_seconds.append(_num(e.get("eval_seconds")))
                self.best.append(e.get("best") is True)
            elif "loss" in e:
                if self.steps and e["step"] <= self.steps[-1]:  # a resumed run logs from its checkpoint on
                    continue
                self.steps.append(e["step"])
                self.loss.append(_num(e.get("loss")))
                self.seconds.append(_num(e.get("seconds")))
                self.anchors.append(_num(e.get("anchors_per_sec")))
                self.tokens.append(_num(e.get("tokens_per_sec")))
            if isinstance(e.get("steps"), int):
                self.total = e["steps"]

    def extend(self, more: Curves) -> None:
        """``more`` (the next lines, made into series off the GUI thread) after these: list
        extends, not a loop over lines. A resumed run's lines from its checkpoint on are new."""
        last = self.steps[-1] if self.steps else 0
        skip = next((i for i, s in enumerate(more.steps) if s > last), len(more.steps))
        for name in ("steps", "loss", "seconds", "anchors", "tokens"):
            getattr(self, name).extend(getattr(more, name)[skip:])
        for name in ("held_steps", "tau", "positions", "eval_seconds", "best"):
            getattr(self, name).extend(getattr(more, name))
        self.total = more.total or self.total

    def array(self, name: str) -> np.ndarray:
        """A series as an array, converted once: only lines added since are converted again."""
        values, have = getattr(self, name), self.arrays.get(name)
        if have is None or len(have) > len(values):
            have = np.zeros(0)
        if len(have) < len(values):
            have = np.concatenate([have, np.asarray(values[len(have) :], dtype=float)])
            self.arrays[name] = have
        return have

    def steps_per_sec(self) -> float | None:
        """Steps per training second over the last ``RATE_WINDOW`` steps."""
        k = min(len(self.steps) - 1, RATE_WINDOW)
        if k < 1:
            return None
        dt = self.seconds[-1] - self.seconds[-1 - k]
        return (self.steps[-1] - self.steps[-1 - k]) / dt if dt > 0 else None

    def tokens_per_sec(self, block: int | None) -> float | None:
        """The log's tokens per second, else its anchors per second times the block size."""
        if self.tokens and math.isfinite(self.tokens[-1]):
            return self.tokens[-1]
        if self.anchors and block and math.isfinite(self.anchors[-1]):
            return self.anchors[-1] * block
        return None

    def eval_cost(self) -> tuple[float, float] | None:
        """(the last held-out measurement's seconds, what all of them cost as a share of the run's
        training seconds plus theirs)."""
        if not self.eval_seconds:
            return None
        spent = sum(x for x in self.eval_seconds if math.isfinite(x))
        train = self.seconds[-1] if self.seconds else 0.0
        return self.eval_seconds[-1], spent / (spent + train) if spent + train > 0 else 0.0

    def seconds_left(
        self, total: int | None, eval_every: int | None = None, budget: float | None = None
    ) -> float | None:
        """Training seconds to ``total`` steps at the current rate (or to the end of a time
        ``budget`` of training seconds, if sooner), and the held-out measurements still to come
        at the last one's cost."""
        rate, total = self.steps_per_sec(), self.total or total
        if not rate or not total or not self.steps:
            return None
        left = max(0, total - self.steps[-1])
        if budget:
            left = min(left, max(0.0, budget - self.seconds[-1]) * rate)
        cost = self.eval_cost()
        evals = (left // eval_every) + 1 if eval_every and cost else 0
        return left / rate + evals * (cost[0] if cost else 0.0)


def _num(x) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else math.nan


class LogReader:
    """``train_log.jsonl`` read from where the last read ended (at most ``READ_CHUNK`` at a
    time; a line not yet whole waits for the next read). A log rewritten by ``--resume`` (a new
    file, or shorter) is read again from its start: ``read`` then says so."""

    def __init__(self, out: str | Path):
        self.path = Path(out) / LOG_FILE
        self.offset, self.inode, self.rest = 0, None, b""

    def read(self) -> tuple[bool, Curves]:
        """(whether the log started over, the whole new lines as series): run off the GUI
        thread, which then only extends its lists by these."""
        try:
            st = self.path.stat()
        except OSError:
            return False, Curves()
        again = self.inode is not None and (st.st_ino != self.inode or st.st_size < self.offset)
        if again:
            self.offset, self.rest = 0, b""
        self.inode = st.st_ino
        if st.st_size <= self.offset:
            return again, Curves()
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read(READ_CHUNK)
        except OSError:
            return again, Curves()
        self.offset += len(chunk)
        *lines, self.rest = (self.rest + chunk).split(b"\n")
        chunk = Curves()
        chunk.add(step_entries(lines))
        return again, chunk

    @property
    def behind(self) -> bool:
        try:
            return self.path.stat().st_size > self.offset
        except OSError:
            return False

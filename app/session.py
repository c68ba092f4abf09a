"""The app's state without Qt (napari's split): the current job, its runs, the comparison, and
what the panes show. The window feeds it the worker's messages and hands ``view()`` to every
pane; tests drive it with plain messages, no window and no models.
"""

from __future__ import annotations

from dataclasses import dataclass

from .messages import Checked, Job, JobDone, RoundDone, RunDone, RunStarted
from .runs import BASELINE, RunRecord, compare_rows


@dataclass(frozen=True)
class View:
    """What the panes draw, derived from the session at one moment."""

    kind: str  # the job's kind: "run" or "compare" ("" before any)
    spec: RunRecord | None  # the speculative run the Run tab shows
    base: RunRecord | None  # plain decoding of the same prompt
    runs: tuple[RunRecord, ...]  # every run of the job, in order
    rows: tuple[dict, ...]  # the comparison table (compare jobs only)
    busy: bool


class Session:
    def __init__(self):
        self.job: Job | None = None
        self.runs: list[RunRecord] = []
        self.by_key: dict[int, RunRecord] = {}
        self.busy = False
        self.shown_kind = ""  # the kind of the job whose runs are shown
        self.version = 0  # bumped on every change; the window redraws when it moves
        self._next_id = 0
        self._fresh = False  # the current job has not started a run yet

    # --- jobs -----------------------------------------------------------------------------
    def new_job(self, kind: str, target: str, prompts, runs, config: dict) -> Job | None:
        """A job for the worker, or None while one is running. Its runs replace the shown ones
        when they start (``RunStarted``), so a job that fails to start leaves them in place."""
        if self.busy:
            return None
        self._next_id += 1
        self.job = Job(self._next_id, kind, target, tuple(prompts), tuple(runs), dict(config))
        self.busy = True
        self._fresh = True
        self.version += 1
        return self.job

    def apply(self, msg) -> bool:
        """Take one worker message; True when it belonged to the current job."""
        job = self.job.id if self.job is not None else None
        if isinstance(msg, RunStarted):
            if msg.job != job:
                return False
            if self._fresh:
                self.runs, self.by_key, self._fresh = [], {}, False
                self.shown_kind = self.job.kind
            rec = RunRecord(msg.key, msg.label, msg.method, msg.prompt, msg.prompt_index, msg.drafter, msg.config)
            self.runs.append(rec)
            self.by_key[rec.key] = rec
        elif isinstance(msg, RoundDone):
            rec = self.by_key.get(msg.key)
            if rec is None:
                return False
            rec.rounds.append(msg.event)
            rec.drafted_text.append(msg.drafted_text)
        elif isinstance(msg, RunDone):
            rec = self.by_key.get(msg.key)
            if rec is None:
                return False
            rec.summary = msg.summary
        elif isinstance(msg, Checked):
            rec = self.by_key.get(msg.key)
            if rec is None:
                return False
            rec.verdict = msg.verdict
        elif isinstance(msg, JobDone):
            if msg.job != job:
                return False
            self.busy = False
        else:
            return False
        self.version += 1
        return True

    # --- what is shown ----------------------------------------------------------------------
    def shown_runs(self) -> tuple[RunRecord | None, RunRecord | None]:
        """The speculative run the Run tab shows (the latest), and the baseline of its prompt."""
        spec = next((r for r in reversed(self.runs) if r.method == "speculative"), None)
        bases = [r for r in self.runs if r.method == "baseline"]
        if spec is not None:
            base = next((r for r in bases if r.prompt_index == spec.prompt_index), None)
        else:
            base = bases[-1] if bases else None
        return spec, base

    def view(self) -> View:
        spec, base = self.shown_runs()
        rows = tuple(compare_rows(self.runs)) if self.shown_kind == "compare" else ()
        return View(self.shown_kind, spec, base, tuple(self.runs), rows, self.busy)

    def labels(self) -> list[str]:
        return list(dict.fromkeys(r.label for r in self.runs if r.label != BASELINE))

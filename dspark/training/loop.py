"""The one training loop skeleton the demo target's pretraining and drafter training share: steps
until the schedule or the time budget ends, a checkpoint when one is due and on Ctrl-C, SIGTERM or SIGHUP,
and one progress line with the rate and an estimate of the time left.

A stop signal is only noted where it lands and acted on between two steps: an exception raised
in the middle of a step could fall between its update and its bookkeeping (the weights of step
k+1 saved as step k), and a resume would no longer be exact.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

#: SIGUSR1 noted while a command prepared its run (:func:`finish_asked_early`), before the loop
#: listened for it: the loop then finishes at once.
_FINISH_EARLY = [False]


@contextmanager
def finish_asked_early() -> Iterator[None]:
    """For the whole of a training command, SIGUSR1 ("stop now and finish") is noted instead of
    ending the process (its default): one sent while the data is prepared (the target writing it
    can take an hour) finishes the run as soon as its loop starts. Main thread only, as signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGUSR1, lambda *_: _FINISH_EARLY.__setitem__(0, True))
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)
        _FINISH_EARLY[0] = False


class StopSignals:
    """While active, SIGINT (Ctrl-C), SIGTERM (``kill``, a scheduler) and SIGHUP (the terminal
    or ssh session closing) only set ``asked``, and with ``finish`` SIGUSR1 ("stop now and
    finish") only sets ``finish_asked``; the previous handlers come back on exit. A SIGHUP
    ignored on entry (``nohup``) stays ignored. Signals reach the main thread only, so elsewhere
    nothing is installed."""

    def __init__(self, finish: bool = False):
        self.asked: int | None = None
        self.finish_asked = False
        self._finish = finish
        self._previous: dict = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            wanted = [signal.SIGINT, signal.SIGTERM]
            if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
                wanted.append(signal.SIGHUP)
            self._previous = {s: signal.signal(s, self._note) for s in wanted}
            if self._finish:
                self._previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, self._note_finish)
                self.finish_asked = _FINISH_EARLY[0]
        return self

    def _note(self, signum, _frame) -> None:
        self.asked = signum

    def _note_finish(self, _signum, _frame) -> None:
        self.finish_asked = True

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)


def hms(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


@dataclass(kw_only=True)
class Progress:
    """A tqdm bar on a terminal (when ``bar``), else a plain line every ``every`` steps (a log
    file); nothing when not ``enabled``. Shows the step, the figures the step reported, the rate
    and the estimated time left (from this run's own steps; with a time budget, whichever ends
    first)."""

    total: int
    desc: str
    enabled: bool = True
    bar: bool = True
    every: int = 10
    say: Callable[[str], None] = field(default=lambda m: print(m, file=sys.stderr, flush=True))

    def start(self, step: int, budget_s: float | None) -> None:
        self.first, self.t0, self.budget_s = step, time.perf_counter(), budget_s
        self.tqdm = None
        if self.enabled and self.bar and sys.stderr.isatty():
            from tqdm import tqdm  # noqa: PLC0415 (slow: tqdm, only for a bar on a terminal)

            self.tqdm = tqdm(
                total=self.total, initial=step, desc=self.desc, unit="step", dynamic_ncols=True, file=sys.stderr
            )

    def left(self, step: int) -> float:
        elapsed = time.perf_counter() - self.t0
        left = (self.total - step) * elapsed / max(step - self.first, 1)
        return min(left, self.budget_s - elapsed) if self.budget_s is not None else left

    def update(self, step: int, figures: dict[str, str]) -> None:
        text = " | ".join([*(f"{k} {v}" for k, v in figures.items()), f"left {hms(self.left(step))}"])
        if self.tqdm is not None:
            self.tqdm.update(1)
            self.tqdm.set_postfix_str(text, refresh=False)
        elif self.enabled and (step % self.every == 0 or step == self.total):
            self.say(f"{self.desc} step {step}/{self.total}: {text}")

    def write(self, text: str) -> None:
        (self.tqdm.write if self.tqdm is not None else self.say)(text)

    def close(self) -> None:
        if self.tqdm is not None:
            self.tqdm.close()


def train_loop(
    step: Callable[[], int],
    steps: int,
    one_step: Callable[[], dict[str, str]],
    *,
    checkpoint: Callable[[], None],
    checkpoint_due: Callable[[], bool],
    progress: Progress,
    budget_s: float | None = None,
    started: float | None = None,
    agree: Callable[..., tuple[bool, ...]] | None = None,
    finish: bool = False,
    finish_now: bool = False,
) -> str:
    """Run ``one_step`` until ``step()`` reaches ``steps`` or the time budget (counted from
    ``started``, default now) is spent; returns what stopped it ("steps" or "time budget").
    ``checkpoint`` runs whenever ``checkpoint_due()`` says so and, on a stop signal, before
    ``KeyboardInterrupt`` is raised; the caller checkpoints at the end. ``agree`` turns this
    process's (stop asked, budget spent, checkpoint due) into what every process of a
    distributed run does (:meth:`dspark.training.distributed.World.agree`): all of them stop,
    checkpoint or end at the same step. ``progress`` shows each step's figures. With ``finish``,
    SIGUSR1 ends the loop at the next step boundary as the schedule's end does, and it returns
    "finish" (``finish_now``: before any step, for a paused run finished without training)."""
    started = time.perf_counter() if started is None else started
    first = step()
    progress.start(first, budget_s)
    try:
        with StopSignals(finish=finish) as stop:
            while step() < steps:
                flags = (
                    stop.asked is not None,
                    budget_s is not None and time.perf_counter() - started >= budget_s,
                    step() > first and checkpoint_due(),
                    finish_now or stop.finish_asked,
                )
                asked, spent, due, finishing = agree(*flags) if agree is not None else flags
                if finishing and not asked:
                    return "finish"
                if asked:
                    checkpoint()
                    raise KeyboardInterrupt  # here, between steps: the state is whole
                if due:
                    checkpoint()
                if spent:
                    return "time budget"
                figures = one_step()
                progress.update(step(), figures)
    finally:
        progress.close()
    return "steps"


__all__ = ["Progress", "StopSignals", "finish_asked_early", "hms", "train_loop"]

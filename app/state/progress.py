"""What a job says of itself while it runs, apart from its events: its prompt being processed
(before the first token, which on a long prompt takes seconds) and, when a run ends, how busy the
machine was meanwhile. Qt-free and model-free: the worker hands it its ``emit``."""

from __future__ import annotations

import os

from .messages import Progress, Status

#: Prompts from this many tokens on say that they are being processed, with a bar: a 3,040-token
#: prompt took 13.6 s on the demo pair, which "generating" alone passed over in silence.
PREFILL_SHOWN = 512


class Prefill:
    """A run's prompt being processed, said: "processing the prompt of 3,040 tokens", then "2,048 of
    3,040 tokens" as the engine reports each chunk (:meth:`processed`, its ``prompt_progress``);
    "generating" at the run's first token, or at once for a short prompt (``tokens`` 0)."""

    def __init__(self, emit, label: str, tokens: int):
        self.emit, self.label, self.tokens = emit, label, tokens
        self.task = f"{label}: processing the prompt"
        self.open = bool(tokens)
        if tokens:
            self.emit(Progress(f"{self.task} of {tokens:,} tokens", 0, tokens))
            self.emit(Status(f"{self.task} of {tokens:,} tokens …"))
        else:
            self.emit(Status(f"{label}: generating"))

    def processed(self, done: int, total: int) -> None:
        if self.open and 0 < done < total:  # done == total would end the bar before the first token
            self.emit(Progress(f"{self.task}: {done:,} of {total:,} tokens", done, total))

    def ended(self) -> None:
        """The first event: the prompt is processed."""
        if self.open:
            self.open = False
            self.emit(Progress(self.task, self.tokens, self.tokens))
            self.emit(Status(f"{self.label}: generating"))


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def machine_during(seconds: float, cpu: float) -> dict:
    """The machine while a run ran (``app.state.messages.RunDone.machine``): the load average at its
    end and how many cores this process kept busy meanwhile (``cpu`` seconds of it), so what other
    programs did shows."""
    if not hasattr(os, "getloadavg") or seconds <= 0:
        return {}
    return {"load": os.getloadavg()[0], "own": cpu / seconds, "cores": os.cpu_count() or 1}


__all__ = ["PREFILL_SHOWN", "Prefill", "cpu_seconds", "machine_during"]

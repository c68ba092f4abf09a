"""The clock ``auto`` judges by (:mod:`dspark.policy`): what a run's rounds and plain steps took
against what this machine's measured costs (:mod:`dspark.costs`) price them at. The costs are
measured once per machine; the clock follows the load, BLAS and power state of the moment.
No MLX: plain numbers, so the policy's tests script it.
"""

from __future__ import annotations

from collections import deque
from statistics import median

#: The clock: how many of a kind's latest timed ratios its multiple is the median of, the most
#: one ratio can say, and the change of one kind's multiple that has the run time the other kind
#: at once (a probe).
WINDOW, CLIP, MOVED = 5, 3.0, 1.5
#: Until a kind is timed, the costs as measured stand for this many of its ratios (1.0 each).
PRIOR_RATIOS = 2
#: Plain steps between two tries of the other BLAS thread count, the steps a try takes, and how
#: much less the other count's steps must take to be kept (:class:`StepThreads`).
TRY_EVERY, TRY, BETTER = 32, 4, 0.95


class Clock:
    """What this run's rounds and plain steps took, as multiples of what the costs price them at
    (1.0: as measured). A kind's multiple is the median of its last ``WINDOW`` timed ratios, each
    clipped to ``CLIP`` either way: one stall does not decide, a change that lasts three rounds
    does. That holds from a run's first round too: the costs as measured count as
    ``PRIOR_RATIOS`` ratios of 1.0 until they are outnumbered (a first round on a busy machine
    took 9x its price; alone in the window it set rounds at 3x, and a drafter of tau 4.9 went
    plain for 22 of its 128 tokens). A kind timed again after ``WINDOW`` or more of the other (a
    probe) starts afresh from what it says now, its older ratios being of another moment. (A
    running mean moved 30% by each ratio let one slow round of a busy machine send a run plain for
    dozens of steps.) A kind
    not timed since the other's multiple moved is assumed to have moved alike (a busier machine
    slows both): its multiple is scaled by the other's change since it was last timed. So only
    timing both kinds tells a change of their relation, which is why ``auto`` probes the kind it
    is not running."""

    def __init__(self):
        self._m = {"round": None, "step": None}  # each kind's own multiple (None: never timed)
        self._other_then = {"round": 1.0, "step": 1.0}  # the other kind's, when this one was timed
        self._ratios = {k: deque([1.0] * PRIOR_RATIOS, maxlen=WINDOW) for k in ("round", "step")}
        self._since = {"round": 0, "step": 0}  # the other kind's timings since this one was timed

    def _took(self, kind: str, measured_ms: float, priced_ms: float) -> float:
        # a probe after a stretch of the other kind: what it says now
        if self._m[kind] is not None and self._since[kind] >= WINDOW:
            self._ratios[kind].clear()
        self._since[kind], self._since[_OTHER[kind]] = 0, self._since[_OTHER[kind]] + 1
        self._ratios[kind].append(min(CLIP, max(1.0 / CLIP, measured_ms / max(priced_ms, 1e-9))))
        self._m[kind] = median(self._ratios[kind])
        self._other_then[kind] = self._m[_OTHER[kind]] or 1.0
        return measured_ms

    def moved(self, kind: str) -> bool:
        """Whether the other kind's multiple moved by more than ``MOVED`` either way since this
        kind was last timed: then this kind's is a guess worth checking."""
        change = (self._m[_OTHER[kind]] or 1.0) / self._other_then[kind]
        return not 1.0 / MOVED < change < MOVED

    def multiple(self, kind: str) -> float:
        own, other = self._m[kind] or 1.0, self._m[_OTHER[kind]] or 1.0
        return own * other / self._other_then[kind]

    def round_took(self, measured_ms: float, priced_ms: float) -> float:
        """A round priced at ``priced_ms`` took ``measured_ms``; returns what it took as this
        clock reads it (a test's scripted clock reads its own)."""
        return self._took("round", measured_ms, priced_ms)

    def step_took(self, measured_ms: float, priced_ms: float) -> float:
        return self._took("step", measured_ms, priced_ms)

    @property
    def rounds(self) -> float:
        return self.multiple("round")

    @property
    def steps(self) -> float:
        return self.multiple("step")


_OTHER = {"round": "step", "step": "round"}


class StepThreads:
    """The BLAS thread count this run's plain steps run at. The costs chose one when they were
    measured, at that moment's load; a plain step's best count moves with the load (on the busy
    2-core VM plain decoding ran 1.9x faster at two threads than at one in one trial and slower in
    the next). So every ``TRY_EVERY`` plain steps the next ``TRY`` run at the other count, and the
    run keeps whichever count's last ``TRY`` steps took less against their price, by ``BETTER`` or
    more (noise does not flip it back and forth). No choice to make (one count, or none: no BLAS
    thread count on a Mac's GPU): the costs' count throughout."""

    def __init__(self, start: int | None, choices: tuple[int, ...] = ()):
        self.now = start
        self.choices = tuple(dict.fromkeys(c for c in choices if c)) if start in choices else ()
        self._ratios = {c: deque(maxlen=TRY) for c in self.choices}
        self._since = 0  # plain steps at ``now`` since the last try
        self._trying: list | None = None  # [count, steps to hand out, steps to be timed]
        self._given: dict[int, int] = {}  # position -> the count its step was handed

    def count_for(self, position: int) -> int | None:
        """The count the plain step at ``position`` runs at (asked once, before it is queued)."""
        if len(self.choices) < 2:
            return self.now
        if self._trying is None and self._since >= TRY_EVERY:
            self._trying = [next(c for c in self.choices if c != self.now), TRY, TRY]
            self._since = 0
        n = self.now
        if self._trying is not None and self._trying[1] > 0:
            n, self._trying[1] = self._trying[0], self._trying[1] - 1
        self._given[position] = n
        return n

    def took(self, position: int, ratio: float) -> None:
        """The plain step at ``position`` took ``ratio`` times its price."""
        n = self._given.pop(position, None)
        if n is None or n not in self._ratios:
            return
        self._ratios[n].append(ratio)
        if n == self.now:
            self._since += 1
        t = self._trying
        if t is not None and n == t[0]:
            t[2] -= 1
            if t[2] <= 0:
                mine, other = self._ratios[self.now], self._ratios[t[0]]
                if mine and median(other) < BETTER * median(mine):
                    self.now = t[0]
                self._trying = None


__all__ = ["BETTER", "CLIP", "MOVED", "PRIOR_RATIOS", "TRY", "TRY_EVERY", "WINDOW", "Clock", "StepThreads"]

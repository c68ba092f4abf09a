"""Measuring a drafter for a diagnosis: the real generation loop on a few prompts, every drafted
token verified, and the figures the checks read (pure functions, definitions in docstrings).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import metrics
from ..config import GenerationConfig
from ..errors import DsparkError
from ..events import RoundEvent, Summary


class Stopped(DsparkError):
    """The caller's ``cancel`` asked the diagnosis to stop."""


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One pass of the generation loop over the prompts with one setting."""

    rounds: int  # rounds that drafted
    tau: float  # committed tokens per round (metrics.tau)
    per_position: tuple[float, ...]  # metrics.per_position_acceptance
    by_context: tuple[dict, ...]  # metrics.by_context
    max_position: int  # the longest context a round drafted at (tokens before its anchor)

    @property
    def first(self) -> float:
        """Position-1 acceptance: the share of rounds whose first draft was accepted."""
        return self.per_position[0] if self.per_position else 0.0


def of_rounds(events: Sequence[RoundEvent]) -> Measurement:
    drafted = [e for e in events if not e.plain_step]
    f = metrics.summarize(drafted)
    return Measurement(
        rounds=f.rounds,
        tau=f.tau,
        per_position=tuple(f.per_position_acceptance),
        by_context=tuple(metrics.by_context(drafted)),
        max_position=max((e.position for e in drafted), default=0),
    )


def measure(
    target,
    drafter,
    prompts: Sequence,
    config: GenerationConfig,
    *,
    step: Callable[[str], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    what: str = "",
) -> Measurement:
    """Generate every prompt with ``config`` (policy ``fixed``: every drafted token verified, so
    each position's acceptance is defined) and measure the rounds. ``step(what)`` is called after
    each prompt; ``cancel()`` stops between rounds and raises :class:`Stopped`."""
    from ..engine import generate  # noqa: PLC0415 (slow: mlx)

    config = dataclasses.replace(config, policy="fixed")
    events: list[RoundEvent] = []
    for prompt in prompts:
        for ev in generate(target, drafter, prompt, config, cancel=cancel, display=False):
            if isinstance(ev, RoundEvent):
                events.append(ev)
            elif isinstance(ev, Summary) and ev.finish_reason == "cancelled":
                raise Stopped("the diagnosis was stopped")
        if step is not None:
            step(what)
    return of_rounds(events)


# ----------------------------------------------------------------------------- figures
def accepted_within(per_position: Sequence[float], positions: int | None = None) -> float:
    """Expected accepted drafts per round among the first ``positions`` (all when None), when every
    draft is verified: sum over k of P(drafts 1..k all accepted), i.e. the sum of the per-position
    acceptance (``metrics.per_position_acceptance``). tau is this plus one over the whole block."""
    return float(sum(per_position[:positions] if positions is not None else per_position))


def conditional(per_position: Sequence[float]) -> list[float | None]:
    """Per position k, the chance draft k is accepted when drafts 1..k-1 were: a_k / a_{k-1}
    (a_0 = 1); None where no round reached position k (a_{k-1} = 0)."""
    out, before = [], 1.0
    for a in per_position:
        out.append(a / before if before > 0 else None)
        before = a
    return out


def pooled_conditional(per_position: Sequence[float], start: int, stop: int | None = None) -> float | None:
    """Acceptance of positions ``start+1..stop`` (1-based), pooled over the rounds that reached
    them: sum of a_k over sum of a_{k-1} (a_0 = 1). Weighting by rounds, a position few rounds
    reached counts little. None when no round reached any of them."""
    prev = [1.0, *per_position]
    hi = len(per_position) if stop is None else min(stop, len(per_position))
    reached = sum(prev[k] for k in range(start, hi))
    return sum(per_position[start:hi]) / reached if reached > 0 else None


def share_lost(now: float, reference: float) -> float:
    """The share of ``reference`` (accepted drafts per round) that ``now`` lost; 0 when it lost none."""
    return max(0.0, 1.0 - now / reference) if reference > 0 else 0.0


def context_rounds(by_context: Sequence[dict], lo: int, hi: int | None = None) -> tuple[int, float | None]:
    """(rounds, position-1 acceptance) of the ``metrics.by_context`` buckets starting after
    ``lo`` tokens (and ending at most at ``hi``), pooled by rounds."""
    chosen = [
        b
        for b in by_context
        if b["from"] > lo
        and (hi is None or (b["to"] is not None and b["to"] <= hi))
        and b["first_acceptance"] is not None
    ]
    n = sum(b["rounds"] for b in chosen)
    return n, (sum(b["rounds"] * b["first_acceptance"] for b in chosen) / n if n else None)


__all__ = [
    "Measurement",
    "Stopped",
    "accepted_within",
    "conditional",
    "context_rounds",
    "measure",
    "of_rounds",
    "pooled_conditional",
    "share_lost",
]

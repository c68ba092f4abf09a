"""The target alone inside a speculative run: the prompt's prefill (the cache and the tap rows the
drafter starts from) and the plain steps ``auto`` decodes by where no round pays, pipelined as
mlx-lm's own decoding is. Each step yields the :class:`dspark.rounds.RoundOutcome` a round of
width 0 would, so the engine, its events and the metrics treat both alike."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from time import perf_counter

import mlx.core as mx

from .config import SamplingParams
from .rounds import Inspection, RoundOutcome, use_phase_threads
from .sampling import distribution, greedy_choice, sample, soft_cap, token_probs
from .target import Target


def prefill(
    target: Target,
    cache: list,
    ids: list[int],
    taps: Sequence[int],
    *,
    step: int,
    progress: Callable[[int], None] | None = None,
) -> mx.array | None:
    """``ids`` into ``cache``, ``step`` tokens a forward; the tap rows of them all (None: no ids),
    the drafter's first context rows. ``progress(done)`` is told the tokens processed after each
    forward (a long prompt takes seconds: a screen says how far it is)."""
    rows = []
    for i in range(0, len(ids), step):
        _, t = target.forward(mx.array([ids[i : i + step]]), cache, taps, logits=False)
        mx.eval(t, [c.state for c in cache])
        rows.append(t)
        if progress is not None:
            progress(min(i + step, len(ids)))
    return mx.concatenate(rows, axis=1) if rows else None


def plain_outcome(
    token: int,
    prob: float,
    *,
    seconds: float,
    new_rows: mx.array | None,
    inspected: Inspection | None = None,
    plain_step: bool = True,
) -> RoundOutcome:
    """A round of the target alone: no draft, ``token`` committed by the target with probability
    ``prob``, ``seconds`` counted as the verify's. ``plain_step``: a speculative run's plain step
    (True), or a step of plain decoding itself (False: its rounds are what tau counts there)."""
    return RoundOutcome(
        drafted=[],
        draft_probs=[],
        confidences=None,
        conf_logits=None,
        width=0,
        accepted=0,
        tokens=[token],
        target_probs=[prob],
        draft_seconds=0.0,
        verify_seconds=seconds,
        new_rows=new_rows,
        plain_step=plain_step,
        inspected=inspected,
    )


def plain_steps(
    target: Target,
    cache: list,
    *,
    tap_layers: Sequence[int],
    anchor: int,
    position: int,
    sampling: SamplingParams,
    keys: Iterator[mx.array],
    more: Callable[[int], bool],
    threads: dict,
    display: bool = True,
    inspect: bool = False,
) -> Iterator[RoundOutcome]:
    """The target alone, one token a step, from ``anchor`` at cache length ``position``, for as long
    as ``more(p)`` says the step at position ``p`` is plain too. Pipelined as mlx-lm's
    ``generate_step`` is: the next token's forward is queued before this one is read, so reading
    a token overlaps the next forward. A round of width 0 cannot overlap (its outcome is read
    before anything else is queued) and cost ~1.7 plain steps on a 2-core CPU, so a floor built
    of such rounds sat well below plain decoding.

    Each step commits what a round of width 0 would (the same ops and, sampling, the same key
    from ``keys``): greedy, the argmax by mlx-lm's own rule; sampling, a draw from the target's
    distribution. ``more`` is asked before the token before it is read: it may read only what is
    known then (the scheduler's state of earlier rounds, positions), which keeps the run lossless.
    The last token yielded is not fed to the target: it is the next round's anchor. Each step's
    tap row is its ``new_rows``, for the drafter's next round."""
    sp = sampling
    softcap = target.projection.softcap
    use_phase_threads(threads, "step")

    def queue(token: mx.array):
        t = perf_counter()
        k_accept = mx.random.split(next(keys))[1]  # the key a round of width 0 samples with
        k_res = mx.random.split(k_accept)[1]
        raw, taps = target.forward(token.reshape(1, 1).astype(mx.int32), cache, tap_layers, capped=False)
        logits = soft_cap(raw[0], softcap)
        if sp.greedy:
            choice = greedy_choice(logits)
            prob = token_probs(logits, choice) if display else None
        else:
            p = distribution(logits, sp)
            choice = sample(p, k_res)
            prob = p[0, choice[0]]  # the sampling distribution, as a round shows it
        mx.async_eval(choice, prob, taps)
        return choice, prob, taps, perf_counter() - t

    pending = queue(mx.array([anchor]))
    try:
        while pending is not None:
            choice, prob, taps, queued = pending
            position += 1
            t0 = perf_counter()
            asked = more(position)
            t1 = perf_counter()
            pending = queue(choice) if asked else None
            t2 = perf_counter()
            token = choice.item()
            shown = prob.item() if prob is not None else math.nan
            outcome = plain_outcome(
                token,
                shown,
                # A step's time is its own queueing and reading, not the next one's queueing:
                # where mlx's async_eval returns only once the forward is computed (this
                # project's 2-core CPU: 10 ms in it, 0.01 ms in item()), a stretch's first step
                # read 2x a step and the last ~0, and a probe of two steps misled auto's clock.
                seconds=queued + (t1 - t0) + perf_counter() - t2,
                new_rows=taps,
                inspected=Inspection((), (), ()) if inspect else None,
            )
            yield outcome  # the caller's time between steps is not the step's
    finally:  # a run that stops mid-stretch (EOS, cancel) lets its queued forward finish here
        if pending is not None:
            mx.eval([x for x in pending[:3] if x is not None])


__all__ = ["plain_outcome", "plain_steps", "prefill"]

"""Shadow drafts: in ``auto``'s plain stretches the drafter drafts a block now and then without a
verify, and the tokens the target commits after it judge it
(:meth:`dspark.policy.Scheduler.observe_shadow`): how a plain stretch sees drafting pay again, at
the price of a draft alone. When one is due is the scheduler's (:meth:`Scheduler.shadow_due`);
drafting it and judging it are here."""

from __future__ import annotations

import mlx.core as mx

from . import blas
from .policy import Scheduler
from .rounds import DraftSession


def draft_shadow(
    draft_session: DraftSession, anchor: int, position: int, *, threads: dict, **propose
) -> tuple[int, mx.array]:
    """A shadow draft after ``anchor`` at ``position``: ``draft_session.propose`` asked as a
    round's draft is (``propose``: its new rows, history, block size, sampling and key), queued,
    not waited for: ``(position, tokens [1, G])``, read a step or more later by
    :func:`judge_shadow`. Drafted at :func:`shadow_threads` of ``threads`` (the costs' counts), the
    plain stretch's count set back after."""
    stretch = blas.threads()
    blas.use_threads(shadow_threads(threads.get("draft"), stretch))
    tokens = draft_session.propose(anchor, position, **propose).tokens
    mx.async_eval(tokens, draft_session.state())
    blas.use_threads(stretch)
    return position, tokens


def shadow_threads(draft: int | None, stretch: int | None) -> int | None:
    """The BLAS thread count of a shadow draft: the draft's own (``draft``, the costs'), but never
    more than the plain stretch's now (``stretch``); None: as it is. On a busy 2-core machine a
    shadow drafted at the steps' two threads took ~200 ms where a round's draft at its one took
    ~20; one drafted at two threads between steps at one left OpenBLAS's second thread spinning
    into them (``auto`` with no round drafted 0.87x of plain decoding, 0.92x with its shadows at
    one thread: 24 interleaved trials, an untrained head on the demo target)."""
    return min(draft, stretch) if draft and stretch else draft


def judge_shadow(sched: Scheduler, shadow, sequence: list[int], final: bool = False):
    """A shadow draft ``(position, tokens [1, G])`` judged by the tokens committed after its anchor
    (``sequence``: prompt and output): at its first draft that differs from them, once all G are
    known, as soon as its drafts right so far say a round pays (:meth:`Scheduler.shadow_convinces`),
    or with what is known when the plain stretch ends (``final``). Returns the draft still
    waiting, or None. Its tokens are read a step after it was queued: computed by then."""
    position, tokens = shadow
    known = len(sequence) - 1 - position
    drafted = tokens[0].tolist()[:known]
    truth = sequence[position + 1 : position + 1 + len(drafted)]
    matched = next((k for k, (d, t) in enumerate(zip(drafted, truth)) if d != t), None)
    if matched is not None:
        sched.observe_shadow(position, matched + 1, matched)
    elif known >= tokens.shape[1] or final or sched.shadow_convinces(position, len(drafted)):
        sched.observe_shadow(position, len(drafted), len(drafted))
    else:
        return shadow
    return None


__all__ = ["draft_shadow", "judge_shadow", "shadow_threads"]

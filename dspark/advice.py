"""What to tell a person when speculative decoding cannot pay (one sentence each, with the
remedy): the CLI prints it once after a run, the app shows it in its status bar. No MLX."""

from __future__ import annotations

from . import blas

#: A run that decoded at least this share of its tokens plainly under ``auto``: no round paid.
MOSTLY_PLAIN = 0.9


def slow_blas() -> str | None:
    """The machine's matrix products run on a reference BLAS: nothing speculative can pay."""
    if not blas.is_slow():
        return None
    return (
        f"matrix products run on the mlx wheel's reference BLAS ({blas.describe()}), so speculative "
        f"decoding cannot pay on this machine: {blas.INSTALL_HINT}, then run again"
    )


def after_run(summary, *, policy: str, drafter: str | None = None, block_size: int | None = None) -> str | None:
    """Why a speculative run (``summary``, a :class:`dspark.events.Summary`) under ``policy``
    bought nothing, when it is clear: a slow BLAS, or ``auto`` decoding (nearly) every token
    plainly because no round paid with this drafter here (not when the run asked for
    ``block_size`` 0: then plain decoding is what was asked). ``drafter`` names it in the remedy."""
    slow = slow_blas()
    if slow:
        return slow
    tokens = len(summary.tokens)
    if policy != "auto" or block_size == 0 or not tokens or summary.plain_steps < MOSTLY_PLAIN * tokens:
        return None
    seen = (
        f"its first draft was accepted in {summary.per_position_acceptance[0]:.0%} of {summary.rounds} rounds"
        if summary.rounds and summary.per_position_acceptance
        else "no round drafted"
    )
    name = f" {drafter}" if drafter else ""
    return (
        f"auto decoded {summary.plain_steps} of {tokens} tokens plainly: no round of this drafter paid on this "
        f"machine ({seen}); `dspark diagnose` with this target and drafter{name} says why it accepts little"
    )


__all__ = ["after_run", "slow_blas"]

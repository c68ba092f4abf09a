"""Sequential temperature scaling of the confidence head (STS, as the DSpark paper calibrates it):
``dspark calibrate``.

The confidence head gives a logit ``z_k`` per drafted position: the chance that draft k
survives verification given drafts 1..k-1 did. The chance that drafts 1..k all survive is then
``a_k = prod_{i<=k} sigmoid(z_i / T_i)``. Held-out rounds of the real generation loop give,
for every round that verified position k, the observed label "drafts 1..k were all accepted".
For k = 1..G in order, T_k is the grid value (log-spaced 0.05..20) that minimises the
expected calibration error of ``a_k`` against that label, with T_1..T_{k-1} already fixed.
Dividing a logit by a positive temperature never changes the order of confidences, so only
their scale is corrected. The caller stores the temperatures as ``drafter.calibration``
(``Calibration.kept()``: only when they lowered the ECE on rounds held out from the fit).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from .. import metrics
from ..drafting import BlockDrafter
from ..engine import GenerationConfig, generate
from ..errors import DsparkError
from ..events import RoundEvent
from ..target import Target

GRID = tuple(float(t) for t in np.geomspace(0.05, 20.0, 81))
BINS = 20


@dataclass(frozen=True)
class Round:
    """One speculative round: raw confidence logits of the drafted positions (None without a
    confidence head), how many drafts were verified and how many were accepted."""

    logits: tuple[float, ...] | None
    width: int
    accepted: int


@dataclass(kw_only=True)
class Calibration:
    temperatures: list[float]
    ece_before: float  # pooled over positions, raw logits (all T = 1)
    ece_after: float
    per_position_before: list[float] = field(default_factory=list)
    per_position_after: list[float] = field(default_factory=list)
    fit_rounds: int = 0
    check_rounds: int = 0
    # acceptance by position over every round collected (metrics.per_position_acceptance): what
    # ``dspark calibrate`` writes into the drafter's profile (dspark.drafter_profile)
    per_position_acceptance: list[float] = field(default_factory=list)

    def kept(self) -> list[float] | None:
        """The fitted temperatures, or None (raw confidences) when they did not lower the ECE
        on the rounds held out from the fit: with few or very uneven prompts a fit can overfit."""
        return self.temperatures if self.ece_after < self.ece_before else None


def expected_calibration_error(pred: Sequence[float], label: Sequence[float], bins: int = BINS) -> float:
    """ECE with ``bins`` equal-width bins on [0, 1]: sum over bins of (bin share) x
    |mean predicted - mean observed|. 0 for no samples."""
    p = np.asarray(pred, np.float64)
    y = np.asarray(label, np.float64)
    if p.size == 0:
        return 0.0
    idx = np.minimum((p * bins).astype(np.int64), bins - 1)
    # Per bin, |sum p - sum y| / N equals (bin share) x |mean p - mean y|.
    gap = np.abs(np.bincount(idx, p, bins) - np.bincount(idx, y, bins))
    return float(gap.sum() / p.size)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -x))


def survival_pairs(rounds: Sequence[Round], temperatures: Sequence[float], k: int) -> tuple[np.ndarray, np.ndarray]:
    """(a_k, label) over the rounds that verified position k (1-based)."""
    rows = [r for r in rounds if r.logits is not None and r.width >= k]
    if not rows:
        return np.zeros(0), np.zeros(0)
    z = np.array([r.logits[:k] for r in rows], np.float64)
    t = np.array([temperatures[i] if i < len(temperatures) else 1.0 for i in range(k)], np.float64)
    pred = np.prod(_sigmoid(z / t), axis=1)
    label = np.array([r.accepted >= k for r in rows], np.float64)
    return pred, label


def ece_by_position(
    rounds: Sequence[Round], temperatures: Sequence[float], block_size: int
) -> tuple[float, list[float]]:
    """(pooled ECE over all verified positions, ECE per position 1..G)."""
    preds, labels, per = [], [], []
    for k in range(1, block_size + 1):
        p, y = survival_pairs(rounds, temperatures, k)
        per.append(expected_calibration_error(p, y))
        preds.append(p), labels.append(y)
    return expected_calibration_error(np.concatenate(preds), np.concatenate(labels)), per


def fit_temperatures(rounds: Sequence[Round], block_size: int, grid: Sequence[float] = GRID) -> list[float]:
    """STS: T_k for k = 1..G in order, each minimising the ECE of a_k with T_<k fixed.
    Positions no round verified keep T = 1; among equally good values the one nearest 1 wins."""
    temps: list[float] = []
    order = sorted(grid, key=lambda t: abs(np.log(t)))  # ties go to the mildest change
    for k in range(1, block_size + 1):
        best_t, best_e = 1.0, None
        if survival_pairs(rounds, temps + [1.0], k)[0].size:
            for t in order:
                e = expected_calibration_error(*survival_pairs(rounds, temps + [t], k))
                if best_e is None or e < best_e - 1e-12:
                    best_t, best_e = t, e
        temps.append(float(best_t))
    return temps


def collect_rounds(
    target: Target,
    drafter: BlockDrafter,
    prompts: Sequence[str | Sequence[int]],
    *,
    max_rounds: int | None = None,
    max_tokens: int = 128,
    block_size: int | None = None,
) -> tuple[list[Round], list]:
    """Run the real greedy loop (verify every drafted token) on ``prompts``; return its rounds
    with raw confidence logits, and per prompt its (RoundEvents, Rounds) for tau and acceptance."""
    rounds: list[Round] = []
    events: list[tuple[list[RoundEvent], list[Round]]] = []
    config = GenerationConfig(
        max_tokens=max_tokens,
        temperature=0.0,
        block_size=block_size or drafter.block_size,
        policy="fixed",
        stop_at_eos=False,
    )
    for prompt in prompts:
        evs = [ev for ev in generate(target, drafter, prompt, config) if isinstance(ev, RoundEvent)]
        rounds.extend(Round(ev.confidence_logits, ev.verify_width, ev.accepted) for ev in evs)
        events.append((evs, rounds[len(rounds) - len(evs) :]))
        if max_rounds is not None and len(rounds) >= max_rounds:
            break
    return rounds, events


def calibrate_rounds(fit: Sequence[Round], check: Sequence[Round], block_size: int) -> Calibration:
    """Fit STS temperatures on ``fit`` and measure ECE before/after on ``check``."""
    temps = fit_temperatures(fit, block_size)
    before, per_before = ece_by_position(check, [1.0] * block_size, block_size)
    after, per_after = ece_by_position(check, temps, block_size)
    return Calibration(
        temperatures=temps,
        ece_before=before,
        ece_after=after,
        per_position_before=per_before,
        per_position_after=per_after,
        fit_rounds=len(fit),
        check_rounds=len(check),
    )


def calibrate_drafter(
    target: Target,
    drafter: BlockDrafter,
    prompts: Sequence,
    *,
    rounds: int = 200,
    max_tokens: int = 128,
    holdout: bool = True,
) -> Calibration:
    """Collect rounds of the real loop and fit STS temperatures (``result.kept()`` are the
    ones to store in ``drafter.calibration``). With ``holdout`` the ECE is measured on every
    other prompt's rounds, fitted on the rest. The drafter is not changed: the rounds carry
    the raw confidence logits whatever its current calibration."""
    if not drafter.has_confidence:
        raise DsparkError("this drafter has no confidence head: nothing to calibrate")
    _, per_prompt = collect_rounds(target, drafter, prompts, max_rounds=rounds, max_tokens=max_tokens)
    return _fit_on_even_check_on_odd(per_prompt, drafter.block_size, holdout)


def _fit_on_even_check_on_odd(
    per_prompt: list[tuple[list[RoundEvent], list[Round]]], block_size: int, holdout: bool = True
) -> Calibration:
    # Split by prompt, not by round: rounds of one generation are correlated.
    rounds = [rs for _, rs in per_prompt]
    fit = [r for i, rs in enumerate(rounds) for r in rs if not holdout or i % 2 == 0]
    check = [r for i, rs in enumerate(rounds) for r in rs if holdout and i % 2 == 1] or fit
    every = [r for rs in rounds for r in rs]
    return replace(
        calibrate_rounds(fit, check, block_size),
        per_position_acceptance=metrics.per_position_acceptance([r.accepted for r in every], [r.width for r in every]),
    )


def evaluate_drafter(
    target: Target, drafter: BlockDrafter, prompts, max_tokens: int = 128, *, say=lambda s: None
) -> tuple[dict, Calibration | None]:
    """(figures of the real greedy loop on held-out prompts, an STS calibration fitted on
    every other prompt's rounds and checked on the others, or None without a confidence head)."""
    t0 = time.perf_counter()
    _, per_prompt = collect_rounds(target, drafter, prompts, max_tokens=max_tokens)
    f = metrics.summarize(e for es, _ in per_prompt for e in es)
    result = {
        "prompts": len(prompts),
        "rounds": f.rounds,
        "tokens": f.tokens,
        "tau": f.tau,
        "acceptance_rate": f.acceptance_rate,
        "per_position_acceptance": list(f.per_position_acceptance),
        "max_tokens_per_prompt": max_tokens,
        "by_context": metrics.by_context(e for es, _ in per_prompt for e in es),
    }
    say(
        f"held-out ({len(prompts)} prompts, {f.rounds} rounds): tau {f.tau:.3f}, acceptance by position "
        + " ".join(f"{x:.2f}" for x in f.per_position_acceptance)
    )
    cal = None
    if drafter.has_confidence and f.rounds:
        cal = _fit_on_even_check_on_odd(per_prompt, drafter.block_size)
        result["calibration"] = asdict(cal)
        say("calibration: " + format_calibration(cal))
    result["seconds"] = time.perf_counter() - t0
    return result, cal


def format_calibration(c: Calibration) -> str:
    per = lambda xs: " ".join(f"{x:.3f}" for x in xs)
    return (
        f"ECE before {c.ece_before:.4f} -> after {c.ece_after:.4f} "
        f"({c.check_rounds} rounds checked, {c.fit_rounds} fitted)\n"
        f"  per position before: {per(c.per_position_before)}\n"
        f"  per position after:  {per(c.per_position_after)}\n"
        f"  temperatures:        {per(c.temperatures)}"
    )

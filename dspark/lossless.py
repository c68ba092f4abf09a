"""Is a greedy speculative output the same as plain greedy decoding, and if not, why?

Lossless, for greedy decoding, means: the speculative output is identical to plain mlx-lm
greedy decoding, token for token, or its first difference is a *numerical tie* of the target.
On float32 targets the outputs are identical. On bf16 and quantised targets the target's
verify forward scores several rows at once, and a many-row matrix product rounds differently
from the one-row decode; the K/V rows each path writes into the cache differ in their last
bits too, so later positions see slightly different numbers. Where the target's two best
candidates are closer than that rounding, the two paths can pick different tokens, and after
that the texts continue differently. That is not a bug of the drafter or the loop.

The test, at the first differing position i (prefix = prompt + the common output before i):

- ``plain``: the log-probabilities plain decoding chose from there, by replaying mlx-lm's own
  ``generate_step`` up to i (exactly the numbers it used);
- ``one_pass``: the same log-probabilities computed in one many-row forward over the prefix,
  on a fresh cache (nothing of the speculative run is reused);
- a **tie** when the speculative token is the one-pass evaluation's greedy choice (within two
  ulps of the logits' dtype), or when plain decoding preferred its own token by no more than
  the two clean evaluations disagree (the largest plain/one-pass difference over the leading
  candidates, plus two ulps); anything else is a **mismatch**.

Both evaluations are the target's own, on the right prefix and a fresh cache, so nothing the
speculative run computed can widen the tolerance: a rollback or position bug proposes a token
neither evaluation prefers and is a mismatch. ``drift`` (how far the runs' own log-probabilities
of the tokens they shared before i were apart) is reported beside the verdict, never used by
it. On float32 targets the evaluations agree to about 1e-6, so only genuine ties qualify, and
the float32 tests demand identical output anyway. On bf16 and quantised targets the
disagreement is real (a one-row decode and a many-row forward group the arithmetic
differently; on MoE targets the grouping can flip a router's choice of expert, which moves a
log-probability by whole nats), so a difference is reported with both evaluations'
log-probabilities, for anyone to judge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from .metrics import first_difference

#: Significand bits after the point of each floating dtype: one ulp at 1.0 is 2**-bits.
_MANTISSA = {"bfloat16": 7, "float16": 10, "float32": 23}
#: How many ulps of the logits' dtype two log-probabilities may differ by and still be a tie:
#: the verify and the decode forward round the same logit independently, each by up to half
#: an ulp, and the log-softmax rounds once more.
TIE_ULPS = 2


@dataclass(frozen=True, kw_only=True)
class Difference:
    index: int  # the first output position that differs
    kind: str  # "tie" (the target's candidates are equal within rounding) or "mismatch"
    speculative: int | None  # the speculative run's token there (None: it ended first)
    plain: int | None  # plain decoding's token there
    logprobs: tuple[float, float] | None  # plain decoding's log-probs of (speculative, plain) tokens
    one_pass_logprobs: tuple[float, float] | None = None  # the same, from one many-row forward
    tolerance: float | None = None  # the largest gap of plain's log-probs that counts as a tie there
    drift: float | None = None  # the two runs' disagreement on the tokens they shared before (reported only)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    identical: bool
    first_difference: Difference | None = None

    @property
    def lossless(self) -> bool:
        return self.identical or (self.first_difference is not None and self.first_difference.kind == "tie")

    def label(self) -> str:
        """✓, "≈ tie at token N" or ✗, for a screen."""
        if self.identical:
            return "✓"
        d = self.first_difference
        return f"≈ tie at token {d.index}" if d.kind == "tie" else "✗"

    def explain(self) -> str:
        """One sentence for a tooltip or a log."""
        if self.identical:
            return "identical to plain mlx-lm greedy decoding, token for token"
        d = self.first_difference
        if d.logprobs is None:
            return f"differs from plain decoding at token {d.index}: one output ended first (a mismatch)"
        lp = (
            f"plain decoding's log-probabilities {d.logprobs[0]:.6g} (speculative token {d.speculative}) vs "
            f"{d.logprobs[1]:.6g} (its token {d.plain})"
        )
        if d.kind == "tie":
            return (
                f"first differs from plain decoding at token {d.index}, where the target's order of its two "
                f"candidates depends on how its arithmetic is grouped ({lp}; one many-row forward over the same "
                f"prefix gives {d.one_pass_logprobs[0]:.6g} vs {d.one_pass_logprobs[1]:.6g}): a numerical tie, "
                f"not a bug"
            )
        return f"differs from plain decoding at token {d.index} ({lp}): a mismatch, not a tie"

    def to_dict(self) -> dict:
        return {
            "identical": self.identical,
            "first_difference": self.first_difference.to_dict() if self.first_difference else None,
            "lossless": self.lossless,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Verdict:
        """A verdict as ``to_dict`` or the app writes it; files written before the rename say
        ``identical_to_baseline`` for ``identical``."""
        diff = d.get("first_difference")
        if diff:
            diff = Difference(**{k: tuple(x) if isinstance(x, list) else x for k, x in diff.items()})
        return cls(bool(d["identical"] if "identical" in d else d["identical_to_baseline"]), diff or None)


def ulp(x: float, dtype: str) -> float:
    """The spacing of ``dtype`` floats at magnitude ``x``."""
    bits = _MANTISSA.get(dtype, 23)
    m = abs(x)
    if m == 0 or not math.isfinite(m):
        return 2.0 ** (-126 - bits)
    return 2.0 ** (math.floor(math.log2(m)) - bits)


def classify(
    index: int,
    *,
    speculative: int | None,
    plain: int | None,
    plain_logprobs: Sequence[float] | None,
    one_pass_logprobs: Sequence[float] | None,
    dtype: str,
    drift: float | None = None,
    top: int = 8,
) -> Difference:
    """The difference at output position ``index``, where the speculative run has token
    ``speculative`` and plain decoding ``plain`` (None: that run ended first), given the target's
    log-probabilities there (of ``dtype``) by plain decoding and by one many-row forward (see the
    module docstring; None: not computed, a mismatch). A tie when the two candidates are within
    rounding of each other, the noise judged on the ``top`` best candidates; ``drift`` is
    recorded, not used."""
    if speculative is None or plain is None or plain_logprobs is None:
        return Difference(index=index, kind="mismatch", speculative=speculative, plain=plain, logprobs=None)
    P = [float(x) for x in plain_logprobs]
    F = [float(x) for x in one_pass_logprobs] if one_pass_logprobs is not None else P
    a, b = P[speculative], P[plain]
    rounding = TIE_ULPS * ulp(max(abs(a), abs(b)), dtype)
    candidates = set(sorted(range(len(P)), key=lambda v: -P[v])[:top]) | {speculative, plain}
    noise = max(abs(P[v] - F[v]) for v in candidates)  # the clean evaluations only (see above)
    one_pass_choice = max(F) - F[speculative] <= TIE_ULPS * ulp(max(F), dtype)
    kind = "tie" if one_pass_choice or b - a <= noise + rounding else "mismatch"
    return Difference(
        index=index,
        kind=kind,
        speculative=speculative,
        plain=plain,
        logprobs=(a, b),
        one_pass_logprobs=(F[speculative], F[plain]),
        tolerance=noise + rounding,
        drift=drift,
    )


def compare(target, speculative, plain, prefill_step_size: int = 2048) -> Verdict:
    """The verdict on a greedy speculative run against plain greedy decoding of the same prompt
    on the same target (both ``dspark.events.Summary``)."""
    i = first_difference(speculative.tokens, plain.tokens)
    if i is None:
        return Verdict(True)
    spec_tok = speculative.tokens[i] if i < len(speculative.tokens) else None
    plain_tok = plain.tokens[i] if i < len(plain.tokens) else None
    if spec_tok is None or plain_tok is None:
        return Verdict(
            False,
            classify(
                i, speculative=spec_tok, plain=plain_tok, plain_logprobs=None, one_pass_logprobs=None, dtype="float32"
            ),
        )
    ids = list(plain.prompt_tokens)
    logprobs, dtype = _plain_logprobs(target, ids, i, prefill_step_size)
    one_pass = _one_pass_logprobs(target, ids + list(plain.tokens[:i]), prefill_step_size)
    shared = list(zip(speculative.token_logprobs[:i], plain.token_logprobs[:i]))
    drift = max((abs(x - y) for x, y in shared), default=0.0) if shared else None  # None: a run kept none
    return Verdict(
        False,
        classify(
            i,
            speculative=spec_tok,
            plain=plain_tok,
            plain_logprobs=logprobs,
            one_pass_logprobs=one_pass,
            dtype=dtype,
            drift=drift,
        ),
    )


def _plain_logprobs(target, prompt_ids: Sequence[int], index: int, prefill_step_size: int):
    """Plain decoding's log-probabilities [V] at output position ``index`` and their dtype, by
    replaying mlx-lm's ``generate_step`` (greedy) up to there."""
    import mlx.core as mx  # noqa: PLC0415 (slow: mlx, not needed for --help)
    from mlx_lm.generate import generate_step  # noqa: PLC0415 (slow: mlx-lm)

    steps = generate_step(
        mx.array(list(prompt_ids)), target.model, max_tokens=index + 1, prefill_step_size=prefill_step_size
    )
    logprobs = None
    for n, (_, lp) in enumerate(steps):
        if n == index:
            logprobs = lp
            break
    dtype = str(logprobs.dtype).rsplit(".", 1)[-1]
    return logprobs.astype(mx.float32).tolist(), dtype


def _one_pass_logprobs(target, prefix: list[int], prefill_step_size: int):
    """Log-probabilities [V] of the token after ``prefix``, from many-row forwards (the last
    chunk holds the final position, as a verify does)."""
    import mlx.core as mx  # noqa: PLC0415 (slow: mlx, not needed for --help)

    cache = target.make_cache()
    for start in range(0, len(prefix), prefill_step_size):
        logits = target.model(mx.array([prefix[start : start + prefill_step_size]]), cache=cache)
        mx.eval(logits)
    last = logits[0, -1]
    return (last - mx.logsumexp(last, keepdims=True)).astype(mx.float32).tolist()


__all__ = ["Difference", "TIE_ULPS", "Verdict", "classify", "compare", "ulp"]

"""How many drafted tokens the target verifies each round (the verify width).

- ``fixed:K``: the first K drafted tokens (``fixed``: all of them);
- ``threshold:C``: the longest prefix whose predicted survival (the product of the drafter's
  calibrated confidences c_1..c_k) stays at or above C; needs a confidence head;
- ``auto``: DSpark's hardware-aware scheduler for one stream (Algorithm 1 of the DSpark paper
  with R = 1): admit draft k while the expected committed tokens per second of the round,
  ``(1 + a_1 + .. + a_k) / (t_draft + t_verify(k))``, still rises, and stop at its first drop.
  ``t_verify`` is this machine's measured cost of a verify forward of 1 + k rows
  (:mod:`dspark.costs`). ``a_j``, the chance that drafts 1..j are all accepted, comes from
  the confidence head when the drafter has one, else from the acceptance seen so far in the
  run (a running mean per position, starting from the drafter's profile when it has one for this
  target, else optimistic).

An autoregressive drafter (the Gemma-4 assistant, EAGLE-3) pays for each token it drafts, so for
it ``auto`` decides before the draft how many tokens to draft (:meth:`Scheduler.draft_count`): the
count with the highest expected tokens per second of all, the draft's cost growing with each
token by what rounds drafting that many were measured to pay (``draft_steps_ms``,
:mod:`dspark.costs`; later steps overlap more of the round and cost less than the first ones), so
a round drafts only the tokens whose expected acceptance pays for their own step and verify row.
It reads only earlier rounds, so it may search past a drop (below).
A block drafter's block is one forward whatever it holds (no ``draft_steps_ms``).

When ``auto`` finds that no round can pay at the current context (the costs grow with the cache,
and the acceptance it observes may fall), it decodes plainly. Now and then a plain stretch asks
the drafter for a block without verifying it (a shadow draft, :meth:`Scheduler.shadow_due`): the
tokens the target commits next say how many of it a round would have accepted, so the drafter is
judged at the price of its draft alone, and drafting resumes when the acceptance says it pays.

``auto`` judges by the clock (:class:`dspark.clock.Clock`): the costs measured once per machine are only the
prior. Every round and plain step of the run is timed, and the costs the rule prices with are the
measured ones scaled by what this run's rounds and plain steps actually took against them, so a
change of load, BLAS or power state is followed within a few rounds. A kind of step not timed lately is assumed to
have moved as the other did, so the run probes the kind it is not running (:meth:`Scheduler.drafts`):
a plain stretch verifies a round now and then when the drafter's last shadow draft was right
(that round commits tokens and says what rounds cost now), and a drafting stretch takes a plain
step now and then: at once when the kind it runs was timed 50% off since the other was. Its
plain steps run at the BLAS thread count this run finds faster, tried now and then
(:class:`dspark.clock.StepThreads`): the costs' count is only where it starts.

Every policy is lossless: the width decides only how many drafts are checked, never which
token is committed, and the decision about draft k depends on nothing the target has not yet
been asked (c_k depends on drafts 1..k-1 only, and the running means on earlier rounds only).
Stopping at the first drop, rather than searching past it, keeps it that way under sampling
(the paper's Appendix A).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .clock import Clock, StepThreads
from .errors import DsparkError

KINDS = ("fixed", "threshold", "auto")
#: Running acceptance: the prior of position 1 and its weight in rounds, and how much less each
#: older round weighs than the next.
PRIOR, PRIOR_ROUNDS, DECAY = 0.9, 2.0, 0.95
#: The weight in rounds of a prior that is the drafter's measured acceptance on this target (its
#: profile): evidence, not a guess, so a few unlucky rounds do not outweigh it. Worth 2 rounds like
#: the guess, three early rejections took the demo EAGLE-3 head and assistant to plain decoding or
#: 1-token rounds for stretches where 4 drafts paid (auto 0.86x and 0.92x of fixed:4's median
#: speedup in one interleaved run of the demo prompts; 0.97x and 0.98x with 6).
PROFILE_ROUNDS = 6.0


@dataclass(frozen=True)
class Policy:
    kind: str
    k: int | None = None  # fixed: how many (None: all)
    c: float | None = None  # threshold: the survival threshold

    def __str__(self) -> str:
        if self.kind == "fixed":
            return "fixed" if self.k is None else f"fixed:{self.k}"
        return f"threshold:{self.c:g}" if self.kind == "threshold" else "auto"


def parse(text: str) -> Policy:
    """``fixed``, ``fixed:K``, ``threshold:C`` or ``auto``; DsparkError in one sentence otherwise."""
    kind, _, arg = str(text).strip().partition(":")
    hint = "a verify policy is fixed, fixed:K (K >= 0), threshold:C (0 <= C <= 1) or auto"
    try:
        if kind == "fixed":
            k = int(arg) if arg else None
            if k is not None and not 0 <= k <= 64:
                raise ValueError
            return Policy("fixed", k=k)
        if kind == "threshold":
            c = float(arg)
            if not 0.0 <= c <= 1.0:
                raise ValueError
            return Policy("threshold", c=c)
        if kind == "auto" and not arg:
            return Policy("auto")
    except ValueError:
        pass
    raise DsparkError(f"{text!r} is not a verify policy: {hint}")


def survival(confidences: list[float]) -> list[float]:
    """a_j = c_1 * .. * c_j: the predicted chance that drafts 1..j are all accepted."""
    out, s = [], 1.0
    for c in confidences:
        s *= max(0.0, min(1.0, c))
        out.append(s)
    return out


def threshold_width(confidences: list[float], c: float, width: int) -> int:
    """The longest prefix (at most ``width``) whose survival stays at or above ``c``."""
    k = 0
    for a in survival(confidences[:width]):
        if a < c:
            break
        k += 1
    return k


def auto_width(
    a: list[float],
    draft_ms: float,
    verify_ms: list[float],
    width: int,
    *,
    draft_steps_ms: tuple[float, ...] = (),
    first_drop: bool = True,
) -> int:
    """Admit drafts in order while expected tokens per second rises; stop at the first drop.
    ``a[j-1]`` = a_j; ``verify_ms[w]`` = cost of verifying w drafts (1 + w rows); the draft costs
    ``draft_ms`` for its first token and ``draft_steps_ms`` for the further ones (none: a block, one
    forward; an autoregressive drafter's steps: :func:`draft_cost`). ``first_drop=False``: the
    count with the highest rate of all, searching past a drop. Only a decision that reads nothing
    of this round's drafts may search past it (lossless under sampling: module docstring); an
    autoregressive drafter's count is such a decision, and a measured verify cost that rises
    unevenly with its rows (one width dearer than the next) would otherwise stop it short."""
    width = min(width, len(a), len(verify_ms) - 1)
    best_k, expected = 0, 1.0

    def cost(w: int) -> float:  # measured costs are positive; never divide by 0
        return max(draft_cost(draft_ms, draft_steps_ms, w) + verify_ms[w], 1e-9)

    best = expected / cost(0)
    for j in range(1, width + 1):
        expected += a[j - 1]
        rate = expected / cost(j)
        if rate <= best:
            if first_drop:
                break
            continue
        best, best_k = rate, j
    return best_k


class RunningAcceptance:
    """Per-position conditional acceptance P(draft k accepted | drafts 1..k-1 accepted), from the
    rounds that verified position k (and the shadow drafts that were judged there); what ``auto``
    uses when the drafter has no confidence head, and to decide whether drafting pays at all.
    Each position's estimate is its accepted / tried rounds, each older round weighing ``DECAY``
    times less (a long run follows its latest ~20 rounds), over a prior. The prior of position k
    is ``prior[k-1]`` when given (the drafter's measured acceptance on this target:
    :func:`conditional`), worth ``PROFILE_ROUNDS`` rounds, else ``PRIOR`` for position 1 and for
    a later position the estimate of the one before it (a position a run rarely reaches is judged
    by its neighbour, not by an optimistic constant), worth ``PRIOR_ROUNDS``. Without a profile
    the first rounds therefore move it fast: three rejected first drafts take position 1 from 0.9
    to 0.37; from a profile's 0.78, to 0.53. Every round ages every position's evidence, so a
    position not verified for ~20 rounds is judged by its prior again (:meth:`observe`)."""

    def __init__(self, positions: int, prior: list[float] | None = None):
        self.hits = [0.0] * positions
        self.tries = [0.0] * positions
        self.prior = list(prior or [])

    @property
    def p(self) -> list[float]:
        out, prior = [], PRIOR
        for k, (h, t) in enumerate(zip(self.hits, self.tries)):
            measured = k < len(self.prior)
            weight = PROFILE_ROUNDS if measured else PRIOR_ROUNDS
            prior = (h + weight * (self.prior[k] if measured else prior)) / (t + weight)
            out.append(prior)
        return out

    def survival(self) -> list[float]:
        return survival(self.p)

    def observe(self, width: int, accepted: int) -> None:
        # Position k+1 was tried when drafts 1..k were accepted and k < width. Every round ages
        # every position's evidence, tried or not: a position the run stopped verifying after a
        # few early rejections drifts back to its prior and is tried again. Aged only when tried,
        # that estimate was never revisited and fixed auto's width for the rest of the run (the
        # demo EAGLE-3 head: 2 drafts a round after three rounds, where 5 paid).
        tried = min(accepted + 1, width, len(self.hits))
        for k in range(len(self.hits)):
            self.hits[k] = DECAY * self.hits[k] + (1.0 if k < accepted else 0.0) * (k < tried)
            self.tries[k] = DECAY * self.tries[k] + (1.0 if k < tried else 0.0)

    def reset(self) -> None:
        self.hits, self.tries = [0.0] * len(self.hits), [0.0] * len(self.tries)


def draft_cost(draft_ms: float, draft_steps_ms: tuple[float, ...], tokens: int) -> float:
    """What drafting ``tokens`` costs: ``draft_ms`` for the first (a block drafter's whole block)
    and ``draft_steps_ms[j]`` for token j + 2, a token past the last measured paying the last
    (none for a block drafter)."""
    further = max(0, tokens - 1)
    steps = list(draft_steps_ms[:further])
    if draft_steps_ms:
        steps += [draft_steps_ms[-1]] * (further - len(steps))
    return draft_ms + sum(steps)


def beats_plain(costs, tokens: float, width: int) -> bool:
    """Whether a round verifying ``width`` drafts and committing ``tokens`` (expected or seen)
    commits them at least as fast as plain steps, on ``costs`` (a :class:`dspark.costs.Costs` at
    the round's context); an autoregressive drafter is priced for ``width`` draft steps."""
    verify = costs.verify_ms[min(width, len(costs.verify_ms) - 1)]
    draft = draft_cost(costs.draft_ms, costs.draft_steps_ms, width)
    return tokens / (draft + verify) >= 1.0 / costs.step_ms


def conditional(survivals: list[float]) -> list[float]:
    """Per-position conditional acceptance from survivals a_1, a_2, .. (a drafter profile's
    per-position acceptance: the share of rounds whose drafts 1..k were all accepted): c_k =
    a_k / a_{k-1}, kept within [0.01, 1] so that no position is ruled in or out for certain."""
    out, before = [], 1.0
    for a in survivals:
        out.append(min(1.0, max(0.01, a / before if before > 0 else 0.0)))
        before = a
    return out


class Scheduler:
    """One run's width decisions under ``policy`` (``costs``: a :class:`dspark.costs.Costs`,
    required by ``auto``; ``prior``: the drafter's measured per-position acceptance, survivals as
    a profile holds them, or None)."""

    def __init__(
        self,
        policy: Policy,
        block_size: int,
        costs=None,
        prior: list[float] | None = None,
        thread_choices: tuple[int, ...] = (),
    ):
        if policy.kind == "auto" and costs is None:
            raise ValueError("the auto policy needs measured costs")
        self.policy, self.costs = policy, costs
        self.running = RunningAcceptance(block_size, conditional(prior) if prior else None)
        self.plain_run = 0  # plain steps since the last shadow draft (or since drafting stopped)
        self.shadow_every = SHADOW_FIRST
        self.clock = Clock()
        # the BLAS thread counts a plain step may run at (``thread_choices``), starting at the costs'
        start = (costs.threads or {}).get("step") if costs is not None and policy.kind == "auto" else None
        self.threads = StepThreads(start, thread_choices)
        self.since_probe, self.probe_every = 0, PROBE_FIRST  # plain steps since the last probe
        self.since_step, self.step_probe_every = 0, STEP_PROBE_FIRST  # rounds since the last plain step
        self.shadow_right = False  # the last shadow draft's first token was the target's
        self.probing = False  # the round drafted now is a probe
        # a round asks for its position's costs up to four times: made once (the bookkeeping of a
        # round 150 -> 80 us, interleaved on this project's 2-core machine; a round takes 20-40 ms).
        # A plain stretch asks for two positions in turn (the next step's decision is made before
        # this step is timed): the last two are kept, one Costs.at (~70 us) a step, not two.
        self._at: dict = {}
        self._priced: tuple = (None, None)

    def at(self, position: int):
        """The measured costs at ``position`` (``Costs.at``), kept for the round's other questions."""
        c = self._at.get(position)
        if c is None:
            if len(self._at) >= 2:
                self._at.pop(next(iter(self._at)))
            c = self._at[position] = self.costs.at(position)
        return c

    def priced(self, position: int):
        """The costs at ``position`` as this run's clock has found them (:class:`Clock`)."""
        r, s = self.clock.rounds, self.clock.steps
        if self._priced[0] != (position, r, s):
            c = self.at(position)
            self._priced = (
                (position, r, s),
                replace(
                    c,
                    verify_ms=tuple(v * r for v in c.verify_ms),
                    draft_ms=c.draft_ms * r,
                    draft_steps_ms=tuple(x * r for x in c.draft_steps_ms),
                    step_ms=c.step_ms * s,
                ),
            )
        return self._priced[1]

    def round_took(self, position: int, *, drafted: int, width: int, accepted: int, seconds: float) -> None:
        """A round at ``position`` that drafted ``drafted`` tokens (a block drafter: 1, its one
        forward), verified ``width`` and accepted ``accepted`` took ``seconds`` (its draft and
        verify). A probe that committed its tokens faster than plain steps now do brings the probes'
        interval back to its first; one that did not doubles it."""
        if self.policy.kind != "auto":
            return
        c = self.at(position)
        priced = draft_cost(c.draft_ms, c.draft_steps_ms, drafted) + c.verify_ms[min(width, len(c.verify_ms) - 1)]
        ms = self.clock.round_took(seconds * 1000, priced)
        self.since_step += 1
        if self.probing:
            self.probing = False
            paid = (1 + accepted) / ms >= 1.0 / self.priced(position).step_ms
            self.probe_every = PROBE_FIRST if paid else min(2 * self.probe_every, PROBE_MAX)

    def step_took(self, position: int, seconds: float) -> None:
        """A plain step at ``position`` took ``seconds``."""
        if self.policy.kind == "auto":
            priced = self.at(position).step_ms
            self.clock.step_took(seconds * 1000, priced)
            self.threads.took(position, seconds * 1000 / max(priced, 1e-9))
            self.since_step = 0

    def step_threads(self, position: int) -> int | None:
        """The BLAS thread count the plain step at ``position`` runs at (:class:`dspark.clock.StepThreads`);
        None: as it is."""
        return self.threads.count_for(position)

    @property
    def reads_confidences(self) -> bool:
        """Whether the decision reads a drafter's confidences when it has them (a host sync
        before the verify)."""
        return self.policy.kind in ("threshold", "auto")

    def drafts(self, position: int, budget: int) -> bool:
        """Whether the round at cache length ``position`` drafts at all. ``auto`` decodes plainly
        (:func:`dspark.plain.plain_steps`: pipelined as mlx-lm decodes, a plain step costs
        ``step_ms``) when, at this context, no round of the running acceptance can beat that:
        ``max_k (1 + a_1 + .. + a_k) / (t_draft + t_verify(k)) < 1 / t_step``. The engine asks
        once per position, a plain step's before the step before it is read. The decision reads
        only earlier rounds, shadow drafts already judged and positions: lossless as every width
        decision."""
        if self.policy.kind != "auto":
            return True
        if budget < 1:  # only the target's own token is left: a draft could not be verified
            return False
        if self.pays(position, self.running.survival()):
            self.plain_run, self.shadow_every = 0, SHADOW_FIRST
            self.since_probe = 0
            if self.since_step >= self.step_probe_every or (self.since_step >= 2 and self.clock.moved("step")):
                # a plain step among the rounds: only a timed step says whether rounds still beat it
                self.step_probe_every = min(2 * self.step_probe_every, PROBE_MAX)
                return False
            return True
        self.since_probe += 1
        self.step_probe_every = STEP_PROBE_FIRST
        due = self.since_probe >= self.probe_every or (self.since_probe >= 2 and self.clock.moved("round"))
        if self.shadow_right and due:
            # a probe: the drafter was right lately, and only a round says what rounds cost now
            self.since_probe, self.shadow_right, self.probing = 0, False, True
            return True
        return False

    def pays(self, position: int, a: list[float]) -> bool:
        """Whether the best round at ``position`` with survivals ``a`` commits tokens faster than
        plain steps, on this run's costs there (:meth:`priced`)."""
        c = self.priced(position)
        # reads only earlier rounds, so it may search past a drop (:func:`auto_width`)
        k = auto_width(a, c.draft_ms, list(c.verify_ms), len(a), draft_steps_ms=c.draft_steps_ms, first_drop=False)
        return beats_plain(c, 1 + sum(a[:k]), k)

    def draft_count(self, block_size: int, budget: int, position: int = 0) -> int:
        """How many tokens an autoregressive drafter drafts this round, decided before it drafts
        (each costs a drafter step): ``fixed:K`` K, ``fixed`` the block size, ``auto`` the
        widest prefix whose expected tokens per second still rises with each token's draft step
        and verify row (the running acceptance: such a drafter has no confidence head), at least
        one (``auto`` decodes plainly, :meth:`drafts`, when no round pays). Never more than
        ``budget``. Reads only earlier rounds: lossless as every width decision."""
        g = max(0, min(block_size, budget))
        p = self.policy
        if p.kind == "fixed":
            return g if p.k is None else min(g, p.k)
        if p.kind == "threshold":
            raise DsparkError(
                f"the {p} verify policy needs a drafter with a confidence head; this one drafts a token "
                f"at a time without one (use auto or fixed)"
            )
        if not g:
            return 0
        c = self.priced(position)
        a = self.running.survival()
        return max(
            1, auto_width(a, c.draft_ms, list(c.verify_ms), g, draft_steps_ms=c.draft_steps_ms, first_drop=False)
        )

    def shadow_due(self) -> bool:
        """Asked once per plain step of ``auto`` while no shadow draft waits to be judged: whether
        the drafter drafts a block here without a verify (a shadow draft), to be judged by
        :meth:`observe_shadow` against the tokens the target commits after it. A plain stretch
        never verifies a draft, so without this it could not see the drafter become right again.
        Every ``shadow_every`` plain steps, the interval doubling (up to ``SHADOW_MAX``) while the
        shadow drafts would not have paid: a shadow draft costs a draft, where a verified probe
        cost a draft and a verify (about two plain steps on a 2-core CPU at long context)."""
        if self.policy.kind != "auto":
            return False
        self.plain_run += 1
        if self.plain_run < self.shadow_every:
            return False
        self.plain_run = 0
        self.shadow_every = min(2 * self.shadow_every, SHADOW_MAX)
        return True

    def shadow_convinces(self, position: int, matched: int) -> bool:
        """Whether a shadow draft from ``position`` whose first ``matched`` drafts are all the target's
        tokens so far (the rest not yet known) already says a round pays: it is judged then (by
        ``dspark.shadows.judge_shadow``), not ``block_size`` steps later, since the rest cannot
        change what :meth:`observe_shadow` decides."""
        return matched >= 1 and self._shadow_pays(position, width=matched + 1, matched=matched)

    def _shadow_pays(self, position: int, *, width: int, matched: int) -> bool:
        # Without a measured profile the prior is a guess (PRIOR), and one token right by chance
        # is no sign the text has changed: an untrained head matched 1 token in about one shadow
        # in 20, and each reset to that optimism cost ~5 losing rounds (the always-wrong drafter's
        # auto ran at 0.61-0.74x of plain decoding). Then two right in a row are asked for.
        trusted = bool(self.running.prior) or matched >= 2
        return trusted and beats_plain(self.priced(position), 1 + matched, min(matched + 1, width))

    def observe_shadow(self, position: int, width: int, matched: int) -> None:
        """A shadow draft from ``position``: of its first ``width`` drafts (as far as the target
        has committed tokens since, or to the first that differs), the first ``matched`` are the
        target's tokens. Greedy, that is exactly what a round verifying them would have accepted;
        sampling, the chance that a draft equals the token sampled is below the ratio test's
        acceptance, so the estimate errs towards plain decoding. A shadow draft whose round would
        have paid sets the running acceptance back to its prior (the text has changed since the
        rounds that sent the run plain: judge the drafter afresh, from what it was measured to
        reach), so a drafter that is right again drafts again at once; one that would not have
        paid is one more round of evidence. The reset is kept only when that prior says a round
        pays here: otherwise it would send the run back to shadow drafts every ``SHADOW_FIRST``
        steps without ever drafting (each costing a draft: ~5% of a plain stretch, measured), so
        the shadow is one more round of evidence and the interval keeps growing."""
        if width < 1:
            return
        self.shadow_right = matched > 0
        if self._shadow_pays(position, width=width, matched=matched):
            kept = self.running.hits[:], self.running.tries[:]
            self.running.reset()
            if self.pays(position, self.running.survival()):
                self.plain_run, self.shadow_every = 0, SHADOW_FIRST
            else:
                self.running.hits, self.running.tries = kept
        self.running.observe(width, matched)

    def width(self, drafted: int, budget: int, confidences: list[float] | None, position: int = 0) -> int:
        w = max(0, min(drafted, budget))
        p = self.policy
        if p.kind == "fixed":
            return w if p.k is None else min(w, p.k)
        if p.kind == "threshold":
            if confidences is None:
                raise DsparkError(
                    f"the {p} verify policy needs a drafter with a confidence head; this one has none "
                    f"(use auto or fixed)"
                )
            return threshold_width(confidences, p.c, w)
        c = self.priced(position)
        a = survival(confidences) if confidences is not None else self.running.survival()
        return auto_width(a, c.draft_ms, list(c.verify_ms), w)

    def observe(self, width: int, accepted: int) -> None:
        self.running.observe(width, accepted)


#: Plain steps before the first shadow draft of a plain stretch, and the most between two.
SHADOW_FIRST, SHADOW_MAX = 4, 32
#: Plain steps before a probe (a verified round in a plain stretch, after a right shadow draft),
#: and the most between two: the interval doubles while probes do not pay, so a stretch of n plain
#: steps verifies at most ~log2(n / 16) + n / 256 rounds it did not choose for their tokens. The
#: same for the plain steps a drafting stretch takes (after 32 rounds, doubling to 256 while
#: drafting: a plain step among paying rounds costs more than a round among plain steps).
PROBE_FIRST, PROBE_MAX = 16, 256
STEP_PROBE_FIRST = 32


__all__ = [
    "KINDS",
    "Policy",
    "RunningAcceptance",
    "Scheduler",
    "auto_width",
    "beats_plain",
    "conditional",
    "draft_cost",
    "parse",
    "survival",
    "threshold_width",
]

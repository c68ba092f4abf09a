"""The diagnosis's checks: one pure function per finding code, reading :class:`Facts` (what was
measured and read) and returning a :class:`~dspark.diagnose.findings.Finding` or None. The
thresholds are named here, each with why it is where it is.

"Accepted" below is accepted drafts per round (tau - 1): the tokens a round gains over plain
decoding. Comparisons are made on greedy measurements (the profile's are greedy), so sampling
shows up only in its own check.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..drafter_profile import Profile
from .acceptance import Measurement, accepted_within, context_rounds, pooled_conditional, share_lost
from .findings import Finding

#: Fewer rounds than this in a group are too few to judge it: a share of 8 rounds moves by 12%
#: with one round.
MIN_ROUNDS = 8
#: target_mismatch: acceptance "far below" the profile is under half of it. Prompts differ from
#: the profile's held-out text, which moves acceptance by a fifth or so; other weights take most
#: of it (a drafter on another checkpoint keeps a tenth to a third).
FAR_BELOW = 0.5
#: ... and "below" (a warning) under 85% of it: more than the prompts' own spread.
BELOW = 0.85
#: convention: another reading "jumps" when it accepts 1.5 times as many drafts a round, and at
#: least half a token more (an anchor slot read off by one leaves about 0.1 accepted a round).
JUMP = 1.5
MIN_GAIN = 0.5
#: block_beyond_trained: positions past the trained block accepting under half as often (per
#: round that reached them) as the trained ones: the extra slots cost a verify each and return little.
PAST_FRACTION = 0.5
#: chat_template_off and sampling: a quarter of the accepted drafts lost is a warning; under 5% is noise.
LOSS_WARN = 0.25
LOSS_NOISE = 0.05
#: context_length: "far" is past twice the longest context trained on (or, without one, past
#: four times the first context bucket measured); acceptance there under 60% of the near
#: acceptance is falling off.
CONTEXT_FAR = 2
CONTEXT_FAR_UNKNOWN = 4
CONTEXT_FALL = 0.6
#: low_acceptance: a drafter that fits accepts its first draft in most rounds (0.5 to 0.9); under
#: a tenth it agrees with the target about as often as guessing its most common tokens would.
NEAR_CHANCE = 0.1


@dataclass(frozen=True, kw_only=True)
class Facts:
    main: Measurement  # the prompts with the settings as given
    greedy: Measurement  # the same greedy (main itself at temperature 0)
    temperature: float
    block_size: int  # drafted tokens per round in this run
    # drafts a round the drafter was trained to make; None for an autoregressive drafter, whose
    # default tokens a round is a setting, not a trained block (``run.trained_drafts``)
    trained_block: int | None
    target_fingerprint: str
    recorded_fingerprint: str | None  # the target the drafter was trained or profiled on
    # the same, finer (every parameter sampled: ``Target.weights_digest``), when the profile kept it
    target_digest: str | None = None
    recorded_digest: str | None = None
    profile: Profile | None
    has_template: bool  # the target's tokenizer has a chat template
    templated: bool | None  # this run's prompts went through it
    thinking: bool | None  # this run's thinking switch (None: no template, or it has none)
    with_template: Measurement | None = None  # greedy with the template, when this run had it off
    conventions: tuple = ()  # (name, value, Measurement) per other reading tried
    current_conventions: dict | None = None
    # what the drafter's kind says of its training text when no profile does: Google's Gemma-4
    # assistants were trained on chat-formatted text (``run.kind_trained_templated``)
    kind_templated: str | None = None  # the kind, named in the sentence, when it was


def _acc(m: Measurement) -> float:
    return max(m.tau - 1.0, 0.0)


def target_mismatch(f: Facts) -> Finding | None:
    """The drafter was trained (or profiled) against other weights of this architecture: its
    norms differ (``weights_fingerprint``), or, with the same norms, a sample of every parameter
    does (``weights_digest``: a fine-tune that left the norms alone, another quantization of the
    release). Error when its acceptance is also under half its profile's, a warning under 85%,
    info when close (or without a profile: how much it costs is unknown)."""
    rec, digest = f.recorded_fingerprint, f.recorded_digest
    if rec and rec != f.target_fingerprint:
        ev = {"recorded_fingerprint": rec, "target_fingerprint": f.target_fingerprint}
        which = f"fingerprint {rec}, this target's {f.target_fingerprint}"
    elif digest and f.target_digest and digest != f.target_digest:
        ev = {"recorded_digest": digest, "target_digest": f.target_digest}
        which = (
            f"the same norms but other weights: a fine-tune or another quantization; "
            f"weights {digest}, this target's {f.target_digest}"
        )
    else:
        return None
    if f.profile is None:
        return Finding(
            "target_mismatch",
            "info",
            f"this drafter was trained against other weights of this "
            f"target ({which}); with no profile, how much "
            f"that costs is unknown: use the target it was trained for if acceptance is low",
            ev,
        )
    m = min(len(f.profile.per_position_acceptance), len(f.greedy.per_position))
    exp, got = accepted_within(f.profile.per_position_acceptance, m), accepted_within(f.greedy.per_position, m)
    ev.update(expected_accepted=exp, accepted=got, positions=m)
    if got < BELOW * exp:
        return Finding(
            "target_mismatch",
            "error" if got < FAR_BELOW * exp else "warn",
            f"this drafter was trained against other weights of this target "
            f"({which}) and accepts {got:.2f} drafts a round "
            f"in its first {m} positions where its profile reaches {exp:.2f}: run it with the target it was "
            f"trained for, or train a drafter for this one",
            ev,
        )
    return Finding(
        "target_mismatch",
        "info",
        f"this drafter was trained against other weights of this target "
        f"({which}), yet accepts {got:.2f} drafts a round "
        f"against its profile's {exp:.2f}: close enough to keep",
        ev,
    )


def convention(f: Facts) -> Finding | None:
    """Another reading of a published checkpoint accepts far more: name the flag that selects it."""
    if not f.conventions:
        return None
    from ..formats.conventions import describe, flag  # noqa: PLC0415 (slow: mlx)

    name, value, best = max(f.conventions, key=lambda c: _acc(c[2]))
    now, alt = _acc(f.greedy), _acc(best)
    if alt < JUMP * now or alt - now < MIN_GAIN:
        return None
    was = (f.current_conventions or {}).get(name)
    ev = {
        "convention": name,
        "value": value,
        "was": was,
        "accepted": now,
        "accepted_with_it": alt,
        "flag": flag(name, value),
    }
    return Finding(
        "convention",
        "error",
        f"read with {describe(name, was)}, this drafter accepts {now:.2f} drafts a "
        f"round; with {describe(name, value)} it accepts {alt:.2f} on the same prompts: its weights follow "
        f"the other convention. Add {flag(name, value)} to its config.json",
        ev,
    )


def chat_template_off(f: Facts) -> Finding | None:
    """The prompts skipped the target's chat template: warn when the profile says the drafter was
    trained on templated text or when the template measurably raises acceptance."""
    if not f.has_template or f.templated or f.with_template is None:
        return None
    without, with_ = _acc(f.greedy), _acc(f.with_template)
    lost = share_lost(without, with_)
    trained = f.profile.templated if f.profile is not None else None
    by_kind = trained is None and f.kind_templated is not None
    trained = True if by_kind else trained
    ev = {"accepted": without, "accepted_with_template": with_, "share_lost": lost, "trained_templated": trained}
    if trained is not True and lost < LOSS_WARN:
        return None
    why = (
        f"a {f.kind_templated} is trained on chat-formatted text, and "
        if by_kind
        else "this drafter's profile says it was trained on templated text, and "
        if trained
        else ""
    )
    return Finding(
        "chat_template_off",
        "warn",
        f"the prompts were not put in the target's chat template "
        f"(--ignore-chat-template); {why}it accepts {without:.2f} drafts a round without the template and "
        f"{with_:.2f} with it ({lost:.0%} lost): drop --ignore-chat-template",
        ev,
    )


def thinking_mode(f: Facts) -> Finding | None:
    """Thinking is on (or off) in the chat template where the drafter was profiled the other way;
    with no profile saying either, thinking on is worth knowing."""
    if f.thinking is None:
        return None
    trained = f.profile.thinking if f.profile is not None else None
    ev = {"thinking": f.thinking, "trained_thinking": trained}
    if trained is None:
        if not f.thinking:
            return None
        return Finding(
            "thinking_mode",
            "info",
            "thinking is on in the chat template (enable_thinking); whether this "
            "drafter was trained with it is unknown (no profile says): published drafters mostly were not, "
            "so compare with it off if acceptance is low",
            ev,
        )
    if trained == f.thinking:
        return None
    now, then = ("on", "off") if f.thinking else ("off", "on")
    fix = (
        "drop enable_thinking from --chat-template-config"
        if f.thinking
        else "add --chat-template-config '{\"enable_thinking\": true}'"
    )
    return Finding(
        "thinking_mode",
        "warn",
        f"thinking is {now} in the chat template but this drafter's profile says it "
        f"was trained with thinking {then}: its drafts follow text it never saw here; {fix}",
        ev,
    )


def block_beyond_trained(f: Facts) -> Finding | None:
    """The block is larger than the drafter was trained with; warn when the extra positions
    accept at a fraction of the trained ones. Read from the greedy pass (every draft verified),
    and judged only when at least ``MIN_ROUNDS`` rounds reached the first extra position."""
    K, T = f.block_size, f.trained_block
    if T is None or K <= T:  # an autoregressive drafter has no trained block: any count is a setting
        return None
    pos = f.greedy.per_position
    within, past = pooled_conditional(pos, 0, T), pooled_conditional(pos, T, K)
    reached = round(f.greedy.rounds * pos[T - 1]) if len(pos) >= T else 0  # rounds that drafted position T + 1
    ev = {"block_size": K, "trained_block": T, "within": within, "past": past, "rounds_past": reached}
    if within is None or past is None or reached < MIN_ROUNDS:
        return Finding(
            "block_beyond_trained",
            "info",
            f"--block-size {K} is past the {T} positions this drafter was "
            f"trained for, and {reached} rounds (greedy) reached them here, too few to judge: use "
            f"--block-size {T}, or more prompts to measure the larger block",
            ev,
        )
    ratio = past / within if within > 0 else 1.0
    ev["ratio"] = ratio
    figures = (
        f"--block-size {K} is past the {T} positions this drafter was trained for: greedy, positions {T + 1}-{K} "
        f"accept {past:.0%} of the {reached} rounds that reach them against {within:.0%} for positions 1-{T} "
        f"({ratio:.2f} as often)"
    )
    if ratio < PAST_FRACTION:
        return Finding(
            "block_beyond_trained",
            "warn",
            f"{figures}; each costs a verified token and returns little: use --block-size {T}",
            ev,
        )
    return Finding(
        "block_beyond_trained",
        "info",
        f"{figures}: they hold up on these prompts, so the larger block may "
        f"pay; compare the speed with --block-size {T}",
        ev,
    )


def context_length(f: Facts) -> Finding | None:
    """Acceptance by context length falls off past what the drafter was trained on."""
    ctx, trained = f.greedy.by_context, f.profile.context_length if f.profile is not None else None
    if trained:
        far_from = CONTEXT_FAR * trained
        near_n, near = context_rounds(ctx, -1, trained)
        if near_n < MIN_ROUNDS:
            near = f.profile.per_position_acceptance[0]
    else:
        first = ctx[0] if ctx else None
        if first is None or first["rounds"] < MIN_ROUNDS or first["to"] is None:
            return None
        far_from, near = CONTEXT_FAR_UNKNOWN * first["to"], first["first_acceptance"]
    far_n, far = context_rounds(ctx, far_from)
    if far_n < MIN_ROUNDS or near is None or far is None or far >= CONTEXT_FALL * near:
        return None
    ev = {
        "trained_context": trained,
        "far_from": far_from,
        "far_rounds": far_n,
        "far_first_acceptance": far,
        "near_first_acceptance": near,
    }
    known = (
        f"this drafter was trained on up to {trained} tokens"
        if trained
        else "no profile says how long a context this drafter was trained on"
    )
    return Finding(
        "context_length",
        "warn",
        f"past {far_from} tokens of context ({known}) the first draft is "
        f"accepted in {far:.0%} of {far_n} rounds against {near:.0%} at short contexts: shorten the "
        f"prompts, or train the drafter on contexts this long (--long-prompts, --long-prompt-len)",
        ev,
    )


def sampling(f: Facts) -> Finding | None:
    """Acceptance at this temperature against greedy on the same prompts, and the share lost."""
    if f.temperature <= 0:
        return None
    now, greedy = _acc(f.main), _acc(f.greedy)
    lost = share_lost(now, greedy)
    if lost < LOSS_NOISE:
        return None
    ev = {"temperature": f.temperature, "accepted": now, "accepted_greedy": greedy, "share_lost": lost}
    return Finding(
        "sampling",
        "warn" if lost >= LOSS_WARN else "info",
        f"at temperature {f.temperature:g} the "
        f"drafter keeps {now:.2f} drafts a round against {greedy:.2f} greedy on the same prompts: sampling "
        f"costs {lost:.0%} of them (a draft is kept with probability min(1, p/q), below 1 wherever the "
        f"two distributions differ); lower the temperature where the output allows it",
        ev,
    )


def low_acceptance(f: Facts, others: list[Finding]) -> Finding | None:
    """Position-1 acceptance near chance and no other warning or error explains it."""
    g = f.greedy
    if g.rounds < MIN_ROUNDS or g.first >= NEAR_CHANCE or any(o.severity in ("warn", "error") for o in others):
        return None
    return Finding(
        "low_acceptance",
        "error",
        f"the first draft is accepted in {g.first:.0%} of {g.rounds} rounds, "
        f"near chance, and no other cause was found: this drafter does not fit this target or this text",
        {"first_acceptance": g.first, "rounds": g.rounds},
    )


CHECKS = (target_mismatch, convention, chat_template_off, thinking_mode, block_beyond_trained, context_length, sampling)


def run_checks(f: Facts) -> list[Finding]:
    """Every check's finding, low_acceptance last (it speaks only when nothing else does)."""
    found = [x for x in (check(f) for check in CHECKS) if x is not None]
    last = low_acceptance(f, found)
    return found + ([last] if last else [])


__all__ = ["CHECKS", "Facts", "run_checks"]

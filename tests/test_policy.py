"""Verify-width policies: the pure rules, auto's scheduler (plain steps, shadow drafts, the
profile's prior) and every policy staying exactly lossless (greedy) on targets whose sliding
window wraps. The costs they weigh: ``test_costs.py``."""

from __future__ import annotations

import pytest
from oracle import OracleDrafter
from same import assert_same_greedy
from tiny import PROMPT, STEEP, WRAPPING, ScriptedClock, tiny_target, wrapping_case

from dspark import DflashConfig, DflashDrafter, GenerationConfig, generate, run_to_summary
from dspark.costs import Costs
from dspark.errors import DsparkError
from dspark.policy import RunningAcceptance, auto_width, parse, survival, threshold_width

#: A machine where a round pays when its first drafts are mostly right, and each further row
#: costs more: the width the running acceptance supports is short when later drafts are wrong.
GENTLE = Costs(verify_ms=(2.0, 2.1, 2.3, 2.6, 3.0, 3.5, 4.1), draft_ms=0.3, step_ms=2.0)


@pytest.fixture(scope="module", params=list(WRAPPING))
def case(request):
    return wrapping_case(request.param)


def test_parse_round_trips():
    for text in ("fixed", "fixed:0", "fixed:3", "threshold:0.25", "auto"):
        assert str(parse(text)) == text


def test_auto_admits_while_the_rate_rises_and_stops_at_the_first_drop():
    # flat costs: every likely draft is worth verifying
    assert auto_width([0.9, 0.8, 0.7], 1.0, [1.0, 1.0, 1.0, 1.0], 3) == 3
    # steep costs: nothing is (the round verifies the anchor alone)
    assert auto_width([0.5, 0.2, 0.1], 1.0, [1.0, 5.0, 9.0, 13.0], 3) == 0
    # rate 1/2, then 1.9/2.5 = 0.76, then 2.0/3 = 0.67 (a drop): stop at 1 even though
    # a later position would be cheap again; looking past the drop would peek at later drafts
    assert auto_width([0.9, 0.1, 0.1], 1.0, [1.0, 1.5, 2.0, 2.05], 3) == 1
    assert auto_width([0.9, 0.9, 0.9], 1.0, [1.0, 1.0, 1.0, 1.0], 2) == 2  # the budget caps it


def test_threshold_keeps_the_prefix_whose_survival_stays_above():
    assert survival([0.9, 0.5, 1.0]) == pytest.approx([0.9, 0.45, 0.45])
    assert threshold_width([0.9, 0.5, 1.0], 0.5, 3) == 1
    assert threshold_width([0.9, 0.5, 1.0], 0.4, 3) == 3
    assert threshold_width([0.9, 0.5, 1.0], 0.4, 2) == 2


def test_running_acceptance_learns_from_the_positions_that_were_tried():
    r = RunningAcceptance(3)
    for _ in range(60):
        r.observe(width=3, accepted=1)  # position 1 always accepted, position 2 always rejected
    assert r.p[0] > 0.98 and r.p[1] < 0.1  # the latest ~20 rounds, over a prior worth 2
    assert r.p[2] == pytest.approx(r.p[1])  # 3 was never tried: judged by its neighbour, not a constant
    fresh = RunningAcceptance(3)
    for _ in range(3):
        fresh.observe(width=3, accepted=0)
    assert 0.3 < fresh.p[0] < 0.4  # the first rounds move it fast


POLICIES = ["fixed:2", "threshold:0.05", "auto"]


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_matches_plain_greedy(case, policy, monkeypatch):
    from dspark.drafting import BlockDraftSession

    target, n, ref = case
    drafter = DflashDrafter.init(target, DflashConfig(block_size=6, num_layers=1, markov_rank=16), seed=2)
    asked = []
    propose = BlockDraftSession.propose
    monkeypatch.setattr(BlockDraftSession, "propose", lambda s, *a, **k: asked.append(a[1]) or propose(s, *a, **k))
    cfg = GenerationConfig(max_tokens=n, stop_at_eos=False, policy=policy)
    s = run_to_summary(generate(target, drafter, PROMPT, cfg, costs=STEEP))
    assert_same_greedy(target, PROMPT, s.tokens, ref)
    if policy == "fixed:2":
        assert set(s.verify_widths) <= {0, 1, 2} and 2 in s.verify_widths
    elif policy == "auto":  # a random drafter never pays on this machine: plain steps, shadow drafts now and then
        assert s.plain_steps > n // 2 and s.rounds <= n // 8 and all(w >= 1 for w in s.verify_widths)
        assert s.rounds < len(asked) <= s.rounds + 2 + n // 4  # the shadow drafts: every 4 plain steps at most
    else:
        assert len(set(s.verify_widths)) > 1  # the policy did choose


class SwitchingOracle(OracleDrafter):
    """Always wrong before position ``switch``, always right from it on; counts its drafts."""

    def __init__(self, sequence, vocab, switch, block_size=6):
        super().__init__(sequence, vocab, block_size=block_size, corrupt=0.0)
        self.switch, self.drafts_at = switch, []

    def propose(self, anchor, position, *, new_rows, history, block_size, sampling, key):
        self.drafts_at.append(position)
        self.corrupt = 1.0 if position < self.switch else 0.0
        out = super().propose(
            anchor, position, new_rows=new_rows, history=history, block_size=block_size, sampling=sampling, key=key
        )
        if position < self.switch:  # a wrong token for sure: the true one shifted
            out.tokens = (out.tokens + 1) % self.vocab
        return out


def test_auto_decodes_plainly_where_no_round_pays_and_drafts_again_when_it_does(case):
    """The floor under the speed: while the drafter is always wrong, a round cannot beat the
    target alone, so auto stops asking the drafter (a shadow draft now and then, no verified round); once the
    drafts are right, a shadow draft (drafted, not verified) sees it and drafting resumes. Lossless
    throughout."""
    target, n, ref = case
    costs = Costs(verify_ms=(2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6), draft_ms=1.0, step_ms=2.0)
    switch = len(PROMPT) + n // 4
    oracle = SwitchingOracle(PROMPT + ref, target.dims.vocab_size, switch)
    cfg = GenerationConfig(max_tokens=n, stop_at_eos=False, policy="auto")
    events = list(generate(target, oracle, PROMPT, cfg, costs=costs))
    s = events[-1]
    assert_same_greedy(target, PROMPT, s.tokens, ref)
    early = [p for p in oracle.drafts_at if p < switch]
    early_rounds = [e for e in events[:-1] if not e.plain_step and e.position < switch]
    assert s.plain_steps > 0 and len(early_rounds) <= 3  # the optimistic prior's first rounds, then none verified
    assert len(early) <= len(early_rounds) + (switch - len(PROMPT)) // 4  # shadow drafts, at most every 4 steps
    late = [e for e in events[:-1] if e.tokens_generated > n // 4 + 40]  # shadow drafts are at most 32 steps apart
    assert late and sum(e.plain_step for e in late) <= len(late) // 4  # drafting again, and paying
    assert max(e.accepted for e in late) == 6


def test_a_shadow_draft_that_would_have_paid_brings_drafting_back():
    from dspark.policy import Policy, Scheduler

    costs = Costs(verify_ms=(2.0, 2.1, 2.2, 2.3, 2.4), draft_ms=1.0, step_ms=2.0)
    s = Scheduler(Policy("auto"), 4, costs)
    for _ in range(6):
        s.observe(4, 0)
    assert not s.drafts(100, 50)
    s.observe_shadow(100, 1, 0)  # wrong at once: still plain
    assert not s.drafts(101, 50)
    s.observe_shadow(101, 4, 4)  # all four right: a round would have paid
    assert s.drafts(102, 50)


def test_auto_follows_the_clock_to_plain_steps_and_back(monkeypatch):
    """The machine gets busy mid-run: for a while every round takes 3x what the costs price it at
    (plain steps their price), with a drafter that is always right. auto goes plain within a few
    rounds, probes now and then (a verified round after a right shadow draft), and drafts again
    once a probe finds rounds paying; lossless throughout."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    target, n = tiny_target(seed=0, scale=0.15, vocab=96, window=16), 400
    ref = [tok for tok, _ in generate_step(mx.array(PROMPT), target.model, max_tokens=n)]
    busy_from, busy_until = 8, 120
    clock = type("Busy", (ScriptedClock,), {"busy_from": busy_from, "busy_until": busy_until, "factor": 3.0})
    monkeypatch.setattr("dspark.policy.Clock", clock)
    # a full round pays (7 tokens in 6 ms against 2 ms a step); at 3x its price none does
    costs = Costs(verify_ms=(2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0), draft_ms=1.0, step_ms=2.0)
    oracle = OracleDrafter(PROMPT + ref, target.dims.vocab_size, block_size=6, corrupt=0.0)
    cfg = GenerationConfig(max_tokens=n, stop_at_eos=False, policy="auto")
    events = list(generate(target, oracle, PROMPT, cfg, costs=costs))
    assert_same_greedy(target, PROMPT, events[-1].tokens, ref)
    timed = events[:-1]  # every event is one timed round or plain step, in order
    assert not any(e.plain_step for e in timed[: busy_from - 1])  # drafting while rounds pay
    first_plain = next(i for i, e in enumerate(timed) if e.plain_step)
    assert busy_from - 1 < first_plain <= busy_from + 2  # a plain step at once (the step's probe)
    settled = next(i for i in range(first_plain, len(timed)) if all(e.plain_step for e in timed[i : i + 8]))
    assert settled <= busy_from + 8  # plain within a few slow rounds
    busy = timed[settled : busy_until - 1]
    probes = [e for e in busy if not e.plain_step]
    assert 1 <= len(probes) <= 4 and sum(e.plain_step for e in busy) > 80  # plain, probing rarely
    after = timed[busy_until - 1 :]
    back = next(i for i, e in enumerate(after) if not e.plain_step)
    assert back <= 70  # the next probe finds rounds paying again (probes are at most 64 steps apart here)
    again = after[back:]  # drafting, with a plain step now and then (the clock's step probes)
    assert sum(e.plain_step for e in again) <= 2 + len(again) // 8 and max(e.accepted for e in after) == 6


def test_shadow_drafts_that_pay_only_on_evidence_are_kept_as_evidence():
    """A drafter whose profile undersells it here: each shadow draft is right and its round
    would have paid, but at the profile's acceptance no round pays. Setting the estimate back
    to the profile would throw that evidence away and shadow-draft every 4 steps for ever (a
    draft's cost each: ~5% of a plain stretch); kept, a few shadows bring drafting back."""
    from dspark.policy import SHADOW_FIRST, Policy, Scheduler

    costs = Costs(verify_ms=(2.0, 3.0, 3.5, 4.0), draft_ms=0.5, step_ms=2.0)
    s = Scheduler(Policy("auto"), 3, costs, prior=[0.2, 0.05, 0.01])
    shadows, position = 0, 100
    while not s.drafts(position, 50):
        position += 1
        assert position < 400, "never drafted again"
        if s.shadow_due():
            shadows += 1
            s.observe_shadow(position, 1, 1)
    assert shadows <= 8 and position - 100 > SHADOW_FIRST * shadows


def test_auto_starts_from_the_drafters_measured_acceptance():
    """With a profile measured on this target, auto's running acceptance starts from it: a drafter
    that accepted little there starts plain where an unprofiled one (optimistic) drafts, and
    one that accepted much drafts; what the run observes then moves the estimate as before."""
    from dspark.policy import Policy, Scheduler, conditional

    costs = Costs(verify_ms=(2.0, 2.1, 2.2, 2.3), draft_ms=1.0, step_ms=2.0)
    assert Scheduler(Policy("auto"), 3, costs).drafts(100, 50)
    assert not Scheduler(Policy("auto"), 3, costs, prior=[0.2, 0.05, 0.01]).drafts(100, 50)
    assert Scheduler(Policy("auto"), 3, costs, prior=[0.9, 0.8, 0.7]).drafts(100, 50)
    assert conditional([0.5, 0.25, 0.0]) == pytest.approx([0.5, 0.5, 0.01])
    s = Scheduler(Policy("auto"), 3, costs, prior=[0.2, 0.05, 0.01])
    for _ in range(8):  # shadow drafts that were right in full
        s.observe_shadow(100, 3, 3)
    assert s.drafts(100, 50)


def test_auto_without_a_confidence_head_learns_widths_and_stays_exact(case):
    """An oracle drafter (no confidence head) whose later positions are mostly wrong: auto's
    running acceptance must shrink the width, and the output stays plain greedy's."""
    target, n, ref = case
    oracle = OracleDrafter(PROMPT + ref, target.dims.vocab_size, block_size=6, corrupt=0.5, seed=3)
    cfg = GenerationConfig(max_tokens=n, stop_at_eos=False, policy="auto")
    s = run_to_summary(generate(target, oracle, PROMPT, cfg, costs=GENTLE))
    assert_same_greedy(target, PROMPT, s.tokens, ref)
    late = s.verify_widths[len(s.verify_widths) // 2 :]
    assert max(late) < 6 and len(set(s.verify_widths)) > 1


def test_threshold_without_a_confidence_head_is_one_sentence(case):
    target, n, ref = case
    oracle = OracleDrafter(PROMPT + ref, target.dims.vocab_size, block_size=6, corrupt=0.0)
    cfg = GenerationConfig(max_tokens=8, stop_at_eos=False, policy="threshold:0.5")
    with pytest.raises(DsparkError, match="needs a drafter with a confidence head"):
        run_to_summary(generate(target, oracle, PROMPT, cfg))


def test_auto_weighs_a_round_against_a_plain_step_as_mlx_lm_runs_it():
    """The floor compares a round with what plain decoding costs (``step_ms``, pipelined), not
    with a round of width 0 (``verify_ms[0]``, read before anything else is queued): here a
    round beats the second and not the first, so auto decodes plainly."""
    from dspark.policy import Policy, Scheduler

    costs = Costs(verify_ms=(4.0,) * 7, draft_ms=0.5, step_ms=1.0)
    sched = Scheduler(Policy("auto"), 6, costs)
    for _ in range(3):
        sched.observe(width=6, accepted=0)  # position 1 near 0.37: about 1.6 tokens a 4.5 ms round
    assert not sched.drafts(100, budget=50)
    a = sched.running.survival()
    assert 1.0 / costs.verify_ms[0] < (1 + sum(a)) / (costs.draft_ms + costs.verify_ms[6]) < 1.0 / costs.step_ms
    cheap = Scheduler(Policy("auto"), 6, Costs(verify_ms=(4.0,) * 7, draft_ms=0.5, step_ms=4.0))
    cheap.running = sched.running
    assert cheap.drafts(100, budget=50)  # against a plain step as dear as the verify, the same round pays


def test_an_autoregressive_drafts_cost_grows_with_each_token():
    from dspark.policy import draft_cost

    assert draft_cost(1.0, (), 6) == 1.0  # a block: one forward whatever it holds
    assert draft_cost(1.0, (0.5,), 1) == 1.0 and draft_cost(1.0, (0.5,), 4) == 2.5
    assert draft_cost(1.0, (0.5, 0.25), 4) == 2.0  # each further token its own cost, the last after
    # the same acceptance and verify costs: a block drafter verifies 3, a drafter paying 1.5 ms a
    # token stops at 1 (the second token's step costs more than its expected 0.8 tokens bring)
    a, verify = [0.9, 0.8, 0.7], [1.0, 1.1, 1.2, 1.3]
    assert auto_width(a, 1.0, verify, 3) == 3
    assert auto_width(a, 1.0, verify, 3, draft_steps_ms=(1.5,)) == 1


def test_the_policy_sets_how_many_tokens_an_autoregressive_drafter_drafts():
    from dspark.policy import Policy, Scheduler

    cheap = Costs(verify_ms=(2.0, 2.1, 2.2, 2.3, 2.4), draft_ms=0.2, step_ms=2.0, draft_steps_ms=(0.2,))
    dear = Costs(verify_ms=(2.0, 2.1, 2.2, 2.3, 2.4), draft_ms=0.2, step_ms=2.0, draft_steps_ms=(3.0,))
    assert Scheduler(Policy("fixed", k=2), 4).draft_count(4, 50) == 2
    assert Scheduler(Policy("fixed"), 4).draft_count(4, 3) == 3  # never more than the budget
    assert Scheduler(Policy("auto"), 4, cheap).draft_count(4, 50) == 4
    assert Scheduler(Policy("auto"), 4, dear).draft_count(4, 50) == 1
    with pytest.raises(DsparkError, match="confidence head"):
        Scheduler(Policy("threshold", c=0.5), 4).draft_count(4, 50)


class StepwiseOracle(OracleDrafter):
    """An oracle that drafts a token per step (as the Gemma-4 assistant and EAGLE-3 do): the
    engine asks the policy how many before each draft."""

    autoregressive = True

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.asked = []

    def propose(self, anchor, position, *, new_rows, history, block_size, sampling, key):
        self.asked.append(block_size)
        assert len(history) == position + 1 and history[-1] == anchor
        return super().propose(
            anchor, position, new_rows=new_rows, history=history, block_size=block_size, sampling=sampling, key=key
        )


@pytest.mark.parametrize("policy", ["fixed:3", "auto"])
def test_an_autoregressive_drafter_drafts_what_the_policy_pays_for_and_stays_lossless(case, policy):
    target, n, ref = case
    oracle = StepwiseOracle(PROMPT + ref, target.dims.vocab_size, block_size=6, corrupt=0.3)
    dear = Costs(verify_ms=(2.0, 2.05, 2.1, 2.15, 2.2, 2.25, 2.3), draft_ms=0.2, step_ms=2.0, draft_steps_ms=(0.5,))
    cfg = GenerationConfig(max_tokens=n, stop_at_eos=False, policy=policy)
    s = run_to_summary(generate(target, oracle, PROMPT, cfg, costs=dear))
    assert_same_greedy(target, PROMPT, s.tokens, ref)
    asked = [g for g in oracle.asked if g]
    if policy == "fixed:3":
        assert set(asked) <= {1, 2, 3} and asked.count(3) >= len(asked) - 2  # 3 but near the budget's end
    else:  # a token in three is wrong: a 0.5 ms step pays for the second or third token, not the sixth
        assert asked and max(asked) < 6 and sorted(asked)[len(asked) // 2] in (2, 3)


def test_a_position_not_verified_lately_is_tried_again():
    """Six early rounds rejecting the third draft send an autoregressive drafter's count to 2
    (three no longer do: the drafter's measured acceptance weighs ``PROFILE_ROUNDS`` rounds); a
    few rounds later that estimate has aged back towards the measured acceptance and the third
    draft is tried again (aged only when tried, it stayed near 0.4 for the whole run)."""
    from dspark.policy import Policy, Scheduler

    costs = Costs(verify_ms=(10.0, 11.0, 12.0, 13.0, 14.0), draft_ms=1.0, step_ms=12.0, draft_steps_ms=(1.0,))
    sched = Scheduler(Policy("auto"), 4, costs, prior=[0.8, 0.64, 0.51, 0.41])
    assert sched.draft_count(4, 50) == 4
    for _ in range(3):
        sched.observe(width=3, accepted=2)
    assert sched.draft_count(4, 50) == 3
    for _ in range(3):
        sched.observe(width=3, accepted=2)
    assert sched.draft_count(4, 50) == 2
    counts = []
    for _ in range(40):
        counts.append(sched.draft_count(4, 50))
        sched.observe(width=counts[-1], accepted=min(counts[-1], 2))
    assert max(counts) >= 3


def test_an_autoregressive_count_searches_past_an_uneven_verify():
    """A verify that costs the same for 3 drafts as for 4 and rises unevenly before: the count
    with the best rate of all (4), not the first drop (2)."""
    a, verify = [0.7, 0.55, 0.43, 0.34], [10.0, 11.0, 11.5, 14.5, 14.5]
    assert auto_width(a, 1.0, verify, 4, draft_steps_ms=(0.5,)) == 2
    assert auto_width(a, 1.0, verify, 4, draft_steps_ms=(0.5,), first_drop=False) == 4


def test_the_costs_a_round_asks_for_follow_the_position_and_the_clock(monkeypatch):
    """The round's costs are made once and kept for its other questions: the kept ones must be
    the position's (``Costs.at``) and the clock's now, never a former round's."""
    from dspark.policy import Policy, Scheduler

    busy = type("Busy", (ScriptedClock,), {"busy_from": 1, "busy_until": 100, "factor": 3.0})
    monkeypatch.setattr("dspark.policy.Clock", busy)

    costs = Costs(
        verify_ms=(2.0, 3.0),
        draft_ms=1.0,
        step_ms=2.0,
        context=100,
        longer=((1100, (4.0, 6.0), 2.0, 3.0),),
    )
    s = Scheduler(Policy("auto"), 1, costs)
    assert s.priced(100).step_ms == pytest.approx(2.0) and s.priced(600).step_ms == pytest.approx(2.5)
    assert s.at(600) == costs.at(600) and s.at(100) == costs.at(100)
    for _ in range(3):  # rounds now take three times their price: priced anew
        s.round_took(600, drafted=1, width=1, accepted=0, seconds=0.0)
    assert s.priced(600).verify_ms[1] == pytest.approx(3 * costs.at(600).verify_ms[1])
    assert s.priced(600).draft_ms == pytest.approx(3 * costs.at(600).draft_ms)


def test_one_lucky_token_does_not_send_a_drafter_without_a_profile_back_to_drafting():
    """Without a measured profile the prior is a guess: a shadow draft right for one token (an
    untrained head's luck, about one shadow in 20) is evidence, not a reset to that optimism (each
    reset cost ~5 losing rounds: the always-wrong drafter's auto ran at 0.61x of plain decoding);
    two right in a row bring drafting back, as a profile's prior does after one."""
    from dspark.policy import Policy, Scheduler

    costs = Costs(verify_ms=(10.0, 11.0, 12.0, 13.0, 14.0), draft_ms=4.0, step_ms=10.0)
    s = Scheduler(Policy("auto"), 4, costs)
    for _ in range(8):
        s.observe(1, 0)
    assert not s.drafts(100, 50)
    s.observe_shadow(100, 4, 1)  # right once, then wrong: the round would have paid (2 tokens, 15 ms)
    assert not s.drafts(101, 50)
    s.observe_shadow(101, 4, 3)
    assert s.drafts(102, 50)
    profiled = Scheduler(Policy("auto"), 4, costs, prior=[0.6, 0.3, 0.15, 0.07])
    for _ in range(20):
        profiled.observe(1, 0)
    assert not profiled.drafts(100, 50)
    profiled.observe_shadow(100, 4, 1)
    assert profiled.drafts(101, 50)


def test_the_clock_is_not_decided_by_a_first_stall():
    """A run's first round on a busy machine took 9x its price: alone in the clock's window it set
    rounds at 3x (the clip), and a drafter of tau 4.9 went plain. The costs as measured count as
    ratios of 1.0 until outnumbered: one stall moves nothing, three slow rounds do; a probe after
    a stretch of the other kind still says what it finds (its window starts afresh)."""
    from dspark.clock import CLIP, WINDOW, Clock

    c = Clock()
    c.round_took(9 * 30.0, 30.0)
    assert c.rounds == 1.0 and c.steps == 1.0
    c.round_took(30.0, 30.0)
    assert c.rounds == 1.0
    slow = Clock()
    for _ in range(3):
        slow.round_took(2 * 30.0, 30.0)
    assert slow.rounds == 2.0
    for _ in range(WINDOW):
        slow.step_took(10.0, 10.0)
    slow.round_took(9 * 30.0, 30.0)  # a probe after WINDOW steps: what it says now (clipped)
    assert slow.rounds == CLIP


def test_plain_steps_keep_the_faster_blas_thread_count():
    """The costs' thread count for a plain step was chosen at one moment's load; under another,
    plain decoding ran 1.9x faster at the other count. Every TRY_EVERY plain steps the next TRY
    try the other count; the run keeps it when its steps took BETTER or less of the first's, and
    goes back when the load turns; one count only (or none): nothing is tried."""
    from dspark.clock import TRY, TRY_EVERY, StepThreads

    def run(t: StepThreads, steps: int, cost: dict, start: int = 0) -> list:
        counts = []
        for p in range(start, start + steps):
            n = t.count_for(p)
            counts.append(n)
            t.took(p, cost[n])
        return counts

    t = StepThreads(1, (1, 2))
    counts = run(t, TRY_EVERY + TRY, {1: 1.0, 2: 0.6})
    assert counts == [1] * TRY_EVERY + [2] * TRY and t.now == 2  # two threads paid: kept
    counts = run(t, TRY_EVERY + TRY, {1: 1.0, 2: 0.98}, start=100)
    assert counts == [2] * TRY_EVERY + [1] * TRY and t.now == 2  # one thread no better by 5%: stays
    counts = run(t, TRY_EVERY + TRY, {1: 0.5, 2: 1.0}, start=200)
    assert t.now == 1  # the load turned: back to one
    assert set(run(StepThreads(2, (2,)), 3 * TRY_EVERY, {2: 1.0})) == {2}
    assert set(run(StepThreads(None, (1, 2)), 3 * TRY_EVERY, {None: 1.0})) == {None}

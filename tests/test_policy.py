"""Verify-width policies: the pure rules, the measured costs and their cache, and every policy
staying exactly lossless (greedy) on targets whose sliding window wraps."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step

from dspark import DflashConfig, DflashDrafter, GenerationConfig, generate, run_to_summary
from dspark import costs as costs_mod
from dspark.costs import Costs
from dspark.errors import DsparkError
from dspark.policy import RunningAcceptance, auto_width, parse, survival, threshold_width
from oracle import OracleDrafter
from same import assert_same_greedy
from tiny import tiny_target

PROMPT = [5, 9, 11, 3, 7, 21, 2]
#: A machine where verifying more rows costs more and more: auto must trade width for time.
STEEP = Costs(verify_ms=(2.0, 2.4, 3.0, 4.0, 5.5, 7.5, 10.0), draft_ms=2.0, step_ms=1.5)
#: A machine where a round pays when its first drafts are mostly right, and each further row
#: costs more: the width the running acceptance supports is short when later drafts are wrong.
GENTLE = Costs(verify_ms=(2.0, 2.1, 2.3, 2.6, 3.0, 3.5, 4.1), draft_ms=0.3, step_ms=2.0)


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


def test_costs_are_measured_once_and_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPARK_COSTS_DIR", str(tmp_path))
    target = tiny_target(seed=0, scale=0.15, vocab=96, window=16)
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16), seed=1)
    said = []
    first = costs_mod.load_or_measure(target, drafter, 4, say=said.append)
    assert len(first.verify_ms) == 5 and first.draft_ms > 0 and first.step_ms > 0 and len(said) == 1
    again = costs_mod.load_or_measure(target, drafter, 4, say=said.append)
    assert again == first and len(said) == 1  # from the cache, not measured again
    # what follows is whether a damaged cache is measured again, not the timing (taken above)
    measured = []
    monkeypatch.setattr(costs_mod, "measure", lambda *a, **k: measured.append(k.get("key")) or first)
    (file,) = tmp_path.glob("*.json")
    assert json.loads(file.read_text())["verify_ms"] == list(first.verify_ms)
    file.write_text("{damaged")
    assert costs_mod.load_or_measure(target, drafter, 4, say=said.append).key == first.key and len(said) == 2
    file.write_text("[" * 100_000 + "]" * 100_000)  # nested past any parser's stack: measured again
    assert costs_mod.load_or_measure(target, drafter, 4, say=said.append).key == first.key and len(said) == 3
    assert measured == [first.key] * 2
    other = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=2, markov_rank=16), seed=1)
    assert costs_mod.key_for(target, other, 4) != first.key  # another drafter shape: other costs


@pytest.mark.parametrize("slow", [1, 2])
def test_the_loop_runs_at_the_thread_count_whole_rounds_are_faster_at(slow, tmp_path, monkeypatch):
    """The draft and the verify share one BLAS thread count, the one whole rounds are timed
    faster at (here rounds are made 20 ms slower at ``slow`` threads; the phases timed alone
    are not, so a choice from them would be a coin toss). 20 ms a round: far above what a
    busy machine adds to a tiny round, so the test holds under load."""
    import time

    from dspark import blas, rounds

    monkeypatch.setenv("DSPARK_COSTS_DIR", str(tmp_path))
    now = {"threads": 2}
    monkeypatch.setattr(blas, "default_threads", lambda: 2)
    monkeypatch.setattr(blas, "set_threads", lambda n: now.update(threads=n))
    monkeypatch.setattr(blas, "restore_threads", lambda: now.update(threads=2))
    real_round = rounds.speculative_round

    def round_slower_at_one_count(*a, **k):
        if now["threads"] == slow:
            time.sleep(0.02)
        return real_round(*a, **k)

    monkeypatch.setattr(rounds, "speculative_round", round_slower_at_one_count)
    target = tiny_target(seed=0, scale=0.15, vocab=96, window=16)
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16), seed=1)
    c = costs_mod.measure(target, drafter, 4, contexts=(32,), repeats=2)
    fast = 3 - slow
    assert c.threads["draft"] == c.threads["verify"] == fast and c.threads["step"] in (1, 2)


def _recording_generate_step(monkeypatch, log: list, sleep_s: float = 0.0):
    """mlx-lm's generate_step, each token it yields logged as "step" (after ``sleep_s``)."""
    import importlib
    import time

    module = importlib.import_module("mlx_lm.generate")  # the attribute mlx_lm.generate is the function
    real = module.generate_step

    def steps(*a, **k):
        for out in real(*a, **k):
            time.sleep(sleep_s)
            log.append("step")
            yield out

    monkeypatch.setattr(module, "generate_step", steps)


def test_the_plain_step_is_timed_in_turns_with_the_draft_and_the_verify(monkeypatch):
    """What auto compares is a round's cost against a plain step's: timed in turns within each
    repeat, as the draft and the verify are, a change of the machine's load touches both (timed
    one after the other, a step measured in a busier moment once priced plain decoding at a
    full round at 3,000 tokens, and auto drafted at 0.7x of plain)."""
    from dspark import rounds

    log: list[str] = []
    _recording_generate_step(monkeypatch, log)
    real_verify = rounds.verify_forward
    monkeypatch.setattr(rounds, "verify_forward", lambda *a, **k: log.append("verify") or real_verify(*a, **k))
    target = tiny_target(seed=0, scale=0.15, vocab=96, window=16)
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16), seed=1)
    costs_mod.measure(target, drafter, 4, contexts=(32,), repeats=3, threads={})
    turns = [kind for i, kind in enumerate(log) if i == 0 or log[i - 1] != kind]
    assert turns.count("step") >= 4 and turns.count("verify") >= 4  # a warm-up turn and 3 repeats, taking turns


def test_a_plain_step_never_costs_more_than_a_verify_of_the_anchor_alone(monkeypatch):
    """Both are one row through the target; the step is pipelined and reads no taps. A step
    timed slower (here 30 ms a token slower: a busy moment) is read as the one-row verify's cost,
    at every context, so a noisy measurement cannot make plain decoding look dearer than it is."""
    _recording_generate_step(monkeypatch, [], sleep_s=0.03)
    target = tiny_target(seed=0, scale=0.15, vocab=96, window=16)
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16), seed=1)
    c = costs_mod.measure(target, drafter, 4, contexts=(32, 64), repeats=2, threads={})
    assert c.verify_ms[0] < 30 and c.step_ms == c.verify_ms[0]
    (_, verify, _, step), = c.longer
    assert step == verify[0]
    assert costs_mod.one_row_bound(5.0, 7.0) == 5.0 and costs_mod.one_row_bound(9.0, 7.0) == 7.0


TARGETS = {"sliding16": dict(window=16), "sliding24-kvshared-perlayer": dict(window=24, shared=2, per_layer=8)}


@pytest.fixture(scope="module", params=list(TARGETS))
def case(request):
    kw = TARGETS[request.param]
    target = tiny_target(seed=0, scale=0.15, vocab=96, **kw)
    n = 5 * kw["window"]
    return target, n, [tok for tok, _ in generate_step(mx.array(PROMPT), target.model, max_tokens=n)]


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

    def propose(self, anchor, position, *, new_rows, block_size, sampling, key):
        self.drafts_at.append(position)
        self.corrupt = 1.0 if position < self.switch else 0.0
        out = super().propose(anchor, position, new_rows=new_rows, block_size=block_size, sampling=sampling, key=key)
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


@pytest.mark.parametrize("shadow_every", [0, 1, 3])
def test_plain_steps_keep_the_drafters_context_in_step(case, monkeypatch, shadow_every):
    """Tap rows of plain steps wait for the drafter's next draft, a round's or a shadow draft's:
    its context stays exactly the target's (the session checks the offset every draft) and the
    output plain greedy's, whether the plain stretches draft in the shadow never, at every step or
    now and then."""
    from dspark.policy import Scheduler

    target, n, ref = case
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16), seed=2)
    monkeypatch.setattr(Scheduler, "drafts", lambda self, position, budget: position % 5 < 2)
    due = []

    def shadow_due(self):
        due.append(bool(shadow_every) and (len(due) + 1) % shadow_every == 0)
        return due[-1]

    monkeypatch.setattr(Scheduler, "shadow_due", shadow_due)
    judged = []
    monkeypatch.setattr(Scheduler, "observe_shadow", lambda self, position, width, matched: judged.append(width))
    cfg = GenerationConfig(max_tokens=n, stop_at_eos=False)
    events = list(generate(target, drafter, PROMPT, cfg))
    s = events[-1]
    assert_same_greedy(target, PROMPT, s.tokens, ref)
    assert s.plain_steps > n // 4 and s.rounds > n // 8
    assert len(s.accepted_lengths) == s.rounds and s.tau == (n - s.plain_steps) / s.rounds
    # a plain step's time is kept apart from the rounds' (the per-round figures of dspark bench)
    assert s.plain_seconds == pytest.approx(sum(e.verify_seconds for e in events[:-1] if e.plain_step))
    assert s.verify_seconds == pytest.approx(sum(e.verify_seconds for e in events[:-1] if not e.plain_step))
    assert len(judged) == sum(due) and (sum(due) > n // 8 if shadow_every else not judged)  # each judged once


def test_a_shadow_draft_is_judged_by_the_tokens_committed_after_it():
    """Greedy, a shadow draft's leading drafts that equal the tokens the target committed after
    its anchor are what a round verifying them would have accepted: judged at its first draft that
    differs, when all of its block is known, or, when the plain stretch ends, on what is known."""
    from dspark.engine import judge_shadow
    from dspark.policy import Policy, Scheduler

    seen = []

    class Spy(Scheduler):
        def observe_shadow(self, position, width, matched):
            seen.append((position, width, matched))

    s = Spy(Policy("auto"), 4, STEEP)
    shadow = (3, mx.array([[7, 8, 5, 9]]))  # drafts for positions 4..7 from the anchor at position 3
    assert judge_shadow(s, shadow, [1, 2, 3, 4, 7, 8]) is shadow and not seen  # two of four known, both right
    assert judge_shadow(s, shadow, [1, 2, 3, 4, 7, 8, 5, 9]) is None and seen[-1] == (3, 4, 4)
    assert judge_shadow(s, shadow, [1, 2, 3, 4, 7, 6]) is None and seen[-1] == (3, 2, 1)  # the second differs
    assert judge_shadow(s, shadow, [1, 2, 3, 4, 7, 8, 5], final=True) is None and seen[-1] == (3, 3, 3)


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


def test_the_profile_prior_is_used_only_on_the_target_it_was_measured_on(tmp_path):
    from types import SimpleNamespace

    from dspark.engine import measured_acceptance

    target = SimpleNamespace(weights_fingerprint="aaa", target_id="gemma4-x")

    def profile(fp, tid):
        return SimpleNamespace(target_fingerprint=fp, target_id=tid, per_position_acceptance=(0.5, 0.3))

    assert measured_acceptance(SimpleNamespace(profile=profile("aaa", "other")), target) == [0.5, 0.3]
    assert measured_acceptance(SimpleNamespace(profile=profile("bbb", "gemma4-x")), target) is None
    assert measured_acceptance(SimpleNamespace(profile=profile(None, "gemma4-x")), target) == [0.5, 0.3]
    assert measured_acceptance(SimpleNamespace(profile=profile(None, "gemma4-y")), target) is None
    assert measured_acceptance(SimpleNamespace(), target) is None


def test_auto_without_a_confidence_head_learns_widths_and_stays_exact(case):
    """An oracle drafter (no confidence head) whose later positions are mostly wrong: auto's
    running acceptance must shrink the width, and the output stays plain greedy's."""
    target, n, ref = case
    oracle = OracleDrafter(PROMPT + ref, target.dims.vocab_size, block_size=6, corrupt=0.5, seed=3)
    cfg = GenerationConfig(max_tokens=n, stop_at_eos=False, policy="auto")
    s = run_to_summary(generate(target, oracle, PROMPT, cfg, costs=GENTLE))
    assert_same_greedy(target, PROMPT, s.tokens, ref)
    late = s.verify_widths[len(s.verify_widths) // 2:]
    assert max(late) < 6 and len(set(s.verify_widths)) > 1


def test_threshold_without_a_confidence_head_is_one_sentence(case):
    target, n, ref = case
    oracle = OracleDrafter(PROMPT + ref, target.dims.vocab_size, block_size=6, corrupt=0.0)
    cfg = GenerationConfig(max_tokens=8, stop_at_eos=False, policy="threshold:0.5")
    with pytest.raises(DsparkError, match="needs a drafter with a confidence head"):
        run_to_summary(generate(target, oracle, PROMPT, cfg))


def test_measured_verify_costs_are_made_non_decreasing():
    assert costs_mod.monotone([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert costs_mod.monotone([2.0, 1.0, 1.0]) == pytest.approx([4 / 3] * 3)
    assert costs_mod.monotone([1.0, 2.0]) == [1.0, 2.0]


def test_the_costs_command_measures_then_reads_the_cache(tmp_path, monkeypatch, capsys):
    from dspark.cli import main
    from tiny import write_tiny_target_dir

    monkeypatch.setenv("DSPARK_COSTS_DIR", str(tmp_path / "costs"))
    target = write_tiny_target_dir(tmp_path / "target")
    assert main(["init", "--target", str(target), "--out", str(tmp_path / "d"), "--block-size", "3",
                 "--layers", "1"]) == 0
    argv = ["costs", "--target", str(target), "--drafter", str(tmp_path / "d"), "--json"]
    real, measured = costs_mod.measure, []

    def measure_once(*a, **k):  # --remeasure must measure again; the timing itself is taken once
        measured.append(measured[0] if measured else real(*a, **k))
        return measured[-1]

    monkeypatch.setattr(costs_mod, "measure", measure_once)
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "measuring this machine's" in out.err and len(json.loads(out.out)["verify_ms"]) == 4
    assert main(argv) == 0 and "measuring" not in capsys.readouterr().err
    assert main([*argv, "--remeasure"]) == 0 and "measuring" in capsys.readouterr().err
    assert len(measured) == 2


def test_costs_are_priced_at_the_context_a_round_runs_at():
    """Measured at three cache lengths; between them linear, past them the nearest slope, a
    verify never cheaper for more rows; and what auto decides at 3,000 tokens is priced there."""
    c = Costs(verify_ms=(2.0, 2.1), draft_ms=0.5, step_ms=2.0, context=256,
              longer=((1024, (3.0, 4.0), 2.0, 2.4), (3072, (5.0, 5.9), 4.0, 3.2)))
    assert c.at(256).verify_ms == (2.0, 2.1)
    mid = c.at(640)
    assert mid.verify_ms == pytest.approx((2.5, 3.05)) and mid.draft_ms == pytest.approx(1.25) and mid.context == 640
    far = c.at(4096)
    assert far.draft_ms == pytest.approx(5.0) and far.step_ms == pytest.approx(3.6)
    assert c.at(0).draft_ms >= 0 and all(a <= b for a, b in zip(far.verify_ms, far.verify_ms[1:]))
    # a noisy measurement whose line falls: never priced below the last point past it (it was 0,
    # and auto divided by it), never below half the smaller value before the first
    noisy = Costs(verify_ms=(2.0, 2.4), draft_ms=1.0, step_ms=2.0, context=256,
                  longer=((1024, (1.5, 1.6), 0.4, 1.8), (3072, (1.0, 1.1), 0.2, 1.0)))
    assert noisy.at(100_000).verify_ms == (1.0, 1.1) and noisy.at(100_000).draft_ms == 0.2
    assert noisy.at(0).verify_ms[0] > 0 and Costs(verify_ms=(2.0, 2.4), draft_ms=1.0, step_ms=2.0, context=256,
                                                   longer=((1024, (9.0, 9.4), 4.0, 8.0),)).at(0).draft_ms == 0.5
    assert auto_width([0.9], 0.0, [0.0, 0.0], 1) in (0, 1)  # zero costs from a crafted file: no ZeroDivisionError
    assert Costs.from_dict(json.loads(json.dumps(c.to_dict()))) == c  # as the cache file holds it
    bad = json.loads(json.dumps(c.to_dict()))
    bad["longer"] = [[1024, [3.0, float("nan")], 2.0, 2.4]]
    with pytest.raises(ValueError):
        Costs.from_dict(bad)
    # the same acceptance pays at a short context and not at a long one
    from dspark.policy import Policy, Scheduler

    s = Scheduler(Policy("auto"), 2, c)
    s.running.hits, s.running.tries = [2.0, 1.0], [4.0, 2.0]  # about half of the drafts accepted
    assert s.drafts(256, 10) and not s.drafts(3072, 10)


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


def test_plain_steps_queue_the_next_forward_before_a_token_is_read_and_decode_as_mlx_lm(case):
    """Pipelined as mlx-lm's generate_step: when step i is handed over, the forward of step i + 1
    has been issued already (the host's read of a token overlaps the next forward); the last
    token is not fed (it is the next round's anchor); tokens are plain greedy's and each step's
    tap row is the target's own for that token."""
    from dspark.config import SamplingParams
    from dspark.engine import _round_keys
    from dspark.rounds import plain_steps

    target, n, ref = case
    taps = [0, 1]
    calls = []
    real = target.forward

    def counting(*a, **k):
        calls.append(a[0].shape)
        return real(*a, **k)

    cache = target.make_cache()
    target.forward(mx.array([PROMPT[:-1]]), cache, taps, logits=False)
    steps = 12
    target.forward = counting
    try:
        seen, rows = [], []
        for i, v in enumerate(plain_steps(target, cache, tap_layers=taps, anchor=PROMPT[-1], position=len(PROMPT) - 1,
                                          sampling=SamplingParams(), keys=_round_keys(0),
                                          more=lambda p: p < len(PROMPT) - 1 + steps, threads={})):
            assert len(calls) == min(i + 2, steps), (i, len(calls))
            assert v.plain_step and v.width == 0 and len(v.tokens) == 1
            seen += v.tokens
            rows.append(v.new_rows)
    finally:
        del target.forward
    assert seen == ref[:steps] and all(shape == (1, 1) for shape in calls)
    fresh = target.make_cache()
    _, want = target.forward(mx.array([PROMPT + ref[: steps - 1]]), fresh, taps, logits=False)
    got = mx.concatenate(rows, axis=1)
    assert mx.allclose(got, want[:, len(PROMPT) - 1:], atol=1e-5).item()


def test_block_size_0_decodes_by_the_pipelined_plain_steps(case, monkeypatch):
    """Nothing to draft is plain decoding: ``block_size=0`` runs the same pipelined steps as auto's
    plain stretches (never a round of width 0), and its output is plain greedy's."""
    import dspark.engine

    target, n, ref = case
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16), seed=2)
    monkeypatch.setattr(dspark.engine, "speculative_round", None)  # a round would fail here
    cfg = GenerationConfig(max_tokens=n, stop_at_eos=False, block_size=0)
    s = run_to_summary(generate(target, drafter, PROMPT, cfg))
    assert s.tokens == tuple(ref) and s.plain_steps == n and s.rounds == 0


def test_load_drafter_reads_the_profile_and_a_damaged_one_does_not_stop_it(tmp_path, monkeypatch):
    from dspark.cli import main
    from dspark.loading import load_drafter, load_target
    from tiny import write_tiny_target_dir

    monkeypatch.setenv("DSPARK_PROFILES_DIR", str(tmp_path / "profiles"))  # never the person's records
    target_dir = write_tiny_target_dir(tmp_path / "target")
    assert main(["init", "--target", str(target_dir), "--out", str(tmp_path / "d"), "--block-size", "3",
                 "--layers", "1"]) == 0
    target = load_target(target_dir)
    (tmp_path / "d" / "dspark-profile.json").write_text(json.dumps({
        "version": 1, "per_position_acceptance": [0.6, 0.4, 0.2], "block_size": 3, "target_id": target.target_id,
        "target_fingerprint": target.weights_fingerprint, "templated": None, "thinking": None,
        "context_length": 256, "source": "calibrate", "prompts": 4, "rounds": 40}))
    from dspark.engine import measured_acceptance

    assert measured_acceptance(load_drafter(tmp_path / "d", target), target) == [0.6, 0.4, 0.2]
    (tmp_path / "d" / "dspark-profile.json").write_text("{")
    said = []
    drafter = load_drafter(tmp_path / "d", target, say=said.append)
    assert drafter.profile is None and not said  # dspark diagnose names it; loading goes on

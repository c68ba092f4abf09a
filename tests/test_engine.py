"""The generation loop (``dspark.engine``): plain stretches that keep the drafter's context in
step, shadow drafts judged by the tokens committed after them, the profile's prior used only on
its own target, ``block_size=0`` as plain decoding, and plain decoding's log-probabilities read
exactly. That its output equals plain greedy's: ``test_lossless.py`` and ``test_policy.py``."""

from __future__ import annotations

import mlx.core as mx
import pytest
from same import assert_same_greedy
from tiny import PROMPT, STEEP, WRAPPING, wrapping_case

from dspark import DflashConfig, DflashDrafter, GenerationConfig, generate, run_to_summary


@pytest.fixture(scope="module", params=list(WRAPPING))
def case(request):
    return wrapping_case(request.param)


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
    cfg = GenerationConfig(policy="fixed", max_tokens=n, stop_at_eos=False)
    events = list(generate(target, drafter, PROMPT, cfg))
    s = events[-1]
    assert_same_greedy(target, PROMPT, s.tokens, ref)
    assert s.plain_steps > n // 4 and s.rounds > n // 8
    assert len(s.accepted_lengths) == s.rounds and s.tau == (n - s.plain_steps) / s.rounds
    # a plain step's time is kept apart from the rounds' (the per-round figures of dspark bench)
    assert s.plain_seconds == pytest.approx(sum(e.verify_seconds for e in events[:-1] if e.plain_step))
    assert s.verify_seconds == pytest.approx(sum(e.verify_seconds for e in events[:-1] if not e.plain_step))
    assert len(judged) == sum(due) and (sum(due) > n // 8 if shadow_every else not judged)  # each judged once


def plain_threads(monkeypatch, choices: tuple[int, ...]) -> tuple[list, list]:
    """Every round plain; the BLAS thread count recorded, not set (``now[0]``), and the count each
    plain step was timed at (``stepped``); ``choices``: the counts the plain steps may try. Both
    are given here, not read from the machine, so this runs alike on Linux (OpenBLAS) and on a
    Mac (no BLAS thread count to set)."""
    from dspark import blas
    from dspark.policy import Scheduler

    monkeypatch.setattr(Scheduler, "drafts", lambda self, position, budget: False)
    now, stepped = [None], []
    monkeypatch.setattr(blas, "set_threads", lambda k: now.__setitem__(0, k))
    monkeypatch.setattr(blas, "threads", lambda: now[0])
    monkeypatch.setattr("dspark.engine._thread_choices", lambda: choices)
    real_step_took = Scheduler.step_took
    monkeypatch.setattr(
        Scheduler, "step_took", lambda self, p, seconds: stepped.append(now[0]) or real_step_took(self, p, seconds)
    )
    return now, stepped


@pytest.mark.parametrize(("draft", "step", "shadow"), [(1, 3, 1), (3, 1, 1), (2, 2, 2)])
def test_a_shadow_draft_runs_at_the_drafts_thread_count_at_most_the_steps(case, monkeypatch, draft, step, shadow):
    """A shadow draft is a draft: on a busy 2-core machine, drafted at the plain steps' two BLAS
    threads it took ~200 ms where a round's draft, at its own one, took ~20. But never at more
    threads than the plain steps around it: drafted at two between steps of one, OpenBLAS's second
    thread spun into the steps after it (auto 0.87x of plain decoding against 0.92x at one). The
    plain steps keep theirs."""
    from dataclasses import replace

    from dspark.drafting import BlockDraftSession

    target, n, ref = case
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16), seed=2)
    now, stepped = plain_threads(monkeypatch, ())  # the steps' count is not tried here
    at_propose = []
    real_propose = BlockDraftSession.propose

    def propose(self, *a, **k):
        at_propose.append(now[0])
        return real_propose(self, *a, **k)

    monkeypatch.setattr(BlockDraftSession, "propose", propose)
    costs = replace(STEEP, threads={"draft": draft, "verify": 2, "step": step})
    cfg = GenerationConfig(policy="auto", max_tokens=n, stop_at_eos=False)
    s = run_to_summary(generate(target, drafter, PROMPT, cfg, costs=costs))
    assert s.tokens == tuple(ref) and s.rounds == 0
    assert at_propose and set(at_propose) == {shadow} and set(stepped) == {step}


def test_a_plain_stretch_tries_the_other_thread_count(case, monkeypatch):
    """The plain steps run at the costs' thread count and, after TRY_EVERY of them, TRY at the
    other (which count is kept is the clock's test: here the timings are this machine's); the
    output stays plain greedy's."""
    from dataclasses import replace

    from dspark.clock import TRY, TRY_EVERY
    from dspark.policy import Scheduler

    target, n, ref = case
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16), seed=2)
    monkeypatch.setattr(Scheduler, "shadow_due", lambda self: False)
    _, stepped = plain_threads(monkeypatch, (1, 2))
    costs = replace(STEEP, threads={"draft": 2, "verify": 2, "step": 1})
    cfg = GenerationConfig(policy="auto", max_tokens=n, stop_at_eos=False)
    s = run_to_summary(generate(target, drafter, PROMPT, cfg, costs=costs))
    assert s.tokens == tuple(ref) and n > TRY_EVERY + TRY
    assert stepped[: TRY_EVERY + TRY] == [1] * TRY_EVERY + [2] * TRY


def test_a_shadow_draft_is_judged_by_the_tokens_committed_after_it():
    """Greedy, a shadow draft's leading drafts that equal the tokens the target committed after
    its anchor are what a round verifying them would have accepted: judged at its first draft that
    differs, when all of its block is known, or, when the plain stretch ends, on what is known."""
    from dspark.policy import Policy, Scheduler
    from dspark.shadows import judge_shadow

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


def test_a_shadow_draft_right_so_far_is_judged_as_soon_as_a_round_would_pay():
    """A shadow draft whose drafts known so far are all right is judged as soon as they say a round
    pays (the rest cannot change that): a drafter right again drafts again a few steps sooner,
    not a block later. Without a profile one right token is not enough (a guess is no evidence)."""
    from dataclasses import replace

    from dspark.policy import Policy, Scheduler
    from dspark.shadows import judge_shadow

    seen = []

    class Spy(Scheduler):
        def observe_shadow(self, position, width, matched):
            seen.append((position, width, matched))

    cheap = replace(STEEP, verify_ms=(1.5, 1.6, 1.7, 1.8, 1.9, 2.0, 2.1), draft_ms=0.5)  # every round pays
    s = Spy(Policy("auto"), 4, cheap)
    shadow = (3, mx.array([[7, 8, 5, 9]]))
    assert judge_shadow(s, shadow, [1, 2, 3, 4, 7]) is shadow and not seen  # one right: no profile, a guess
    assert judge_shadow(s, shadow, [1, 2, 3, 4, 7, 8]) is None and seen[-1] == (3, 2, 2)
    profiled = Spy(Policy("auto"), 4, cheap, prior=[0.8, 0.6, 0.4, 0.2])
    assert judge_shadow(profiled, shadow, [1, 2, 3, 4, 7]) is None and seen[-1] == (3, 1, 1)
    assert judge_shadow(Spy(Policy("auto"), 4, STEEP), shadow, [1, 2, 3, 4, 7, 8]) is shadow  # too dear to pay yet


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


@pytest.mark.parametrize("policy", ["fixed", "auto"])
def test_block_size_0_decodes_by_the_pipelined_plain_steps(case, monkeypatch, policy):
    """Nothing to draft is plain decoding: ``block_size=0`` runs the same pipelined steps as auto's
    plain stretches (never a round of width 0, and under ``auto`` no shadow draft: a block of no
    tokens was an internal error), and its output is plain greedy's."""
    from tiny import STEEP

    import dspark.engine

    target, n, ref = case
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16), seed=2)
    monkeypatch.setattr(dspark.engine, "speculative_round", None)  # a round would fail here
    cfg = GenerationConfig(policy=policy, max_tokens=n, stop_at_eos=False, block_size=0)
    s = run_to_summary(generate(target, drafter, PROMPT, cfg, costs=STEEP))
    assert s.tokens == tuple(ref) and s.plain_steps == n and s.rounds == 0


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16])
def test_plain_decodings_log_probabilities_are_read_exactly_from_memory(dtype):
    from dspark.engine import _host_value

    x = (mx.random.normal((500,), key=mx.random.key(1)) * 4).astype(dtype)
    mx.eval(x)
    assert [_host_value(x, i) for i in range(500)] == x.astype(mx.float32).tolist()


def test_both_generators_say_how_much_of_a_long_prompt_is_processed():
    """A long prompt takes seconds before the first token: the engine reports each prefill chunk as
    mlx-lm's ``prompt_progress_callback`` does (the app's bar reads it), for speculative and plain
    decoding alike."""
    from tiny import tiny_target

    from dspark import generate_plain

    target = tiny_target(seed=0, scale=0.15, vocab=96, window=16)
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16), seed=1)
    prompt = [(7 * i) % 90 + 3 for i in range(70)]
    cfg = GenerationConfig(policy="fixed", max_tokens=4, stop_at_eos=False, prefill_step_size=32)
    said, plain_said = [], []
    run_to_summary(generate(target, drafter, prompt, cfg, prompt_progress=lambda d, n: said.append((d, n))))
    run_to_summary(generate_plain(target, prompt, cfg, prompt_progress=lambda d, n: plain_said.append((d, n))))
    assert said == [(32, 70), (64, 70), (69, 70)]
    assert [p for p in plain_said if 0 < p[0] < 70] == said  # mlx-lm's own: (0, 70) first, (70, 70) at the first token


def test_the_note_after_a_plain_auto_run_is_not_given_when_no_draft_was_asked_for(monkeypatch):
    """``auto`` that decoded every token plainly is told why (no round of this drafter paid); with
    ``--block-size 0`` plain decoding is what was asked for, and nothing is to be diagnosed."""
    from types import SimpleNamespace

    from dspark import advice

    monkeypatch.setattr(advice, "slow_blas", lambda: None)
    plain = SimpleNamespace(tokens=(1,) * 40, plain_steps=40, rounds=0, per_position_acceptance=())
    assert "no round of this drafter paid" in advice.after_run(plain, policy="auto", drafter="d")
    assert advice.after_run(plain, policy="auto", drafter="d", block_size=None) is not None
    assert advice.after_run(plain, policy="auto", drafter="d", block_size=0) is None
    assert advice.after_run(plain, policy="fixed", drafter="d") is None

"""The costs auto weighs (``dspark.costs``): measured on this machine at the thread count whole
rounds are fastest at, a plain step timed in turns with the draft and the verify, cached per
target and drafter shape (a damaged cache measured again), priced at the context a round runs
at; and the ``dspark costs`` command."""

from __future__ import annotations

import json

import pytest
from tiny import tiny_target

from dspark import DflashConfig, DflashDrafter
from dspark import costs as costs_mod
from dspark.costs import Costs
from dspark.policy import auto_width, draft_cost, survival


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
    # the key holds OPENBLAS_THREAD_TIMEOUT on every platform: where OpenBLAS runs (Linux) it moves
    # which thread count wins (dspark.blas); on a Mac it only names other costs, which is harmless
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "29")
    assert costs_mod.key_for(target, drafter, 4) != first.key


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
    """mlx-lm's generate_step as dspark.costs calls it, each token it yields logged as "step"
    (after ``sleep_s``)."""
    import time

    real = costs_mod.generate_step

    def steps(*a, **k):
        for out in real(*a, **k):
            time.sleep(sleep_s)
            log.append("step")
            yield out

    monkeypatch.setattr(costs_mod, "generate_step", steps)


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
    ((_, verify, _, step),) = c.longer
    assert step == verify[0]
    assert costs_mod.one_row_bound(5.0, 7.0) == 5.0 and costs_mod.one_row_bound(9.0, 7.0) == 7.0


def test_an_autoregressive_draft_is_priced_from_whole_rounds(monkeypatch):
    """Rounds drafting each count 1..G (scripted here) less the verify at that width give the
    first token and each further one, count by count: the demo assistant's later steps cost less
    than its first ones, and a price drawn through 1 and G drafts made them look dearer. Timed
    alone the draft missed what a round's draft pays (the demo EAGLE-3 head's first token: 0.6 ms
    alone, 4.7 ms in a round). Never negative, never cheaper for drafting more."""
    took = {1: 30.0, 2: 34.7, 3: 36.4, 4: 38.4, 5: 40.4}
    monkeypatch.setattr(costs_mod, "_round_turn", lambda *a, count, **k: took[count])
    target = tiny_target(seed=0, scale=0.15, vocab=96, window=16)
    verify = [20.0, 24.0, 24.5, 25.0, 25.5, 26.0]
    first, steps = costs_mod._stepwise_draft_ms(target, None, 5, context=16, verify_ms=verify, threads={}, repeats=1)
    assert first == pytest.approx(30.0 - 24.0)
    assert steps == pytest.approx((4.2, 1.4, 1.4, 1.4))  # 1.2, 1.5, 1.5 pooled: no step dearer than the one before
    took.update({3: 33.0, 5: 31.0})  # a verify that grew faster alone than whole rounds did
    first, steps = costs_mod._stepwise_draft_ms(target, None, 5, context=16, verify_ms=verify, threads={}, repeats=1)
    assert min(steps) >= 0 and first + sum(steps) >= first  # further tokens free at worst, not negative
    took.update({2: 40.0, 3: 40.5, 4: 43.7, 5: 84.9})  # a busy moment in the 5-draft rounds (a load of 6 on 2 cores)
    first, steps = costs_mod._stepwise_draft_ms(target, None, 5, context=16, verify_ms=verify, threads={}, repeats=1)
    assert steps == pytest.approx((((84.9 - 26.0) - 6.0) / 4,) * 4)  # spread over every step, not the last one's


def test_auto_drafts_as_far_as_each_tokens_own_cost_pays():
    """Priced count by count, ``auto`` drafts all 5 tokens where the same rounds' cost spread
    evenly over the further tokens (the rule before) stopped at 4: the 4th and 5th steps cost
    1.4 ms, not the 1.8 ms average that the dear 2nd step raised."""
    a = survival([0.8] * 5)
    verify, first, steps = [10.0, 10.5, 11.0, 11.5, 12.0, 12.5], 5.0, (3.2, 1.4, 1.4, 1.4)
    assert auto_width(a, first, verify, 5, draft_steps_ms=steps, first_drop=False) == 5
    assert auto_width(a, first, verify, 5, draft_steps_ms=(sum(steps) / 4,), first_drop=False) == 4
    assert draft_cost(first, steps, 7) == pytest.approx(first + sum(steps) + 2 * 1.4)  # past the measured: the last
    costs = Costs(verify_ms=tuple(verify), draft_ms=first, step_ms=8.0, draft_steps_ms=steps, context=64)
    assert Costs.from_dict(json.loads(json.dumps(costs.to_dict()))) == costs
    assert costs.at(128).draft_steps_ms == costs.draft_steps_ms  # one context measured: as measured


def test_measured_verify_costs_are_made_non_decreasing():
    assert costs_mod.monotone([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert costs_mod.monotone([2.0, 1.0, 1.0]) == pytest.approx([4 / 3] * 3)
    assert costs_mod.monotone([1.0, 2.0]) == [1.0, 2.0]


def test_the_costs_command_measures_then_reads_the_cache(tmp_path, monkeypatch, capsys):
    from tiny import write_tiny_target_dir

    from dspark.cli import main

    monkeypatch.setenv("DSPARK_COSTS_DIR", str(tmp_path / "costs"))
    target = write_tiny_target_dir(tmp_path / "target")
    assert (
        main(["init", "--target", str(target), "--out", str(tmp_path / "d"), "--block-size", "3", "--layers", "1"]) == 0
    )
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
    c = Costs(
        verify_ms=(2.0, 2.1),
        draft_ms=0.5,
        step_ms=2.0,
        context=256,
        longer=((1024, (3.0, 4.0), 2.0, 2.4), (3072, (5.0, 5.9), 4.0, 3.2)),
    )
    assert c.at(256).verify_ms == (2.0, 2.1)
    mid = c.at(640)
    assert mid.verify_ms == pytest.approx((2.5, 3.05)) and mid.draft_ms == pytest.approx(1.25) and mid.context == 640
    far = c.at(4096)
    assert far.draft_ms == pytest.approx(5.0) and far.step_ms == pytest.approx(3.6)
    assert c.at(0).draft_ms >= 0 and all(a <= b for a, b in zip(far.verify_ms, far.verify_ms[1:]))
    # a noisy measurement whose line falls: never priced below the last point past it (it was 0,
    # and auto divided by it), never below half the smaller value before the first
    noisy = Costs(
        verify_ms=(2.0, 2.4),
        draft_ms=1.0,
        step_ms=2.0,
        context=256,
        longer=((1024, (1.5, 1.6), 0.4, 1.8), (3072, (1.0, 1.1), 0.2, 1.0)),
    )
    assert noisy.at(100_000).verify_ms == (1.0, 1.1) and noisy.at(100_000).draft_ms == 0.2
    assert (
        noisy.at(0).verify_ms[0] > 0
        and Costs(verify_ms=(2.0, 2.4), draft_ms=1.0, step_ms=2.0, context=256, longer=((1024, (9.0, 9.4), 4.0, 8.0),))
        .at(0)
        .draft_ms
        == 0.5
    )
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


def test_an_autoregressive_drafters_verify_costs_are_a_straight_line():
    """Its count is chosen across every width, so a step in the measured verify costs (noise: on a
    CPU the cost grows about linearly with the rows) decided it. The demo EAGLE-3 head's measured
    costs priced a 4th draft 1.3 ms and a 5th 0.6 ms of verify: ``auto`` drafted 3 or 5 and never 4
    (its rounds paid 0.4 and 0.7 ms); on the line, each further draft adds the same."""
    from dspark.cost_record import straight

    measured = [23.0, 24.1, 24.8, 24.8, 26.1, 26.7]
    line = straight(measured)
    assert line[0] == 23.0 and len(line) == 6
    rises = [b - a for a, b in zip(line[1:], line[2:])]
    assert rises == pytest.approx([rises[0]] * 4) and rises[0] == pytest.approx(0.65)
    assert sum(line[1:]) == pytest.approx(sum(measured[1:]))  # the same mean: only the noise removed
    assert straight([10.0, 12.0, 11.0, 11.5]) == pytest.approx([10.0, 11.5, 11.5, 11.5])  # never falling
    assert straight([20.0, 8.0, 9.0, 10.0])[1:] == [20.0, 20.0, 20.0]  # never below the anchor alone
    a = survival([0.7, 0.785, 0.74, 0.76, 0.82])  # the demo head's profile, conditional
    first, steps = 0.87, (1.59,) * 4
    assert auto_width(a, first, measured, 5, draft_steps_ms=steps, first_drop=False) != 4
    assert auto_width(a, first, line, 5, draft_steps_ms=steps, first_drop=False) >= 4


def test_an_autoregressive_drafters_costs_are_measured_on_the_line(monkeypatch):
    """``measure`` straightens the verify costs of an autoregressive drafter before its draft steps
    are taken from whole rounds less them; a block drafter's stay as measured."""
    seen = {}

    def stepwise(target, drafter, block_size, *, verify_ms, **k):
        seen["verify"] = list(verify_ms)
        return 1.0, (0.5,) * (block_size - 1)

    bumpy = (10.0, 12.0, 12.0, 14.5, 14.5)
    monkeypatch.setattr(costs_mod, "_max_positions", lambda target: 4096)
    monkeypatch.setattr(costs_mod, "_at_context", lambda *a, **k: ((bumpy, 1.0, 9.0), {}, True))
    monkeypatch.setattr(costs_mod, "_stepwise_draft_ms", stepwise)
    c = costs_mod.measure(None, None, 4, contexts=(32,), repeats=1, threads={})
    assert c.verify_ms == tuple(costs_mod.straight(bumpy)) == tuple(seen["verify"]) and c.verify_ms != bumpy
    monkeypatch.setattr(costs_mod, "_at_context", lambda *a, **k: ((bumpy, 1.0, 9.0), {}, False))
    assert costs_mod.measure(None, None, 4, contexts=(32,), repeats=1, threads={}).verify_ms == bumpy

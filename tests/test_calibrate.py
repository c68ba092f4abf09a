"""Sequential temperature scaling: the ECE, the per-position fit, and calibration of a badly
scaled confidence head on rounds of the real generation loop."""

import mlx.core as mx
import numpy as np
import pytest
from tiny import tiny_target

from dspark import DflashConfig, DflashDrafter, GenerationConfig, RoundEvent, generate
from dspark.training.calibrate import (
    Round,
    calibrate_drafter,
    collect_rounds,
    ece_by_position,
    expected_calibration_error,
    fit_temperatures,
)
from dspark.training.distill import greedy_continuations
from dspark.training.trainer import DrafterTrainer, TrainSettings


def test_expected_calibration_error():
    assert expected_calibration_error([], []) == 0.0
    # Each bin's mean prediction equals its observed rate: perfectly calibrated.
    assert expected_calibration_error([0.25] * 4 + [0.75] * 4, [1, 0, 0, 0, 1, 1, 1, 0]) == pytest.approx(0.0)
    # Always 0.9, never right: the gap is 0.9 everywhere.
    assert expected_calibration_error([0.9] * 10, [0] * 10) == pytest.approx(0.9)
    # Two bins of equal size with gaps 0.2 and 0.4: ECE is their average.
    assert expected_calibration_error([0.1, 0.1, 0.6, 0.6], [0, 1, 0, 0]) == pytest.approx(0.5 * 0.4 + 0.5 * 0.6)
    assert expected_calibration_error([1.0], [1]) == pytest.approx(0.0)  # p = 1 falls in the last bin


def synthetic_rounds(n=3000, G=4, scale=(6.0, 3.0, 0.5, 1.0), seed=0):
    """Rounds whose true conditional survival is sigmoid(u_k) while the head reports
    scale_k * u_k: over-confident at positions 1 and 2, under-confident at 3."""
    rng = np.random.default_rng(seed)
    u = rng.normal(0.5, 1.5, size=(n, G))
    survive = rng.random((n, G)) < 1 / (1 + np.exp(-u))
    accepted = np.where(survive.all(1), G, survive.argmin(1))
    return [Round(tuple((u[i] * np.array(scale)).tolist()), G, int(accepted[i])) for i in range(n)]


def test_sts_recovers_the_temperatures_and_lowers_ece():
    fit, check = synthetic_rounds(seed=0), synthetic_rounds(seed=1)
    temps = fit_temperatures(fit, 4)
    assert temps[0] == pytest.approx(6.0, rel=0.25) and temps[1] == pytest.approx(3.0, rel=0.3)
    assert temps[2] < 1.0
    before, per_before = ece_by_position(check, [1.0] * 4, 4)
    after, per_after = ece_by_position(check, temps, 4)
    assert after < 0.5 * before
    assert all(a <= b + 0.01 for a, b in zip(per_after, per_before))
    # Positions no round verified keep T = 1.
    assert fit_temperatures([Round((1.0, 2.0, 3.0), 1, 1), Round((-1.0, 0.0, 0.0), 1, 0)], 3)[1:] == [1.0, 1.0]


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0, vocab=96)


@pytest.fixture(scope="module")
def drafter(target):
    """A briefly trained drafter (so some drafts are accepted) with a confidence head made
    badly over-confident by scaling its weights."""
    rng = np.random.default_rng(0)
    prompts = [[int(x) for x in rng.integers(5, 96, size=8)] for _ in range(16)]
    seqs = greedy_continuations(target, prompts, 48)
    d = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, tap_layers=(1, 3), markov_rank=16), seed=0)
    tr = DrafterTrainer(
        target, d, seqs, TrainSettings(steps=40, batch_anchors=16, lr=3e-3, seq_len=48, anchors_per_seq=4)
    )
    for _ in range(40):
        tr.train_step(tr.sample_batch())
    head = d.net.confidence_head.proj
    head.weight = head.weight * 25.0
    head.bias = head.bias * 25.0 + 5.0
    mx.eval(d.net.parameters())
    return d


def prompts(n, seed=7):
    rng = np.random.default_rng(seed)
    return [[int(x) for x in rng.integers(5, 96, size=6)] for _ in range(n)]


def test_raw_logits_are_read_through_the_real_loop(target, drafter):
    drafter.calibration = [2.0, 2.0, 2.0, 2.0]
    try:
        rounds, events = collect_rounds(target, drafter, prompts(1), max_tokens=12)
        assert drafter.calibration == [2.0] * 4
        assert any(abs(z) > 20 for r in rounds for z in r.logits)  # beyond what a float32 sigmoid keeps
        # The calibrated confidences the engine reports are sigmoid(z / T) of those logits.
        cfg = GenerationConfig(policy="fixed", max_tokens=12, block_size=4, stop_at_eos=False)
        calibrated = [e.confidences for e in generate(target, drafter, prompts(1)[0], cfg) if isinstance(e, RoundEvent)]
        expect = [tuple(1 / (1 + np.exp(-np.array(r.logits) / 2.0))) for r in rounds]
        assert np.allclose(np.array(calibrated), np.array(expect), atol=1e-5)
    finally:
        drafter.calibration = None


def test_calibration_lowers_ece_on_held_out_rounds(target, drafter, tmp_path):
    result = calibrate_drafter(target, drafter, prompts(8), rounds=400, max_tokens=40)
    assert drafter.calibration is None  # the fit returns its result; the caller decides
    assert result.check_rounds > 20 and result.fit_rounds > 20
    assert result.ece_after < result.ece_before
    assert result.kept() == result.temperatures and len(result.temperatures) == 4
    assert result.temperatures[0] > 1.0  # the scaled head was over-confident
    drafter.calibration = result.kept()
    try:
        drafter.save(tmp_path)
        assert DflashDrafter.load(tmp_path).calibration == result.temperatures
    finally:
        drafter.calibration = None


def test_calibrate_refuses_a_drafter_without_confidence_head(target):
    from dspark.errors import DsparkError

    plain = DflashDrafter.init(
        target, DflashConfig(block_size=3, num_layers=1, tap_layers=(1,), markov=False, confidence=False)
    )
    with pytest.raises(DsparkError):
        calibrate_drafter(target, plain, prompts(2))

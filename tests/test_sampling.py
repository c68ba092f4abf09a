"""Speculative sampling is lossless in distribution.

On a tiny vocabulary we compute the target's exact marginal distributions of the first three
generated tokens (by enumerating every prefix), then sample N speculative generations with
different seeds and bound the total-variation distance between empirical and exact.

The bound: for N samples over K categories, E[TV] <= 0.5 * sum_v sqrt(p_v (1 - p_v) / N), and
TV moves by at most 1/N per sample, so by McDiarmid P(TV > E[TV] + eps) <= exp(-2 N eps^2).
With eps = sqrt(ln(1/delta) / (2N)) and delta = 1e-4, a correct sampler fails a check with
probability below 1e-4; a sampler that skips the ratio test is off by far more.

Greedy's choice (``dspark.sampling``) is mlx-lm's: the argmax shortcuts the engine takes, before
the soft-cap or not, give mlx-lm's token wherever they are used, and a bf16 near tie goes to the
lower id as it does in mlx-lm.
"""

import math

import mlx.core as mx
import numpy as np
import pytest
from oracle import OracleDrafter
from tiny import tiny_target

from dspark import DflashConfig, DflashDrafter, GenerationConfig, SamplingParams, generate, run_to_summary
from dspark.costs import Costs
from dspark.sampling import distribution

VOCAB, PROMPT, N, DELTA = 12, [3, 7, 1, 9, 4], 1500, 1e-4


def exact_marginals(target, sp: SamplingParams, steps: int = 3):
    """P(token at step i) for i < steps, by enumerating all prefixes (VOCAB ** i of them)."""
    prefixes, weights, out = [[]], np.array([1.0]), []
    for _ in range(steps):
        batch = mx.array([PROMPT + p for p in prefixes])
        probs = np.array(distribution(target.model(batch)[:, -1, :], sp))
        joint = weights[:, None] * probs  # [prefixes, VOCAB]
        out.append(joint.sum(axis=0))
        prefixes = [p + [v] for p in prefixes for v in range(VOCAB)]
        weights = joint.reshape(-1)
    return out


def tv_bound(p: np.ndarray, n: int) -> float:
    return 0.5 * np.sqrt(p * (1 - p) / n).sum() + math.sqrt(math.log(1 / DELTA) / (2 * n))


@pytest.fixture(scope="module")
def target():
    """Three layers, two of them sliding-window layers whose window of 4 wraps within a run (5
    prompt tokens, then drafts), and a global one: every kind of layer and cache the sampler's
    rounds roll back. More layers only made each of the 12,000 generations dearer (six: 2x)."""
    return tiny_target(seed=5, scale=1.0, vocab=VOCAB, window=4, layers=3)


CASES = {
    "random-drafter-T1": (dict(temperature=1.0), "random"),
    "oracle-T0.8-topp-topk": (dict(temperature=0.8, top_p=0.9, top_k=6), "oracle"),
    # the width read from this round's confidences (which depend on the drafts before)
    "random-drafter-T1-threshold": (dict(temperature=1.0, policy="threshold:0.3"), "random"),
    "random-drafter-T1-auto": (dict(temperature=1.0, policy="auto"), "random"),
    # the width learnt from earlier rounds' acceptance
    "oracle-T0.8-auto": (dict(temperature=0.8, policy="auto"), "oracle"),
}
#: Verifying more rows costs more on this pretend machine, so auto's widths vary; a draft is
#: cheap enough that a round pays over the target alone (else auto decodes plainly).
STEEP = Costs(verify_ms=(2.0, 2.2, 2.5, 3.0), draft_ms=0.3, step_ms=1.5)


@pytest.mark.parametrize("name", list(CASES) + ["random-drafter-T1-markov-candidates", "random-drafter-T1-plain-steps"])
def test_speculative_sampling_matches_target_distribution(target, name, monkeypatch):
    if name.endswith("markov-candidates"):  # the Markov loop on 4 of 12 candidates, as on large vocabularies
        import dspark.markov

        monkeypatch.setattr(dspark.markov, "MARKOV_SCORED", 4)
        monkeypatch.setattr(dspark.markov, "MARKOV_FULL_WEIGHTS", 0)
        monkeypatch.setattr(dspark.markov, "MARKOV_TABLE_BYTES", 0)
        name = "random-drafter-T1"
    if name.endswith("plain-steps"):  # auto's plain steps between rounds that draft (dspark.policy)
        from dspark.policy import Scheduler

        monkeypatch.setattr(Scheduler, "drafts", lambda self, position, budget: position % 2 == 0)
        name = "random-drafter-T1"
    kw, kind = CASES[name]
    cfg = GenerationConfig(max_tokens=3, stop_at_eos=False, **{"policy": "fixed", **kw})
    exact = exact_marginals(target, cfg.sampling)
    if kind == "random":
        drafter = DflashDrafter.init(target, DflashConfig(block_size=3, num_layers=1, markov_rank=8), seed=1)
    else:  # a deterministic drafter proposing a fixed plausible sequence (q is one-hot)
        drafter = OracleDrafter(PROMPT + [int(np.argmax(e)) for e in exact] * 2, VOCAB, block_size=3, corrupt=0.3)
    counts = np.zeros((3, VOCAB))
    accepted, widths = 0, set()
    for seed in range(N):
        s = run_to_summary(
            generate(target, drafter, PROMPT, GenerationConfig(**{**cfg.__dict__, "seed": seed}), costs=STEEP)
        )
        for i, tok in enumerate(s.tokens):
            counts[i, tok] += 1
        accepted += sum(s.accepted_lengths)
        widths.update(s.verify_widths)
    assert accepted > N // 4, "the test needs accepted drafts to exercise the ratio test"
    if cfg.policy != "fixed":
        assert len(widths) > 1, f"the policy should vary the width, got {sorted(widths)}"
    for i in range(3):
        tv = 0.5 * np.abs(counts[i] / N - exact[i]).sum()
        assert tv <= tv_bound(exact[i], N), f"token {i}: TV {tv:.4f} > bound {tv_bound(exact[i], N):.4f}"


def test_the_bound_catches_a_sampler_that_skips_the_ratio_test(target, monkeypatch):
    """The check has power: accepting every draft (no ratio test) fails it by a wide margin."""
    import dspark.rounds as rounds

    real = rounds.accept_sampled

    def accept_all(p, q, drafted, key):
        ok, fallback = real(p, q, drafted, key)
        return mx.ones_like(ok), fallback

    monkeypatch.setattr(rounds, "accept_sampled", accept_all)
    n = 300
    cfg = GenerationConfig(policy="fixed", max_tokens=2, stop_at_eos=False, temperature=1.0)
    exact = exact_marginals(target, cfg.sampling, steps=2)
    drafter = DflashDrafter.init(target, DflashConfig(block_size=3, num_layers=1, markov_rank=8), seed=1)
    counts = np.zeros((2, VOCAB))
    for seed in range(n):
        s = run_to_summary(generate(target, drafter, PROMPT, GenerationConfig(**{**cfg.__dict__, "seed": seed})))
        for i, tok in enumerate(s.tokens):
            counts[i, tok] += 1
    tv = 0.5 * np.abs(counts[0] / n - exact[0]).sum()
    assert tv > 2 * tv_bound(exact[0], n)


def test_plain_stretches_sample_the_target_distribution(target, monkeypatch):
    """auto's plain steps run pipelined (``dspark.plain.plain_steps``: each token's forward is
    queued before the one before it is read), and the drafter drafts in their shadow (sampling
    with keys of its own, never verified): a run of them alone, three tokens a run, a shadow
    draft whenever none is waiting, has the target's distribution, top-p and top-k included."""
    from dspark.policy import Scheduler

    monkeypatch.setattr(Scheduler, "drafts", lambda self, position, budget: False)
    monkeypatch.setattr(Scheduler, "shadow_due", lambda self: True)
    judged = []
    monkeypatch.setattr(Scheduler, "observe_shadow", lambda self, position, width, matched: judged.append(width))
    cfg = GenerationConfig(policy="fixed", max_tokens=3, stop_at_eos=False, temperature=0.8, top_p=0.9, top_k=6)
    exact = exact_marginals(target, cfg.sampling)
    drafter = DflashDrafter.init(target, DflashConfig(block_size=3, num_layers=1, markov_rank=8), seed=1)
    counts = np.zeros((3, VOCAB))
    for seed in range(N):
        s = run_to_summary(
            generate(target, drafter, PROMPT, GenerationConfig(**{**cfg.__dict__, "seed": seed}), costs=STEEP)
        )
        assert s.plain_steps == 3 and s.rounds == 0
        for i, tok in enumerate(s.tokens):
            counts[i, tok] += 1
    for i in range(3):
        tv = 0.5 * np.abs(counts[i] / N - exact[i]).sum()
        assert tv <= tv_bound(exact[i], N), f"token {i}: TV {tv:.4f} > bound {tv_bound(exact[i], N):.4f}"
    assert len(judged) >= N  # a shadow draft at least once a run, each judged


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16, mx.float16])
def test_the_shortcut_before_the_soft_cap_takes_mlx_lm_s_token_whenever_it_is_used(dtype):
    """The engine reads the verify rows before Gemma's soft-cap and caps only the best and the
    runner-up: wherever that margin exceeds ``tie_margin(.., softcap)``, the raw argmax is
    mlx-lm's greedy token of the capped logits. Rows reach far into the cap's flat tails, where
    distinct raw logits round to one capped value, and sit at every distance from the bound."""
    import numpy as np

    from dspark.sampling import greedy_choice, greedy_with_margin, soft_cap, tie_margin

    rng = np.random.default_rng(1)
    V, cap = 4096, 30.0
    tol = tie_margin(V, dtype, cap)
    rows = []
    for i in range(400):
        x = rng.normal(0, rng.choice([0.5, 3, 12, 40]), V)
        j, k = rng.choice(V, 2, replace=False)
        x[j] = x.max() + 40 * tol
        x[k] = x[j] - tol * 10.0 ** rng.uniform(-4, 2)  # a runner-up at every distance from the bound
        if i % 10 == 0:
            x[k] = x[j]
        rows.append(x)
    raw = mx.array(np.array(rows), dtype=dtype)
    best, margin = greedy_with_margin(raw, cap)
    rule = greedy_choice(soft_cap(raw, cap))  # mlx-lm: the capped logits, then its rule
    fast = [b for b, m in zip(best.tolist(), margin.tolist()) if m > tol]
    exact = [r for r, m in zip(rule.tolist(), margin.tolist()) if m > tol]
    assert fast == exact and 20 < len(fast) < 381  # the shortcut is used, and not everywhere
    # the bound is not vacuous: below it the raw argmax often is not mlx-lm's token (the cap
    # merges distinct raw logits, and the lower id wins)
    assert any(b != r for b, r, m in zip(best.tolist(), rule.tolist(), margin.tolist()) if m <= tol)
    # without a cap the raw margin is the margin: the same rule as before
    assert tie_margin(V, dtype, None) == tie_margin(V, dtype) < tol
    assert greedy_with_margin(raw, None)[1].tolist() == greedy_with_margin(raw)[1].tolist()


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16, mx.float16])
def test_the_argmax_shortcut_takes_mlx_lm_s_token_whenever_it_is_used(dtype):
    """Where the margin over the runner-up exceeds ``tie_margin``, the plain argmax is mlx-lm's
    greedy token (the argmax of logits - logsumexp in the dtype); rows built with near ties at
    every scale, and rows whose best logits are equal, check both sides of the bound."""
    import numpy as np

    from dspark.sampling import greedy_choice, greedy_with_margin, tie_margin

    rng = np.random.default_rng(0)
    V = 4096
    tol = tie_margin(V, dtype)
    rows = []
    for i in range(400):
        x = rng.normal(0, rng.choice([0.5, 3, 12]), V)
        j, k = rng.choice(V, 2, replace=False)
        x[j] = x.max() + 40 * tol  # clear of the rest: the runner-up is x[k]
        x[k] = x[j] - tol * 10.0 ** rng.uniform(-4, 1.5)  # a runner-up at every distance from the bound
        if i % 10 == 0:
            x[k] = x[j]  # an exact tie
        rows.append(x)
    flat = np.zeros(V)  # a flat row: the log-probabilities of 0.5 and 0.5039 round together below fp32
    flat[3], flat[7] = 0.5, 0.50390625
    rows.append(flat)
    logits = mx.array(np.array(rows), dtype=dtype)
    best, margin = greedy_with_margin(logits)
    rule = greedy_choice(logits)
    fast = [b for b, m in zip(best.tolist(), margin.tolist()) if m > tol]
    exact = [r for r, m in zip(rule.tolist(), margin.tolist()) if m > tol]
    assert fast == exact and 20 < len(fast) < 381  # the shortcut is used, and not everywhere
    # the bound is not vacuous: below it, the plain argmax does sometimes differ from the rule
    if dtype != mx.float32:
        assert any(b != r for b, r, m in zip(best.tolist(), rule.tolist(), margin.tolist()) if m <= tol)


def test_greedy_takes_mlx_lm_s_choice_at_a_bf16_near_tie():
    """Two logits distinct in bf16 whose log-probabilities round to the same value: mlx-lm's
    greedy sampler (argmax of logits - logsumexp in the model's dtype) takes the lower id, and
    so must the engine, where a plain argmax of the logits takes the other."""
    from mlx_lm.sample_utils import make_sampler

    from dspark.sampling import greedy_choice

    logits = mx.zeros((1, 1000), mx.bfloat16)
    logits[0, 3], logits[0, 7] = 0.5, 0.50390625  # one bf16 step apart
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)  # as mlx_lm.generate_step computes them
    assert logprobs[0, 3].item() == logprobs[0, 7].item()  # the near tie rounds to a tie
    assert mx.argmax(logits, axis=-1).item() == 7
    assert greedy_choice(logits).item() == make_sampler(0.0)(logprobs).item() == 3

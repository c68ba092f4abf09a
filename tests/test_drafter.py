"""The DflashDrafter API: save/load round trip, training forward shapes, gradients."""

from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest
from tiny import tiny_model, tiny_target

from dspark import DflashConfig, DflashDrafter, DrafterMismatchError, DraftOpts, DsparkError, SamplingParams, Target
from dspark.backbone import ContextKV

CFG = DflashConfig(block_size=5, num_layers=2, tap_layers=(1, 3), markov_rank=16)


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=1, vocab=96)


@pytest.fixture(scope="module")
def drafter(target):
    return DflashDrafter.init(target, CFG, seed=7)


def test_attributes(target, drafter):
    assert drafter.m == 2 and drafter.cfg == CFG and drafter.dims == target.dims
    assert drafter.target_id == target.target_id
    assert len(drafter.names) == len(set(drafter.names))
    assert len(drafter.flat_params()) == len(drafter.names)
    assert drafter.get("fc.weight").shape == (target.dims.hidden_size, 2 * target.dims.hidden_size)


def test_save_load_identical(tmp_path, target, drafter):
    drafter.calibration = [1.0, 1.5, 2.0, 1.0, 0.5]
    try:
        drafter.save(tmp_path / "d")
    finally:
        drafter.calibration = None  # the module's shared drafter stays as it was
    back = DflashDrafter.load(tmp_path / "d", target=target)
    assert back.names == drafter.names and back.cfg == drafter.cfg and back.calibration == [1.0, 1.5, 2.0, 1.0, 0.5]
    for a, b in zip(drafter.flat_params(), back.flat_params()):
        assert np.array_equal(np.array(a), np.array(b))
    back.calibration = None
    hidden = mx.random.normal((1, 9, 2 * target.dims.hidden_size))
    for sp in (SamplingParams(), SamplingParams(temperature=1.0)):
        r1 = drafter.forward_rows(target.projection, hidden, [5], 5, opts=DraftOpts(sp, mx.random.key(3)))
        r2 = back.forward_rows(target.projection, hidden, [5], 5, opts=DraftOpts(sp, mx.random.key(3)))
        assert r1.tokens.tolist() == r2.tokens.tolist()
        assert np.allclose(np.array(r1.confidences), np.array(r2.confidences))


def test_context_cache_equals_recomputing(target, drafter):
    """Appending context rows round by round gives the same drafts as projecting them at once."""
    hidden = mx.random.normal((1, 12, 2 * target.dims.hidden_size))
    ctx = ContextKV(CFG.num_layers)
    for lo, hi in [(0, 5), (5, 6), (6, 12)]:
        inc = drafter.forward_rows(target.projection, hidden[:, lo:hi], [7], 5, context=ctx)
    full = drafter.forward_rows(target.projection, hidden, [7], 5)
    assert ctx.offset == 12
    assert np.allclose(np.array(inc.hidden), np.array(full.hidden), atol=1e-5)


def test_the_context_holds_every_row_of_appends_longer_than_its_growth_step():
    """200 rows, then 311 at once (more than a growth step, into a buffer with room left): every
    row where it was appended (the buffer was sized from the old buffer and overran)."""
    ctx = ContextKV(1)
    for lo, hi in [(0, 200), (200, 511), (511, 514)]:
        rows = mx.arange(lo, hi, dtype=mx.float32).reshape(1, 1, -1, 1)
        ctx.append([(rows, -rows)])
    k, v = ctx.layer(0)
    assert ctx.offset == 514 and k[0, 0, :, 0].tolist() == list(range(514)) and v[0, 0, -1, 0].item() == -513


@pytest.mark.parametrize("first", [3, 40, 300])
def test_rows_older_than_every_window_are_not_projected_and_change_nothing(target, monkeypatch, first):
    """A drafter that reads at most the last 8 rows before the anchor projects only those of a
    long append (the rest are skipped, zero); its drafts are those of projecting every row."""
    from dspark.drafting import BlockLayout

    windowed = DflashDrafter.init(target, replace(CFG, context_window=8), seed=7)
    assert windowed.layout.reach(CFG.num_layers) == 8
    hidden = mx.random.normal((1, first + 30, 2 * target.dims.hidden_size))
    projected = []
    real = DflashDrafter.project_context_rows
    monkeypatch.setattr(
        DflashDrafter, "project_context_rows", lambda self, h, o=0: projected.append(h.shape[1]) or real(self, h, o)
    )

    def drafts(ctx):
        return [
            windowed.forward_rows(target.projection, hidden[:, lo:hi], [7], 5, context=ctx).hidden
            for lo, hi in [(0, first), (first, first + 1), (first + 1, first + 30)]
        ]

    skipped = drafts(ContextKV(CFG.num_layers))
    assert projected == [min(first, 8), 1, 8]
    monkeypatch.setattr(BlockLayout, "reach", lambda self, layers: None)
    every = drafts(ContextKV(CFG.num_layers))
    assert projected[3:] == [first, 1, 29]
    for a, b in zip(skipped, every):
        assert np.allclose(np.array(a), np.array(b), atol=1e-5)


def test_forward_train_shapes_and_gradients(target, drafter):
    A, L, G, H = 3, 6, CFG.block_size, target.dims.hidden_size
    h_ctx = mx.random.normal((A, L, 2 * H))
    mask = mx.array([[1] * L, [0, 0, 1, 1, 1, 1], [0] * (L - 1) + [1]])
    prev = mx.random.randint(0, 96, (A, G))
    labels = mx.random.randint(0, 96, (A, G))
    anchor_emb = target.projection.embed(prev[:, 0])
    out = drafter.forward_train(target.projection, h_ctx, mask, anchor_emb, prev)
    assert out.logits.shape == (A, G, 96) and out.base_logits.shape == (A, G, 96)
    assert out.conf_logits.shape == (A, G) and out.hidden.shape == (A, G, H)

    def loss(*params):
        def f():
            o = drafter.forward_train(target.projection, h_ctx, mask, anchor_emb, prev)
            ce = mx.mean(mx.logsumexp(o.logits, -1) - mx.take_along_axis(o.logits, labels[..., None], -1)[..., 0])
            return ce + mx.mean(mx.sigmoid(o.conf_logits))

        return drafter.use_params(params, f)

    before = [np.array(p) for p in drafter.flat_params()]
    _, grads = mx.value_and_grad(loss, argnums=list(range(len(drafter.names))))(*drafter.flat_params())
    for name, g in zip(drafter.names, grads):
        assert float(mx.abs(g).sum()) > 0, f"no gradient for {name}"
    for a, b in zip(before, drafter.flat_params()):  # use_params restored the parameters
        assert np.array_equal(a, np.array(b))


@pytest.mark.parametrize("ctx_len", [0, 4])
def test_packed_training_forward_matches_generation_and_windows(target, drafter, ctx_len):
    """The trainer's packed forward (context projected once per sequence, absolute positions)
    equals ``forward_train`` on right-aligned windows and ``forward_rows`` at generation."""
    mx.random.seed(2)
    N, S, G, H = 2, 10, CFG.block_size, target.dims.hidden_size
    h_seq = mx.random.normal((N, S, 2 * H))
    owner, positions = [0, 1, 1, 0], [3, 9, 1, 6]
    prev = mx.random.randint(0, 96, (len(owner), G))
    packed = drafter.forward_train_packed(
        target.projection, h_seq, owner=mx.array(owner), positions=mx.array(positions), prev_toks=prev, ctx_len=ctx_len
    )
    L = ctx_len or S
    window = mx.zeros((len(owner), L, 2 * H))
    mask = np.zeros((len(owner), L), bool)
    for a, (i, p) in enumerate(zip(owner, positions)):
        n = min(p, L)
        if n:
            window[a, L - n :] = h_seq[i, p - n : p]
        mask[a, L - n :] = True
    windowed = drafter.forward_train(
        target.projection, window, mx.array(mask), target.projection.embed(prev[:, 0]), prev
    )
    assert np.allclose(np.array(packed.logits), np.array(windowed.logits), atol=1e-4)
    assert np.allclose(np.array(packed.conf_logits), np.array(windowed.conf_logits), atol=1e-4)
    if ctx_len == 0:
        for a, (i, p) in enumerate(zip(owner, positions)):
            rows = drafter.forward_rows(target.projection, h_seq[i : i + 1, :p], prev[a : a + 1, 0], G)
            assert np.allclose(np.array(rows.hidden[0]), np.array(packed.hidden[a]), atol=1e-4)


def test_install_param(drafter):
    i = drafter.names.index("norm.weight")
    old = drafter.flat_params()[i]
    drafter.install_param(i, old * 2)
    try:
        assert np.allclose(np.array(drafter.get("norm.weight")), 2 * np.array(old))
    finally:
        drafter.install_param(i, old)


def test_init_is_seeded_without_touching_the_global_random_state(target):
    mx.random.seed(5)
    reseeded = mx.random.uniform(shape=(3,)).tolist()
    mx.random.seed(11)
    a = DflashDrafter.init(target, CFG, seed=5)
    assert mx.random.uniform(shape=(3,)).tolist() != reseeded  # the caller's seed was not replaced
    b = DflashDrafter.init(target, CFG, seed=5)
    c = DflashDrafter.init(target, CFG, seed=6)
    same = [np.array_equal(np.array(x), np.array(y)) for x, y in zip(a.flat_params(), b.flat_params())]
    assert all(same)
    assert not all(np.array_equal(np.array(x), np.array(y)) for x, y in zip(a.flat_params(), c.flat_params()))


def test_load_refuses_other_target(tmp_path, drafter):
    drafter.save(tmp_path / "d")
    other = tiny_target(seed=1, vocab=128)
    with pytest.raises(DrafterMismatchError, match="vocab_size 96 vs 128"):
        DflashDrafter.load(tmp_path / "d", target=other)
    same_dims = tiny_target(seed=1, vocab=96, window=8)
    with pytest.raises(DrafterMismatchError, match="made for target"):
        DflashDrafter.load(tmp_path / "d", target=same_dims)


def test_load_errors(tmp_path, drafter):
    with pytest.raises(DsparkError, match="not found"):
        DflashDrafter.load(tmp_path / "missing")
    drafter.save(tmp_path / "d")
    (tmp_path / "d" / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(DsparkError, match="safetensors"):
        DflashDrafter.load(tmp_path / "d")
    (tmp_path / "d" / "config.json").write_text("{not json")
    with pytest.raises(DsparkError, match="not valid JSON"):
        DflashDrafter.load(tmp_path / "d")


def test_heads_off_is_dflash_style(target):
    d = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov=False, confidence=False), seed=0)
    assert not any(n.startswith(("markov_head", "confidence_head")) for n in d.names)
    rows = d.forward_rows(target.projection, mx.random.normal((1, 3, d.m * 64)), [2], 4)
    assert rows.tokens.shape == (1, 4) and rows.confidences is None


def test_weights_note_tells_checkpoints_apart(tmp_path, target, drafter):
    drafter.save(tmp_path / "d")
    back = DflashDrafter.load(tmp_path / "d", target=target)
    assert back.target_weights == target.weights_fingerprint and back.weights_note(target) is None
    model = tiny_model(1, vocab=96)
    model.model.norm.weight = model.model.norm.weight * 1.5
    retrained = Target(model)
    assert back.weights_note(retrained) is not None  # same architecture, other weights: a warning


def test_weight_rows_of_a_quantized_linear_are_its_dequantized_rows():
    import mlx.nn as nn

    from dspark.markov import weight_rows as _weight_rows

    lin = nn.Linear(64, 40, bias=False)
    q = nn.QuantizedLinear.from_linear(lin, group_size=32, bits=4)
    ids = mx.array([[3, 0, 39], [7, 7, 1]])
    full = mx.dequantize(q.weight, q.scales, q.biases, group_size=32, bits=4)
    assert np.allclose(np.array(_weight_rows(q, ids)), np.array(full[ids]), atol=1e-6)
    assert np.array_equal(np.array(_weight_rows(lin, ids)), np.array(lin.weight[ids]))


def test_the_candidate_markov_loop_drafts_what_the_full_loop_does_when_the_best_is_a_candidate(monkeypatch):
    """With a Markov bias that cannot lift a token past the backbone's top candidates (here a
    zero bias), scoring only the candidates drafts exactly the full loop's tokens."""
    import dspark.markov

    target = tiny_target(seed=0, vocab=96)
    d = DflashDrafter.init(target, DflashConfig(block_size=5, num_layers=1, markov_rank=16), seed=4)
    h = mx.random.normal((1, 9, d.m * target.dims.hidden_size), key=mx.random.key(0))
    full = d.forward_rows(target.projection, h, [7], 5, opts=DraftOpts())
    monkeypatch.setattr(dspark.markov, "MARKOV_SCORED", 8)
    monkeypatch.setattr(dspark.markov, "MARKOV_FULL_WEIGHTS", 0)
    monkeypatch.setattr(dspark.markov, "MARKOV_TABLE_BYTES", 0)
    pruned = d.forward_rows(target.projection, h, [7], 5, opts=DraftOpts())
    assert pruned.tokens.tolist() == full.tokens.tolist() and pruned.logits is None
    assert np.allclose(np.array(pruned.confidences), np.array(full.confidences), atol=1e-5)


def _markov_drafter(target, seed=5):
    """A drafter whose Markov head moves the logits (W2 is zero at init)."""
    d = DflashDrafter.init(target, DflashConfig(block_size=5, num_layers=1, markov_rank=16), seed=seed)
    w2 = d.net.markov_head.markov_w2
    w2.weight = mx.random.normal(w2.weight.shape, key=mx.random.key(seed)) * 2.0
    return d


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_markov_table_drafts_what_the_head_computes_row_by_row(monkeypatch, temperature):
    """A small head's biases come from its table; drafting with it gives the tokens, logits, q
    and confidences of the loop that applies the head to each previous token."""
    import dspark.markov

    target = tiny_target(seed=0, vocab=96)
    d = _markov_drafter(target)
    h = mx.random.normal((1, 9, d.m * target.dims.hidden_size), key=mx.random.key(0))
    opts = DraftOpts(SamplingParams(temperature=temperature), key=mx.random.key(2))
    tabled = d.forward_rows(target.projection, h, [7], 5, opts=opts)
    assert d._table[1].shape == (96, 96)
    monkeypatch.setattr(dspark.markov, "MARKOV_TABLE_BYTES", 0)
    full = d.forward_rows(target.projection, h, [7], 5, opts=opts)
    assert tabled.tokens.tolist() == full.tokens.tolist()
    assert np.allclose(np.array(tabled.logits), np.array(full.logits), atol=1e-4)
    assert np.allclose(np.array(tabled.confidences), np.array(full.confidences), atol=1e-5)
    if temperature:
        assert np.allclose(np.array(tabled.q), np.array(full.q), atol=1e-5)


def test_the_markov_table_follows_new_weights_and_its_size_limit(monkeypatch):
    """Training installs new arrays: the next draft tabulates them again. A head over the limit
    gets no table."""
    import dspark.markov

    target = tiny_target(seed=0, vocab=96)
    d = _markov_drafter(target)
    h = mx.random.normal((1, 9, d.m * target.dims.hidden_size), key=mx.random.key(0))
    d.forward_rows(target.projection, h, [7], 5, opts=DraftOpts())
    old = d._table[1]
    w2 = d.net.markov_head.markov_w2
    w2.weight = -w2.weight
    after = d.forward_rows(target.projection, h, [7], 5, opts=DraftOpts())
    assert d._table[1] is not old and np.allclose(np.array(d._table[1]), -np.array(old), atol=1e-5)
    monkeypatch.setattr(dspark.markov, "MARKOV_TABLE_BYTES", 0)
    fresh = d.forward_rows(target.projection, h, [7], 5, opts=DraftOpts())
    assert after.tokens.tolist() == fresh.tokens.tolist()
    assert np.allclose(np.array(after.logits), np.array(fresh.logits), atol=1e-4)
    monkeypatch.setattr(dspark.markov, "MARKOV_TABLE_BYTES", 96 * 96 * 4 - 1)
    assert dspark.markov.bias_table(d) is None

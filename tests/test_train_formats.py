"""Drafters made and trained in the published formats (``DflashConfig.format``, ``dspark train
--format``): a new drafter is the network that format's reader builds from the config.json its
writer wrote, its training forward is its drafting forward teacher-forced (windows and anchor slot
included), it saves and loads back in that format, a few training steps resume exactly, and what a
format cannot carry is one sentence."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from tiny import tiny_target

from dspark import DflashConfig, load_drafter
from dspark.cli import main as dspark
from dspark.config import SamplingParams
from dspark.convert import new_drafter
from dspark.drafting import DraftOpts
from dspark.errors import DsparkError
from dspark.training.train import train_drafter
from dspark.training.trainer import TrainSettings

KINDS = {
    "speculators": DflashConfig(
        block_size=4, num_layers=2, tap_layers=(1, 3), markov_rank=16, format="speculators", context_window=12
    ),
    "zlab": DflashConfig(
        block_size=4, num_layers=1, tap_layers=(1, 3), markov=False, confidence=False, format="zlab", context_window=12
    ),
    "deepspec": DflashConfig(block_size=4, num_layers=1, tap_layers=(1, 3), markov_rank=16, format="deepspec"),
    "native-windowed": DflashConfig(block_size=4, num_layers=1, tap_layers=(1, 3), markov_rank=16, context_window=12),
}


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0, vocab=96, scale=0.15)


def randomize(drafter, seed: int = 5):
    """Weights away from their initial values (a Markov head starts at zero, norms at one)."""
    from mlx.utils import tree_unflatten

    params = tree_flatten(drafter.net.parameters())
    keys = mx.random.split(mx.random.key(seed), len(params))
    drafter.net.update(
        tree_unflatten([(k, v + 0.05 * mx.random.normal(v.shape, key=keys[i])) for i, (k, v) in enumerate(params)])
    )
    mx.eval(drafter.net.parameters())


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_new_drafter_saves_and_loads_back_in_its_format_and_trains_as_it_drafts(target, kind, tmp_path):
    cfg = KINDS[kind]
    drafter = new_drafter(target, cfg, seed=1)
    randomize(drafter)
    drafter.save(tmp_path / "d")
    back = load_drafter(tmp_path / "d", target)
    expected = {"speculators": "speculators", "zlab": "zlab-dflash", "deepspec": "deepspec"}.get(
        cfg.format, "dspark-drafter"
    )
    assert back.format == expected and back.block_size == 4 and tuple(back.tap_layers) == (1, 3)
    # a long context, past the window: drafting and the teacher-forced training forward agree
    ids = mx.random.randint(5, 96, (1, 40), key=mx.random.key(2)).astype(mx.int32)
    _, taps = target.forward(ids, target.make_cache(), back.tap_layers, logits=False)
    p = 30
    rows = back.forward_rows(target.projection, taps[:, :p], [int(ids[0, p])], 4, opts=DraftOpts(SamplingParams()))
    drafted = rows.tokens[0]
    prev = mx.concatenate([ids[0, p : p + 1], drafted[:-1]])[None]  # teacher-forced with the drafted tokens
    train = back.forward_train_packed(
        target.projection, taps, owner=mx.array([0]), positions=mx.array([p]), prev_toks=prev
    )
    assert np.allclose(np.array(train.logits[0]), np.array(rows.logits[0]), atol=1e-4)
    if back.has_confidence:
        assert np.allclose(np.array(train.conf_logits[0]), np.array(rows.conf_logits[0]), atol=1e-4)
    # the window is real: rows before it change nothing, rows inside it do
    if cfg.context_window:
        far = taps.at[:, :5].add(3.0)
        near = taps.at[:, p - 2 : p].add(3.0)
        out = [
            back.forward_train_packed(
                target.projection, t, owner=mx.array([0]), positions=mx.array([p]), prev_toks=prev
            ).logits
            for t in (far, near)
        ]
        assert np.allclose(np.array(out[0]), np.array(train.logits)) and not np.allclose(
            np.array(out[1]), np.array(train.logits)
        )


@pytest.mark.parametrize("kind", ["speculators", "zlab", "deepspec"])
def test_training_in_a_format_resumes_exactly_and_writes_that_format(target, kind, tmp_path, monkeypatch):
    import os
    import signal

    from dspark.training.trainer import DrafterTrainer

    rng = np.random.default_rng(1)
    texts = [[int(x) for x in rng.integers(5, 96, size=40)] for _ in range(12)]
    s = TrainSettings(
        steps=6,
        batch_anchors=8,
        seq_len=32,
        prompt_len=6,
        self_distill=True,
        eval_prompts=2,
        eval_tokens=10,
        compile=False,
    )
    quiet = dict(progress=False, log=lambda m: None)
    cfg = KINDS[kind]
    straight = train_drafter(target, texts, tmp_path / "a", cfg, settings=s, **quiet)
    real_step = DrafterTrainer.train_step

    def stopped_after_three(self, batch):
        out = real_step(self, batch)
        if self.step == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # noted, and acted on before step 4
        return out

    monkeypatch.setattr(DrafterTrainer, "train_step", stopped_after_three)
    with pytest.raises(KeyboardInterrupt):
        train_drafter(target, texts, tmp_path / "b", cfg, settings=s, **quiet)
    monkeypatch.setattr(DrafterTrainer, "train_step", real_step)
    resumed = train_drafter(target, texts, tmp_path / "b", cfg, settings=s, resume=True, **quiet)
    a, b = dict(tree_flatten(straight.net.parameters())), dict(tree_flatten(resumed.net.parameters()))
    assert a.keys() == b.keys() and all(np.allclose(np.array(a[k]), np.array(b[k]), atol=1e-5) for k in a)
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert config["dspark"]["trained_as"]["format"] == kind and config["dspark"]["target_weights"]
    report = json.loads((tmp_path / "b" / "train_report.json").read_text())
    assert report["steps_done"] == 6 and report["drafter"]["format"] == kind
    loaded = load_drafter(tmp_path / "b", target)
    if loaded.has_confidence:
        assert loaded.calibration == report["heldout"]["calibration"]["temperatures"]


@pytest.mark.parametrize(
    "cfg, words",
    [
        (DflashConfig(format="zlab"), "no Markov or confidence head"),
        (DflashConfig(format="deepspec", context_window=64), "no context window"),
    ],
)
def test_what_a_format_cannot_carry_is_one_sentence(target, cfg, words):
    with pytest.raises(DsparkError, match=words):
        new_drafter(target, cfg)


def test_dspark_train_format_refusal_on_the_command_line(tmp_path, capsys):
    from tiny import write_tiny_target_dir

    t = write_tiny_target_dir(tmp_path / "t")
    data = tmp_path / "data.txt"
    data.write_text("def f(x):\n    return x\n" * 20)
    code = dspark(
        [
            "train",
            "--target",
            str(t),
            "--data",
            str(data),
            "--out",
            str(tmp_path / "o"),
            "--format",
            "zlab",
            "--steps",
            "2",
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "no Markov or confidence head" in err and err.count("\n") == 0

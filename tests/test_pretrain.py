"""The demo target's pretraining (``dspark.demo.pretrain``) on a tiny recipe and a slice of the
corpus: two phases of different window lengths, the saved directory loads in plain mlx-lm, and a
run stopped by SIGTERM part-way resumes to the same weights as a run straight through."""

from __future__ import annotations

import itertools
import json
import os
import signal

import mlx.core as mx
import numpy as np
import pytest

from dspark import corpus, resources
from dspark.demo import pretrain
from dspark.demo.pretrain import Phase, TargetRecipe

TINY = TargetRecipe(
    phases=(Phase(4, 32, 2), Phase(3, 64, 1)),
    warmup=2,
    checkpoint_every=2,
    eval_seq_len=32,
    eval_seqs=4,
    model={
        **pretrain.MODEL_ARGS,
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 1,
        "sliding_window": 16,
        "sliding_window_pattern": 2,
    },
)


@pytest.fixture
def small_corpus(monkeypatch):
    real = corpus.iter_texts
    monkeypatch.setattr(corpus, "iter_texts", lambda split, root=None: itertools.islice(real(split, root), 6))


def train(out, **kw):
    return pretrain.train_target(
        out, TINY, tokenizer_dir=resources.demo_model("target"), progress=False, log=lambda m: None, **kw
    )


def test_a_stopped_run_resumes_to_the_weights_of_a_straight_one(tmp_path, small_corpus, monkeypatch):
    stats = train(tmp_path / "straight")
    assert stats["steps_done"] == TINY.steps == 7 and stats["recipe"]["phases"][1]["seq_len"] == 64
    assert stats["tokens_seen"] == 4 * 2 * 32 + 3 * 1 * 64
    import mlx_lm

    model, tok = mlx_lm.load(str(tmp_path / "straight"))  # plain mlx-lm reads it
    assert model.args.num_hidden_layers == 2 and tok.decode(tok.encode("def f(x):")) == "def f(x):"

    real_batches = pretrain.Batches

    class SignalledAtStep5(real_batches):
        def __call__(self, step):
            if self.seq_len == 64 and step == 1:  # the second step of phase 2: global step 5
                os.kill(os.getpid(), signal.SIGTERM)
            return super().__call__(step)

    monkeypatch.setattr(pretrain, "Batches", SignalledAtStep5)
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path / "stopped")
    saved, meta = mx.load(str(tmp_path / "stopped" / ".ckpt" / "checkpoint.safetensors"), return_metadata=True)
    assert int(meta["step"]) == 6  # the step the signal landed in finished, then the checkpoint
    assert not (tmp_path / "stopped" / "config.json").exists()
    monkeypatch.setattr(pretrain, "Batches", real_batches)
    with pytest.raises(Exception, match="trained with another"):
        pretrain.train_target(tmp_path / "stopped", TargetRecipe(), resume=True, progress=False, log=lambda m: None)
    resumed = train(tmp_path / "stopped", resume=True)
    assert resumed["steps_done"] == 7 and resumed["tokens_seen"] == stats["tokens_seen"]
    a = mx.load(str(tmp_path / "straight" / "model.safetensors"))
    b = mx.load(str(tmp_path / "stopped" / "model.safetensors"))
    assert a.keys() == b.keys() and all(np.allclose(np.array(a[k]), np.array(b[k]), atol=1e-6) for k in a)
    assert json.loads((tmp_path / "stopped" / "training.json").read_text())["steps_done"] == 7


def test_saving_the_model_shows_no_half_written_file(tmp_path, monkeypatch):
    """Every file of the final directory is written under a hidden temporary name and renamed
    into place: a full disk while writing the weights leaves no visible model file behind."""
    from dspark.demo import target_model
    from dspark.errors import DsparkError

    model = target_model.build_model(dict(TINY.model))
    written = []
    real = mx.save_safetensors

    def record(path, *a, **kw):
        written.append(os.path.basename(path))
        real(path, *a, **kw)

    monkeypatch.setattr(mx, "save_safetensors", record)
    out = tmp_path / "model"
    target_model.save_model(
        model, {"model_type": "gemma4_text"}, tok_dir=resources.demo_model("target"), out_dir=out, extra_files={}
    )
    assert written and all(name.startswith(".") for name in written), written
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []

    def full(path, *a, **kw):
        open(path, "wb").write(b"half")
        raise RuntimeError("[save_safetensors] No space left on device")

    monkeypatch.setattr(mx, "save_safetensors", full)
    again = tmp_path / "again"
    with pytest.raises(DsparkError, match="disk is full"):
        target_model.save_model(
            model, {"model_type": "gemma4_text"}, tok_dir=resources.demo_model("target"), out_dir=again, extra_files={}
        )
    assert "model.safetensors" not in {p.name for p in again.iterdir()} and not any(
        p.name.startswith(".") for p in again.iterdir()
    ), list(again.iterdir())

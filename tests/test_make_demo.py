"""``dspark make-demo --only drafters`` continues what is unfinished and leaves a finished
drafter alone (training it again would rewrite its report and calibration with nothing learnt)."""

import dataclasses
import json

import mlx.core as mx
import pytest

import dspark.loading
import dspark.training.train as train
from dspark.demo import build
from dspark.files import save_safetensors
from dspark.training.trainer import STATE_FILE


def _drafter_dir(path, step=None):
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    if step is not None:
        meta = {"format": "dspark-train-state", "step": step, "drafter": {}, "settings": {}}
        (path / STATE_FILE).parent.mkdir()
        save_safetensors(path / STATE_FILE, {"w": mx.zeros(1)}, {"meta": json.dumps(meta)})


@pytest.fixture
def trained(monkeypatch):
    """The kinds train_drafter was called for; nothing is loaded or trained."""
    calls = []
    monkeypatch.setattr(dspark.loading, "load_target", lambda path: None)
    monkeypatch.setattr(build, "iter_texts", lambda split: iter(()))
    monkeypatch.setattr(build, "prompt_sites", lambda split: [])
    monkeypatch.setattr(build, "heldout_prompts", lambda n: [])
    monkeypatch.setattr(train, "train_drafter", lambda target, texts, out, *a, **k: calls.append(out.name))
    return calls


def test_a_finished_drafter_is_kept_and_an_unfinished_one_continues(tmp_path, trained, capsys):
    _drafter_dir(tmp_path / "dspark", step=4000)  # finished: its last checkpoint is kept
    _drafter_dir(tmp_path / "dflash", step=1200)  # stopped part way
    build.build_drafters(tmp_path, build.TRAINING, resume=True)
    assert trained == ["dflash"]
    assert "the dspark drafter in" in capsys.readouterr().err


def test_more_steps_train_a_finished_drafter_further_and_fresh_rebuilds_both(tmp_path, trained):
    _drafter_dir(tmp_path / "dspark", step=4000)
    _drafter_dir(tmp_path / "dflash")  # built, no checkpoint
    build.build_drafters(tmp_path, dataclasses.replace(build.TRAINING, steps=6000), resume=True)
    assert trained == ["dspark"]
    build.build_drafters(tmp_path, build.TRAINING, resume=False)
    assert trained == ["dspark", "dspark", "dflash"]

"""``dspark make-demo --only drafters`` continues what is unfinished and leaves a finished
drafter alone (training it again would rewrite its report and calibration with nothing learnt)."""

import dataclasses
import json

import mlx.core as mx
import pytest

import dspark.loading
import dspark.training.stepwise as stepwise
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


class Calls(list):
    """The drafters trained, in order, and the data file each was given (``data``)."""

    def __init__(self):
        super().__init__()
        self.data = {}


@pytest.fixture
def trained(monkeypatch):
    """The kinds train_drafter or train_head was called for, and the data each was given;
    nothing is loaded or trained."""
    calls = Calls()
    monkeypatch.setattr(dspark.loading, "load_target", lambda path: None)
    monkeypatch.setattr(build, "iter_texts", lambda split: iter(()))
    monkeypatch.setattr(build, "prompt_sites", lambda split: [])
    monkeypatch.setattr(build, "heldout_prompts", lambda n: [])

    def record(target, texts, out, *a, data_file=None, **k):
        calls.append(out.name)
        calls.data[out.name] = data_file

    monkeypatch.setattr(train, "train_drafter", record)
    monkeypatch.setattr(stepwise, "train_head", record)
    return calls


BLOCKS = ("dspark", "dflash")


def test_a_finished_drafter_is_kept_and_an_unfinished_one_continues(tmp_path, trained, capsys):
    _drafter_dir(tmp_path / "dspark", step=4000)  # finished: its last checkpoint is kept
    _drafter_dir(tmp_path / "dflash", step=1200)  # stopped part way
    build.build_drafters(tmp_path, build.TRAINING, resume=True, kinds=BLOCKS)
    assert trained == ["dflash"]
    assert "the dspark drafter in" in capsys.readouterr().err


def test_more_steps_train_a_finished_drafter_further_and_fresh_rebuilds_both(tmp_path, trained):
    _drafter_dir(tmp_path / "dspark", step=4000)
    _drafter_dir(tmp_path / "dflash")  # built, no checkpoint
    build.build_drafters(tmp_path, dataclasses.replace(build.TRAINING, steps=6000), resume=True, kinds=BLOCKS)
    assert trained == ["dspark"]
    build.build_drafters(tmp_path, build.TRAINING, resume=False, kinds=BLOCKS)
    assert trained == ["dspark", "dspark", "dflash"]


def test_the_autoregressive_kinds_train_as_heads_on_the_data_another_drafter_kept(tmp_path, trained):
    """The recipe's EAGLE-3 and assistant heads go to train_head; a drafter built alone trains on
    the sequences any other recipe drafter keeps on disk (same data), the first builds its own."""
    _drafter_dir(tmp_path / "dspark")
    _drafter_dir(tmp_path / "dflash")
    assert isinstance(build.DRAFTERS["eagle3"], build.HeadConfig)
    build.build_drafters(tmp_path, build.TRAINING, resume=True, kinds=("eagle3",))
    assert trained == ["eagle3"] and trained.data["eagle3"] is None  # nobody's data on disk: its own
    kept = tmp_path / "eagle3" / train.DATA_FILE
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"")
    build.build_drafters(tmp_path, build.TRAINING, resume=True, kinds=("assistant",))
    assert trained == ["eagle3", "assistant"] and trained.data["assistant"] == kept

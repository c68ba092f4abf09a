"""Fine-tuning (``dspark train --from DRAFTER``): the run starts from the drafter's own weights,
keeps its kind, format and shape and writes it back in its format; a drafter option that
contradicts it, or a drafter made for another shape of target, is one sentence; one trained
against other weights of the target's architecture (a fine-tuned Gemma-4) is taken and said
so; ``--resume`` continues the fine-tune exactly without ``--from`` and refuses another one."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from hostile_fixtures import RUN, TRAIN, train_world
from tiny import write_tiny_target_dir

from dspark import load_drafter, load_target
from dspark.cli import main


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_from")
    made = train_world(root)
    target, data = made["target"], made["data"]
    starts = {}
    for name, extra in {
        "native": [*TRAIN],
        "speculators": [*TRAIN, "--format", "speculators"],
        "eagle3": ["--kind", "eagle3", "--block-size", "3", "--layers", "1", "--taps", "1,3", *RUN],
        "assistant": ["--kind", "assistant", "--block-size", "3", "--layers", "1", *RUN],
    }.items():
        out = root / f"start-{name}"
        argv = ["train", "--target", str(target), "--data", str(data), "--out", str(out), "--steps", "3", *extra]
        assert main(argv) == 0
        starts[name] = out
    for name in ("speculators", "eagle3", "assistant"):  # as published: nothing of dspark's in them
        bare = shutil.copytree(
            starts[name], root / f"published-{name}", ignore=shutil.ignore_patterns(".train", "*.json*")
        )
        config = json.loads((starts[name] / "config.json").read_text())
        del config["dspark"]
        (bare / "config.json").write_text(json.dumps(config))
        for extra in ("generation_config.json",):
            if (starts[name] / extra).is_file():
                shutil.copyfile(starts[name] / extra, bare / extra)
        starts[f"published-{name}"] = bare
    return {"root": root, "target": target, "data": data, "starts": starts}


def weights(folder: Path) -> dict:
    return {k: np.array(v) for k, v in mx.load(str(folder / "model.safetensors")).items()}


def fine_tune(world, out: Path, start: Path, *extra: str, target: Path | None = None) -> list[str]:
    return [
        "train",
        "--target",
        str(target or world["target"]),
        "--data",
        str(world["data"]),
        "--out",
        str(out),
        "--from",
        str(start),
        *RUN,
        *extra,
    ]


KINDS = [
    "native",
    "speculators",
    "eagle3",
    "assistant",
    "published-speculators",
    "published-eagle3",
    "published-assistant",
]


@pytest.mark.parametrize("kind", KINDS)
def test_a_fine_tune_starts_from_the_drafters_weights_and_keeps_its_format(world, kind, tmp_path, capsys):
    """With a learning rate of 0 a step changes nothing, so the drafter written is the starting
    one, weight for weight (a new drafter's random weights would differ everywhere); its
    format, shape and layout are the start's, and the report names where it started."""
    start = world["starts"][kind]
    out = tmp_path / "tuned"
    assert main(fine_tune(world, out, start, "--steps", "2", "--lr", "0")) == 0
    a, b = weights(start), weights(out)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    target = load_target(world["target"])
    first, tuned = load_drafter(start, target), load_drafter(out, target)
    assert tuned.format == first.format and tuned.block_size == first.block_size
    assert getattr(tuned, "tap_layers", None) == getattr(first, "tap_layers", None)
    own = ("dspark", "calibration", "target_weights")  # what dspark records in it, besides the format's own
    config = [
        {k: v for k, v in json.loads((d / "config.json").read_text()).items() if k not in own} for d in (start, out)
    ]
    assert config[0] == config[1]
    report = json.loads((out / "train_report.json").read_text())
    assert report["from"]["path"] == str(start) and report["from"]["format"] == first.format
    assert report["steps_done"] == 2
    # what --resume reads back: the shape the run was recorded with, read from the drafter itself
    made = json.loads((out / "config.json").read_text())["dspark"]["trained_as"] if kind != "native" else None
    if made is not None:
        assert made["block_size"] == first.block_size
        layers = {"eagle3": "transformer_layer_config", "assistant": "text_config"}.get(kind.split("-")[-1])
        if layers:
            inner = json.loads((start / "config.json").read_text())[layers]
            assert made["num_layers"] == inner["num_hidden_layers"]
            # dspark records 0 for "twice the width" when it makes a head; a published one's is read
            assert made["intermediate_size"] == (inner["intermediate_size"] if kind.startswith("published") else 0)
    # and a fine-tune that learns moves away from them
    moved = tmp_path / "moved"
    assert main(fine_tune(world, moved, start, "--steps", "2", "--lr", "0.01")) == 0
    c = weights(moved)
    assert any(not np.array_equal(a[k], c[k]) for k in a)


@pytest.mark.parametrize(
    "option, value, says",
    [
        ("--block-size", "5", "--block-size 5 contradicts the starting drafter's block size 3"),
        ("--taps", "1,2", "--taps 1,2 contradicts the starting drafter's tap layers 1,3"),
        ("--format", "zlab", "--format zlab contradicts the starting drafter's format native"),
        ("--kind", "eagle3", "--kind eagle3 contradicts the starting drafter's kind block"),
    ],
)
def test_a_shape_option_that_contradicts_the_start_is_one_sentence(world, tmp_path, capsys, option, value, says):
    out = tmp_path / "tuned"
    assert main(fine_tune(world, out, world["starts"]["native"], "--steps", "1", option, value)) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and err.count("\n") == 0, err
    # the same value as the start's is no contradiction
    assert (
        main(fine_tune(world, tmp_path / "same", world["starts"]["native"], "--steps", "1", "--block-size", "3")) == 0
    )


def test_a_drafter_for_another_size_of_target_is_refused_naming_what_differs(world, tmp_path, capsys):
    other = write_tiny_target_dir(tmp_path / "wide", window=16, hidden_size=96)
    foreign = tmp_path / "foreign"
    assert main(["init", "--target", str(other), "--out", str(foreign), "--block-size", "3", "--layers", "1"]) == 0
    capsys.readouterr()
    assert main(fine_tune(world, tmp_path / "tuned", foreign, "--steps", "1")) == 2
    err = capsys.readouterr().err.strip()
    assert "--from" in err and "hidden_size 96 vs 64" in err and err.count("\n") == 0, err
    assert not (tmp_path / "tuned" / "model.safetensors").exists()


def _other_weights(src: Path, dst: Path) -> Path:
    """The same architecture and tokenizer with other weights (its norms moved, what the
    target's weights fingerprint reads): a user's fine-tuned Gemma-4."""
    shutil.copytree(src, dst)
    w = dict(mx.load(str(dst / "model.safetensors")))
    for k in [k for k in w if k.endswith("norm.weight")]:
        w[k] = w[k] + 0.05
    mx.save_safetensors(str(dst / "model.safetensors"), w)
    return dst


def test_a_drafter_trained_against_other_weights_of_the_architecture_is_fine_tuned(world, tmp_path, capsys):
    tuned_target = _other_weights(world["target"], tmp_path / "tuned-target")
    before = load_target(world["target"]).weights_fingerprint
    after = load_target(tuned_target).weights_fingerprint
    assert before != after
    out = tmp_path / "tuned"
    assert main(fine_tune(world, out, world["starts"]["speculators"], "--steps", "2", target=tuned_target)) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "other weights" in line]
    assert len(notes) == 1 and before in notes[0] and after in notes[0], err
    report = json.loads((out / "train_report.json").read_text())
    assert report["from"]["target_weights"] == before and report["target_weights"] == after
    config = json.loads((out / "config.json").read_text())
    assert config["dspark"]["target_weights"] == after  # trained against these weights now
    assert load_drafter(out, load_target(tuned_target)).weights_note(load_target(tuned_target)) is None


@pytest.mark.parametrize("kind", ["speculators", "eagle3", "published-speculators", "published-assistant"])
def test_a_paused_fine_tune_resumes_exactly_without_from(world, kind, tmp_path, monkeypatch, capsys):
    from dspark.training.trainer import DrafterTrainer

    start = world["starts"][kind]
    straight = tmp_path / "straight"
    assert main(fine_tune(world, straight, start, "--steps", "6", "--lr", "0.01")) == 0
    real_step, fired = DrafterTrainer.train_step, []

    def stopped_after_three(self, batch):
        out = real_step(self, batch)
        if self.step == 3 and not fired:
            fired.append(True)
            os.kill(os.getpid(), signal.SIGTERM)  # noted, and acted on before step 4
        return out

    monkeypatch.setattr(DrafterTrainer, "train_step", stopped_after_three)
    stopped = tmp_path / "stopped"
    argv = fine_tune(world, stopped, start, "--steps", "6", "--lr", "0.01")
    assert main(argv) == 130 and fired
    monkeypatch.undo()
    status = json.loads((stopped / ".train" / "status.json").read_text())
    assert status["state"] == "paused" and status["step"] == 3
    capsys.readouterr()
    # another starting drafter on resume is refused; the same one (or none) continues
    other = world["starts"]["native" if kind != "native" else "speculators"]
    resume = [a for a in argv if a not in ("--from", str(start))] + ["--resume"]
    assert main([*resume, "--from", str(other)]) == 2
    err = capsys.readouterr().err
    assert f"was started from {start}, not --from {other}" in err and err.strip().count("\n") == 0, err
    again = ["--from", str(start)] if kind.startswith("published") else []  # the same start may be named again
    assert main([*resume, *again]) == 0
    a, b = weights(straight), weights(stopped)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    report = json.loads((stopped / "train_report.json").read_text())
    assert report["from"]["path"] == str(start) and report["steps_done"] == 6


@pytest.mark.parametrize("layout", ["zlab", "deepspec"])
def test_a_drafter_in_a_published_layout_fine_tunes_back_into_it(layout, tmp_path):
    """Checkpoints in the very file layouts z-lab and DeepSpec publish (tests/drafter_checkpoints.py):
    a fine-tune with a learning rate of 0 writes them back weight for weight, under the same names
    and config, and one that learns writes other weights there."""
    import drafter_checkpoints as ckpt

    model = ckpt.target_model()
    target = ckpt.write_target(tmp_path / "target", model)
    start = ckpt.write_zlab(tmp_path / "start") if layout == "zlab" else ckpt.write_deepspec(tmp_path / "start", model)
    rng = np.random.default_rng(0)
    data = tmp_path / "data.txt"
    data.write_text(
        "\n".join(" ".join(rng.choice(["def", "class", "return", "self", "if"], size=12)) for _ in range(40))
    )
    base = ["train", "--target", str(target), "--data", str(data), "--from", str(start), *RUN, "--steps", "2"]
    assert main([*base, "--out", str(tmp_path / "same"), "--lr", "0"]) == 0
    a, b = weights(start), weights(tmp_path / "same")
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    own = ("dspark",)
    config = [
        {k: v for k, v in json.loads((d / "config.json").read_text()).items() if k not in own}
        for d in (start, tmp_path / "same")
    ]
    assert config[0] == config[1]
    assert main([*base, "--out", str(tmp_path / "moved"), "--lr", "0.01"]) == 0
    assert any(not np.array_equal(a[k], v) for k, v in weights(tmp_path / "moved").items())


def test_what_cannot_be_trained_is_one_sentence(world, tmp_path, capsys):
    """A quantized drafter (fine-tune the one it was made from) and one with a reduced draft
    vocabulary (a d2t table, as published speculators checkpoints have) are refused before
    anything is prepared."""
    import drafter_checkpoints as ckpt

    quantized = tmp_path / "q8"
    assert main(["quantize", str(world["starts"]["speculators"]), "--bits", "8", "--out", str(quantized)]) == 0
    capsys.readouterr()
    assert main(fine_tune(world, tmp_path / "a", quantized, "--steps", "1")) == 2
    err = capsys.readouterr().err.strip()
    assert "is quantized (8-bit)" in err and err.count("\n") == 0, err
    model = ckpt.target_model()
    target = ckpt.write_target(tmp_path / "target", model)
    reduced = ckpt.write_speculators(tmp_path / "reduced", model, frequent=list(range(5, 60)))
    assert main(fine_tune(world, tmp_path / "b", reduced, "--steps", "1", target=target)) == 2
    err = capsys.readouterr().err.strip()
    assert "reduced vocabulary (a d2t table)" in err and err.count("\n") == 0, err
    assert not (tmp_path / "b" / ".train" / "train_data.safetensors").exists()

"""Pausing, stopping early and keeping the best: ``--eval-every`` keeps the weights of the best
held-out tau in ``.train/best/`` and marks its log line; SIGUSR1 ends a running ``dspark train``
at the next step and writes those weights as the drafter, as ``--resume --finish`` does for a
paused run; a paused and resumed run is one run, weights, log and best alike; and the run says
where it is in ``.train/status.json``."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from hostile_fixtures import TRAIN, train_world
from test_hostile_training import small_volume

from dspark.cli import main
from dspark.training.curves import read_log
from dspark.training.trainer import DrafterTrainer

EVAL = ["--eval-prompts", "2", "--eval-tokens", "8", "--eval-every", "2", "--lr", "0.01"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return train_world(tmp_path_factory.mktemp("train_finish"))


def argv(world, out: Path, *extra: str) -> list[str]:
    args = ["train", "--target", str(world["target"]), "--data", str(world["data"]), "--out", str(out)]
    return [*args, *[a for a in TRAIN if a not in ("--eval-prompts", "0")], *EVAL, *extra]


def weights(path: Path) -> dict:
    return {k: np.array(v) for k, v in mx.load(str(path)).items()}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


#: The signal patches of the running test, undone after it (apart from its tau patch).
SIGNALLED: list = []


@pytest.fixture(autouse=True)
def undo_signals():
    yield
    while SIGNALLED:
        SIGNALLED.pop().undo()


def signalled(at: int, signum: int) -> list:
    """The run sends itself ``signum`` right after step ``at``'s update (noted, acted on between
    steps), until :func:`stop_signalling`."""
    monkeypatch = pytest.MonkeyPatch()
    SIGNALLED.append(monkeypatch)
    real, fired = DrafterTrainer.train_step, []

    def step(self, batch):
        out = real(self, batch)
        if self.step == at and not fired:
            fired.append(True)
            os.kill(os.getpid(), signum)
        return out

    monkeypatch.setattr(DrafterTrainer, "train_step", step)
    return fired


def stop_signalling() -> None:
    while SIGNALLED:
        SIGNALLED.pop().undo()


def status(out: Path) -> dict:
    return json.loads((out / ".train" / "status.json").read_text())


def checkpoint_net(out: Path) -> dict:
    return {k[4:]: v for k, v in weights(out / ".train" / "train_state.safetensors").items() if k.startswith("net.")}


def varied_taus(mp) -> None:
    """Held-out tau as a function of the weights measured: a tiny drafter's few steps hardly move
    its real tau (1.0 at every measurement, so the first would stay the best), and what is
    tested here is which measurement is kept. The same weights give the same tau, so a resumed
    run measures what the run straight through measured."""
    from mlx.utils import tree_flatten

    from dspark.training import train as train_module

    real = train_module.heldout_figures

    def varied(target, drafter, prompts, tokens):
        figures = real(target, drafter, prompts, tokens)
        total = sum(float(mx.sum(mx.abs(v)).item()) for _, v in tree_flatten(drafter.net.parameters()))
        return {**figures, "tau": 1.0 + round((total * 1e3) % 1.0, 6)}

    mp.setattr(train_module, "heldout_figures", varied)


@pytest.fixture(autouse=True)
def taus(monkeypatch):
    varied_taus(monkeypatch)


@pytest.fixture(scope="module")
def straight(world, tmp_path_factory):
    """A run of 10 steps straight through, measured every 2."""
    out = tmp_path_factory.mktemp("straight") / "run"
    with pytest.MonkeyPatch.context() as mp:
        varied_taus(mp)
        assert main(argv(world, out, "--steps", "10")) == 0
    return out


def test_the_best_held_out_weights_are_kept_and_their_line_marked(straight):
    log = read_log(straight)
    held = [e for e in log if "heldout" in e][:-1]  # the final evaluation is the report's
    assert [e["step"] for e in held] == [2, 4, 6, 8]
    best_so_far, marked = float("-inf"), []
    for e in held:
        if e["heldout"]["tau"] > best_so_far:
            best_so_far = e["heldout"]["tau"]
            marked.append(e["step"])
    assert [e["step"] for e in held if e.get("best")] == marked
    kept = json.loads((straight / ".train" / "best" / "best.json").read_text())
    assert kept == {"step": marked[-1], "tau": best_so_far}
    steps = [e for e in log if "loss" in e]
    assert all(e["steps"] == 10 and e["steps_per_sec"] > 0 and e["tokens_per_sec"] > 0 for e in steps)
    assert all(np.isclose(e["tokens_per_sec"], e["anchors_per_sec"] * 3, rtol=1e-3) for e in steps)
    report = json.loads((straight / "train_report.json").read_text())
    assert report["kept"]["step"] == 10 and "schedule" in report["kept"]["why"]  # a run that ends keeps its last
    assert report["best"] == kept
    assert status(straight)["state"] == "finished" and status(straight)["steps"] == 10


def test_sigusr1_stops_at_the_next_step_and_writes_the_best_weights(world, straight, tmp_path, monkeypatch):
    out = tmp_path / "run"
    fired = signalled(7, signal.SIGUSR1)
    assert main(argv(world, out, "--steps", "10")) == 0 and fired
    report = json.loads((out / "train_report.json").read_text())
    kept = json.loads((out / ".train" / "best" / "best.json").read_text())
    assert report["steps_done"] == 7 and report["stopped_by"] == "finish"
    assert report["kept"]["step"] == kept["step"] <= 6 and "best held-out tau" in report["kept"]["why"]
    drafter = weights(out / "model.safetensors")
    assert same(drafter, weights(out / ".train" / "best" / "model.safetensors"))
    assert not same(drafter, checkpoint_net(out))  # the checkpoint keeps the last weights, for a --resume
    # the same steps as the run straight through, so the same best
    assert same(drafter, weights(straight / ".train" / "best" / "model.safetensors")) == (
        json.loads((straight / ".train" / "best" / "best.json").read_text())["step"] == kept["step"]
    )
    assert status(out)["state"] == "finished" and f"step {kept['step']}" in status(out)["message"]


def test_a_paused_run_finished_without_training_writes_the_best(world, tmp_path, monkeypatch, capsys):
    sigusr1 = tmp_path / "sigusr1"
    fired = signalled(7, signal.SIGUSR1)
    assert main(argv(world, sigusr1, "--steps", "10")) == 0 and fired
    stop_signalling()
    out = tmp_path / "paused"
    fired = signalled(7, signal.SIGTERM)
    assert main(argv(world, out, "--steps", "10", "--checkpoint-minutes", "0")) == 130 and fired
    stop_signalling()
    assert status(out)["state"] == "paused" and status(out)["step"] == 7
    capsys.readouterr()
    assert main(["train", "--target", str(world["target"]), "--out", str(out), "--finish"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--finish ends a paused run: give it with --resume" in err and err.count("\n") == 0
    assert main(["train", "--target", str(world["target"]), "--out", str(out), "--resume", "--finish"]) == 0
    report = json.loads((out / "train_report.json").read_text())
    assert report["steps_done"] == 7 and report["stopped_by"] == "finish"
    assert same(weights(out / "model.safetensors"), weights(sigusr1 / "model.safetensors"))
    assert [e for e in read_log(out) if "loss" in e] and max(e["step"] for e in read_log(out)) == 7
    empty = tmp_path / "empty"
    empty.mkdir()
    capsys.readouterr()
    assert main(["train", "--target", str(world["target"]), "--out", str(empty), "--resume", "--finish"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds no paused run to finish" in err and err.count("\n") == 0


def test_pause_and_resume_with_eval_every_is_one_run(world, straight, tmp_path, monkeypatch):
    """Bit for bit: the weights, the best kept and its record, and the log's losses and
    held-out figures (the seconds differ, as clocks do)."""
    out = tmp_path / "run"
    fired = signalled(5, signal.SIGTERM)
    assert main(argv(world, out, "--steps", "10", "--checkpoint-minutes", "0")) == 130 and fired
    stop_signalling()
    assert main(argv(world, out, "--steps", "10", "--resume")) == 0
    assert same(weights(out / "model.safetensors"), weights(straight / "model.safetensors"))
    assert same(
        weights(out / ".train" / "best" / "model.safetensors"),
        weights(straight / ".train" / "best" / "model.safetensors"),
    )
    best = out / ".train" / "best" / "best.json"
    assert best.read_text() == (straight / ".train" / "best" / "best.json").read_text()

    def figures(run):
        drop = ("seconds", "eval_seconds", "anchors_per_sec", "steps_per_sec", "tokens_per_sec")
        return [{k: v for k, v in e.items() if k not in drop} for e in read_log(run)]

    assert figures(out) == figures(straight)


def test_a_disk_that_fills_during_a_checkpoint_leaves_the_last_good_one_to_resume(world, straight, tmp_path):
    """A real full disk (a small volume of its own): the checkpoint that no longer fits is one
    sentence and the run's status says so; the one before it stays whole, and once there is room
    again ``--resume`` from it ends with the weights of the run straight through."""
    import shutil
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "dspark.cli", *argv(world, tmp_path / "sized", "--steps", "3")]
    sized = tmp_path / "sized"
    assert subprocess.run(cmd, capture_output=True, timeout=300).returncode == 0
    state = (sized / ".train" / "train_state.safetensors").stat().st_size
    best = sum(f.stat().st_size for f in (sized / ".train" / "best").rglob("*") if f.is_file())
    whole = sum(f.stat().st_size for f in sized.rglob("*") if f.is_file())
    # room for the first checkpoint and what comes with it, not for a second state file beside it
    room = whole + best + state // 2
    with small_volume(tmp_path / "small", room, capacity=room + (64 << 20)) as mount:
        out = mount / "run"
        r = subprocess.run(
            [sys.executable, "-m", "dspark.cli", *argv(world, out, "--steps", "10", "--checkpoint-minutes", "0")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        errors = [line for line in r.stderr.splitlines() if "error" in line.lower() or "Traceback" in line]
        assert r.returncode == 2 and len(errors) == 1 and "the disk is full" in errors[0], r.stderr[-2000:]
        entry = status(out)
        assert entry["state"] == "failed" and "the disk is full" in entry["message"]
        kept = json.loads(mx.load(str(out / ".train" / "train_state.safetensors"), return_metadata=True)[1]["meta"])[
            "step"
        ]
        assert 1 <= kept < 10
        (mount / "filler").unlink()  # room again: the 64 MB that filled the volume
        r = subprocess.run(
            [sys.executable, "-m", "dspark.cli", *argv(world, out, "--steps", "10", "--resume")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0 and f"resumed at step {kept}" in r.stderr, r.stderr[-2000:]
        assert same(weights(out / "model.safetensors"), weights(straight / "model.safetensors"))
        shutil.rmtree(out)


def test_sigusr1_while_the_data_is_prepared_finishes_when_the_loop_starts(world, tmp_path, monkeypatch):
    """Not the signal's default (the process ending, the run lost mid-preparation): noted, and
    the run finishes before its first step, its drafter evaluated and reported."""
    from dspark.training import train as train_module

    real = train_module.build_training_data

    def prepared_then_signalled(*args, **kwargs):
        out = real(*args, **kwargs)
        assert signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL, "SIGUSR1 would end the process here"
        os.kill(os.getpid(), signal.SIGUSR1)
        return out

    monkeypatch.setattr(train_module, "build_training_data", prepared_then_signalled)
    out = tmp_path / "run"
    assert main(argv(world, out, "--steps", "10")) == 0
    report = json.loads((out / "train_report.json").read_text())
    assert report["steps_done"] == 0 and report["stopped_by"] == "finish" and report["kept"]["step"] == 0
    assert status(out)["state"] == "finished"


@pytest.mark.parametrize("kind", ["eagle3", "assistant"])
def test_an_autoregressive_head_finishes_with_its_best_weights_too(world, kind, tmp_path, monkeypatch):
    out = tmp_path / "run"
    shape = ["--kind", kind, "--block-size", "3", "--layers", "1", *(["--taps", "1,3"] if kind == "eagle3" else [])]
    base = ["train", "--target", str(world["target"]), "--data", str(world["data"]), "--out", str(out), *shape]
    fired = signalled(5, signal.SIGUSR1)
    assert (
        main(
            [*base, "--batch", "8", "--seq-len", "32", "--prompt-len", "8", "--self-distill", *EVAL]
            + ["--no-progress", "--no-compile", "--steps", "10"]
        )
        == 0
        and fired
    )
    report = json.loads((out / "train_report.json").read_text())
    kept = json.loads((out / ".train" / "best" / "best.json").read_text())
    assert report["steps_done"] == 5 and report["kept"]["step"] == kept["step"] in (2, 4)
    assert same(weights(out / "model.safetensors"), weights(out / ".train" / "best" / "model.safetensors"))


def test_a_best_kept_past_the_last_checkpoint_by_a_killed_run_does_not_change_the_resumed_one(
    world, straight, tmp_path, monkeypatch
):
    """kill -9 after the run kept a best beyond its last checkpoint (here: the best and the log
    lines of the run straight through, past step 1, put in a run paused at 1): the resumed run
    takes those steps again, marks the same lines best and keeps the same weights."""
    import shutil

    from dspark.training.curves import LOG_FILE

    out = tmp_path / "run"
    fired = signalled(1, signal.SIGTERM)
    assert main(argv(world, out, "--steps", "10", "--checkpoint-minutes", "0")) == 130 and fired
    stop_signalling()
    shutil.rmtree(out / ".train" / "best", ignore_errors=True)
    shutil.copytree(straight / ".train" / "best", out / ".train" / "best")
    later = [line for line in (straight / LOG_FILE).read_text().splitlines() if json.loads(line)["step"] > 1]
    with (out / LOG_FILE).open("a") as f:
        f.write("\n".join(later[:-1]) + "\n")
    assert main(argv(world, out, "--steps", "10", "--resume")) == 0
    assert same(
        weights(out / ".train" / "best" / "model.safetensors"),
        weights(straight / ".train" / "best" / "model.safetensors"),
    )

    def marked(run):
        return [(e["step"], e["heldout"]["tau"]) for e in read_log(run) if e.get("best")]

    assert len([m for m in marked(straight) if m[0] > 1]) >= 2  # a best replaced by a later one: what matters
    assert marked(out) == marked(straight)


def test_the_status_names_the_last_checkpoint_while_training(world, tmp_path, monkeypatch):
    """What a run killed now leaves to --resume: the status a reader finds mid-run."""
    seen = []
    real = DrafterTrainer.train_step

    def step(self, batch):
        out = real(self, batch)
        if self.step == 4:
            seen.append(status(tmp_path / "run"))
        return out

    monkeypatch.setattr(DrafterTrainer, "train_step", step)
    assert main(argv(world, tmp_path / "run", "--steps", "6", "--checkpoint-minutes", "0")) == 0
    assert seen[0]["state"] == "training" and seen[0]["step"] == 3 and seen[0]["pid"] == os.getpid()
    assert seen[0]["message"] == "the last checkpoint is of step 3" and seen[0]["steps"] == 6

"""Training faults and bad training inputs, as a hostile user or a damaged disk would bring them:
each is one line on stderr and exit status 2 (130 for a stop), within seconds; interrupted
training resumes exactly and loses nothing; a checkpoint or training data file is checked
before any of it is used; a run's shapes are checked before anything is allocated."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import limits
import mlx.core as mx
import numpy as np
import pytest
from hostile_fixtures import TRAIN, good_pair

from dspark.cli import main


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return good_pair(tmp_path_factory.mktemp("hostile_training"))


# ----------------------------------------------------------------------------- training faults


@pytest.fixture(scope="module")
def data_file(dirs):
    rng = np.random.default_rng(0)
    words = "def class return self if else for in while import from as with print value name".split()
    path = dirs["root"] / "data.txt"
    path.write_text("\n".join(" ".join(rng.choice(words, size=12)) for _ in range(40)))
    return path


def train_cmd(dirs, data_file, out: Path, *extra) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dspark.cli",
        "train",
        "--target",
        str(dirs["target"]),
        "--data",
        str(data_file),
        "--out",
        str(out),
        *TRAIN,
        *extra,
    ]


def params(path: Path) -> dict:
    return {k: np.array(v) for k, v in mx.load(str(path / "model.safetensors")).items()}


def test_resume_refuses_other_shapes_and_a_damaged_checkpoint(dirs, data_file, tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "train",
        "--target",
        str(dirs["target"]),
        "--data",
        str(data_file),
        "--out",
        str(out),
        *TRAIN,
        "--steps",
        "3",
    ]
    assert main(argv) == 0
    capsys.readouterr()
    assert main([*argv, "--resume", "--markov-rank", "16"]) == 2
    assert "was trained with markov_rank 8, not 16" in capsys.readouterr().err
    assert main([*argv, "--resume", "--lr", "0.1"]) == 2
    assert "was trained with lr" in capsys.readouterr().err
    state = out / ".train" / "train_state.safetensors"
    state.write_bytes(state.read_bytes()[:200])
    assert main([*argv, "--resume", "--steps", "4"]) == 2
    assert "train_state.safetensors is not a readable safetensors file" in capsys.readouterr().err


def test_sigterm_saves_a_checkpoint_and_resume_is_exact(dirs, data_file, tmp_path):
    """A run stopped by SIGTERM and resumed ends with the same weights as one run straight
    through: every checkpoint holds the random state that draws the next batch."""
    straight = tmp_path / "straight"
    # long enough that the signal, sent when the first checkpoint appears, always lands mid-loop
    r = subprocess.run(
        train_cmd(dirs, data_file, straight, "--steps", "160"), capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-2000:]
    stopped = tmp_path / "stopped"
    p = subprocess.Popen(
        train_cmd(dirs, data_file, stopped, "--steps", "160", "--checkpoint-minutes", "0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    while not (stopped / ".train" / "train_state.safetensors").exists() and time.time() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert "checkpoint saved at step" in err, err[-2000:]
    r = subprocess.run(
        train_cmd(dirs, data_file, stopped, "--steps", "160", "--resume"), capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0 and "resumed at step" in r.stderr, r.stderr[-2000:]
    a, b = params(straight), params(stopped)
    assert all(np.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_a_signal_landing_inside_a_step_still_resumes_exactly(dirs, data_file, tmp_path, monkeypatch, capsys):
    """SIGTERM delivered right after a step's update, before its bookkeeping (the clean-clone CI
    met this window once: the checkpoint held step k+1's weights as step k, and the resumed
    run ended elsewhere). The signal is noted and acted on between steps."""
    import os

    from dspark.training.trainer import DrafterTrainer

    argv = ["train", "--target", str(dirs["target"]), "--data", str(data_file), *TRAIN, "--steps", "12"]
    assert main([*argv, "--out", str(tmp_path / "straight")]) == 0
    real_build, fired = DrafterTrainer._build_update, []

    def build_update_that_signals(self):
        update = real_build(self)

        def signalling(*batch):
            out = update(*batch)
            if self.step == 3 and not fired:
                fired.append(True)
                os.kill(os.getpid(), signal.SIGTERM)
            return out

        return signalling

    monkeypatch.setattr(DrafterTrainer, "_build_update", build_update_that_signals)
    stopped = tmp_path / "stopped"
    assert main([*argv, "--out", str(stopped), "--checkpoint-minutes", "0"]) == 130 and fired
    assert "checkpoint saved at step 4" in capsys.readouterr().err
    monkeypatch.undo()
    assert main([*argv, "--out", str(stopped), "--resume"]) == 0
    a, b = params(tmp_path / "straight"), params(stopped)
    assert all(np.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_kill_9_during_checkpoint_writes_never_leaves_a_broken_one(dirs, data_file, tmp_path):
    out = tmp_path / "killed"
    rng = np.random.default_rng(1)
    for attempt in range(4):
        p = subprocess.Popen(
            train_cmd(
                dirs, data_file, out, "--steps", "200", "--checkpoint-minutes", "0", *(["--resume"] if attempt else [])
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 300
        while not (out / ".train" / "train_state.safetensors").exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(float(rng.uniform(0.2, 1.5)))
        p.kill()
        p.wait()
        assert main(["inspect", str(out)]) == 0  # the drafter files are whole
        state = mx.load(str(out / ".train" / "train_state.safetensors"))  # and the checkpoint loads
        assert any(k.startswith("opt.") for k in state)
    r = subprocess.run(
        train_cmd(dirs, data_file, out, "--steps", "200", "--resume", "--time-budget-minutes", "0.05"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert not list(out.glob(".*.tmp*"))  # what the killed runs were writing was cleaned up


def test_what_a_killed_write_leaves_is_not_read_as_part_of_the_checkpoint(dirs, tmp_path, capsys):
    """A kill -9 mid-write leaves a hidden ``.<name>.<pid>.tmp.safetensors`` beside the files
    (cleaned up by the next training run, not by inspect or generate): it is not a weight
    file. The kill test above met one, truncated, and inspect refused the whole directory."""
    import shutil

    d = tmp_path / "drafter"
    shutil.copytree(dirs["drafter"], d)
    (d / ".model.safetensors.4242.tmp.safetensors").write_bytes(b"\x10")  # cut after one byte
    (d / ".train_state.safetensors.4243.tmp.safetensors").write_bytes(b"")
    assert main(["inspect", str(d)]) == 0
    assert (
        main(
            [
                "generate",
                "--target",
                str(dirs["target"]),
                "--drafter",
                str(d),
                "--prompt",
                "t3 t5 t7",
                "--max-tokens",
                "8",
            ]
        )
        == 0
    )
    capsys.readouterr()


#: What the full disk below has left: less than a --steps 2 run writes (its drafter alone is ~0.2 MB).
FULL_DISK_FREE = 200 << 10


@contextlib.contextmanager
def small_volume(mount: Path, free: int, capacity: int = 1 << 20):
    """A file system of its own at ``mount`` with ``free`` bytes left, for a real full disk: a
    tmpfs of ``capacity`` bytes on Linux (mounting needs root), an HFS+ disk image 1 MB larger on
    macOS (hdiutil attaches one for any user). Each is filled to ``free`` by one file, so that
    Linux runs the filling the Mac's larger, formatted volume depends on. Skips where the volume
    cannot be made."""
    mount.mkdir()
    if sys.platform == "darwin":
        image = mount.with_name(mount.name + ".dmg")
        megabytes = -(-capacity // (1 << 20)) + 1
        steps = [
            ["hdiutil", "create", "-size", f"{megabytes}m", "-fs", "HFS+", "-volname", "dspark-full", str(image)],
            ["hdiutil", "attach", "-nobrowse", "-mountpoint", str(mount), str(image)],
        ]
        detach = ["hdiutil", "detach", "-force", str(mount)]
    elif sys.platform.startswith("linux"):
        steps = [["mount", "-t", "tmpfs", "-o", f"size={capacity}", "tmpfs", str(mount)]]
        detach = ["umount", str(mount)]
    else:
        pytest.skip(
            f"no way to make a small volume on {sys.platform} here; the full disk is simulated in "
            "test_hostile_outputs.py"
        )
    for step in steps:
        r = subprocess.run(step, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            pytest.skip(
                f"cannot make a small volume here ({step[0]}: {r.stderr.strip() or 'not root'}): "
                "the full disk is simulated in test_hostile_outputs.py"
            )
    try:
        room = shutil.disk_usage(mount).free - free
        if room > 0:
            (mount / "filler").write_bytes(bytes(room))
        left = shutil.disk_usage(mount).free
        assert abs(left - free) <= 64 << 10, f"{mount} was filled to {left:,} bytes free, not {free:,}"
        yield mount
    finally:
        subprocess.run(detach, capture_output=True, timeout=120)


def test_a_full_disk_is_one_sentence_and_leaves_no_partial_file(dirs, data_file, tmp_path):
    with small_volume(tmp_path / "small", FULL_DISK_FREE) as mount:
        r = subprocess.run(
            train_cmd(dirs, data_file, mount / "out", "--steps", "2"), capture_output=True, text=True, timeout=300
        )
        errors = [line for line in r.stderr.splitlines() if "error" in line.lower() or "Traceback" in line]
        assert r.returncode == 2 and len(errors) == 1 and "the disk is full" in errors[0], r.stderr[-2000:]
        assert not [p for p in mount.rglob("*") if ".tmp" in p.name]  # no half-written file is left


# ----------------------------------------------------------------------------- issue #26
@pytest.fixture(scope="module")
def trained(dirs, data_file, tmp_path_factory):
    """A 3-step run whose checkpoint and data the tests below damage, each in a copy."""
    out = tmp_path_factory.mktemp("trained") / "run"
    argv = [
        "train",
        "--target",
        str(dirs["target"]),
        "--data",
        str(data_file),
        "--out",
        str(out),
        *TRAIN,
        "--steps",
        "3",
    ]
    assert main(argv) == 0
    return out, argv


def _damaged(trained, tmp_path, name: str, change) -> list[str]:
    import shutil

    src, argv = trained
    out = tmp_path / name
    shutil.copytree(src, out)
    change(out)
    return [*(a if a != str(src) else str(out) for a in argv), "--resume", "--steps", "6"]


def _meta(change):
    from dspark.training.trainer import STATE_FILE

    def apply(out: Path):
        arrays, metadata = mx.load(str(out / STATE_FILE), return_metadata=True)
        meta = json.loads(metadata["meta"])
        text = change(meta, arrays)
        mx.save_safetensors(
            str(out / STATE_FILE), arrays, {"meta": text if isinstance(text, str) else json.dumps(meta)}
        )

    return apply


def _data(change):
    from dspark.training.resume import DATA_FILE

    def apply(out: Path):
        arrays, metadata = mx.load(str(out / DATA_FILE), return_metadata=True)
        change(arrays, metadata)
        mx.save_safetensors(str(out / DATA_FILE), arrays, metadata)

    return apply


RESUMES = [
    # the audit's example: step -5 resumed and reported "trained 75 steps" for --steps 70
    ("a negative step", _meta(lambda m, a: m.__setitem__("step", -5)), "step is -5, expected a number of steps"),
    ("a step written as text", _meta(lambda m, a: m.__setitem__("step", "3")), "step is 3, expected a number of steps"),
    ("a step of 10^12", _meta(lambda m, a: m.__setitem__("step", 10**12)), "expected a number of steps"),
    (
        "a step the optimizer did not take",
        _meta(lambda m, a: m.__setitem__("step", 2)),
        "the optimizer has taken 3 steps but the checkpoint says 2",
    ),
    ("a metadata nested 10^5 deep", _meta(lambda m, a: "[" * 100_000 + "]" * 100_000), "nested deeper than 64"),
    (
        "a NaN moment",
        _meta(
            lambda m, a: a.__setitem__(
                next(k for k in a if k.endswith(".v")), a[next(k for k in a if k.endswith(".v"))] * float("nan")
            )
        ),
        "holds NaN or infinite values",
    ),
    (
        "a token id past the vocabulary in the saved data",
        _data(lambda a, m: a.__setitem__("tokens", a["tokens"] + 1000)),
        "a token id is outside the target's vocabulary",
    ),
    (
        "a sequence length past its row",
        _data(lambda a, m: a.__setitem__("lengths", a["lengths"] * 0 + 10_000)),
        "length is outside",
    ),
    (
        "held-out prompts that are not token ids",
        _data(lambda a, m: m.__setitem__("heldout", '[["a"]]')),
        "held-out prompts are not lists of token ids",
    ),
    (
        "training data in another dtype",
        _data(lambda a, m: a.__setitem__("tokens", a["tokens"].astype(mx.float32))),
        "is not training data written by dspark train",
    ),
]


@pytest.mark.parametrize("name, change, says", RESUMES, ids=[r[0] for r in RESUMES])
def test_a_damaged_checkpoint_or_training_data_is_refused_before_use(trained, tmp_path, capsys, name, change, says):
    argv = _damaged(trained, tmp_path, "damaged", change)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err


def test_shapes_past_the_target_or_the_machine_are_one_sentence(dirs, data_file, tmp_path, capsys):
    """The audit's crash: --seq-len 1000000 (a legal option value) ended in SIGSEGV in the feature
    cache; with a huge batch too. Each is now refused before anything large is allocated, in a
    child process held to 8 GB of address space as the audit ran it (Linux; macOS refuses that
    limit, see limits.py) and, on every platform, killed past 2 GB resident (it holds
    ~0.1 GB on Linux's CPU)."""
    base = [
        "train",
        "--target",
        str(dirs["target"]),
        "--data",
        str(data_file),
        "--out",
        str(tmp_path / "o"),
        *TRAIN,
        "--steps",
        "2",
    ]  # the options below come later: argparse keeps the last
    for extra, says in (
        (["--seq-len", "1000000"], "--seq-len 1,000,000 is longer than the 4,096 positions"),
        (["--seq-len", "4096", "--batch", "65536", "--anchors-per-seq", "1"], "lower them"),
        (["--seq-len", "4096", "--batch", "65536", "--anchors-per-seq", "65536"], "lower them"),
    ):
        start = time.time()
        r = limits.run(
            [sys.executable, "-m", "dspark.cli", *base, *extra], address_space=8 << 30, resident=2 << 30, timeout=300
        )
        assert r.returncode == 2 and says in r.stderr and r.stderr.count("\n") == 1, (
            extra,
            r.returncode,
            r.stderr[-2000:],
        )
        assert time.time() - start < 60, extra


def test_training_data_that_is_not_a_regular_file_is_refused(dirs, tmp_path, capsys):
    import os

    (tmp_path / "fifo.txt").unlink(missing_ok=True)
    os.mkfifo(tmp_path / "fifo.txt")
    (tmp_path / "zero.txt").symlink_to("/dev/zero")
    (tmp_path / "nested.jsonl").write_text('{"text": "ok"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    for data, says in (
        ("fifo.txt", "is not a regular file but a FIFO"),
        ("zero.txt", "is not a regular file but a character device"),
        ("nested.jsonl", "line 2 is nested deeper than 64 levels"),
    ):
        capsys.readouterr()
        assert (
            main(
                [
                    "train",
                    "--target",
                    str(dirs["target"]),
                    "--data",
                    str(tmp_path / data),
                    "--out",
                    str(tmp_path / "o"),
                    *TRAIN,
                    "--steps",
                    "2",
                ]
            )
            == 2
        )
        err = capsys.readouterr().err.strip()
        assert says in err and len(err.splitlines()) == 1, err

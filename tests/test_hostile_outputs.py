"""Nothing lost (issue #26): an output is written whole or not at all, nothing is deleted before
every input has been checked, and a full disk keeps what was measured and says where, in one
sentence. The full disk is a file-size limit on a child process (no mount needed; the write
fails as on a full disk) or an error raised at the write."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import drafter_checkpoints as ckpt
import limits
import pytest
from hostile_fixtures import good_pair

from dspark.bench import report
from dspark.cli import main

ROOT = Path(__file__).resolve().parent.parent


pytestmark = pytest.mark.usefixtures("costs_measured_once")  # benchmarks need costs; test_costs tests measuring


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    out = good_pair(tmp_path_factory.mktemp("outputs"), "--no-confidence")
    out["prompts"] = out["root"] / "prompts.json"
    out["prompts"].write_text(json.dumps(["def add(a, b):", "x = 1"]))
    out["zlab"] = ckpt.write_zlab(out["root"] / "zlab")
    return out


def bench(dirs, out, target=None, drafter=None, *extra) -> int:
    return main(
        [
            "bench",
            "--target",
            str(target or dirs["target"]),
            "--drafter",
            str(drafter or dirs["drafter"]),
            "--prompts",
            str(dirs["prompts"]),
            "--max-tokens",
            "8",
            "--repeats",
            "1",
            "--policy",
            "fixed",
            "--out",
            str(out),
            "--no-progress",
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def earlier(dirs, tmp_path_factory, costs_measured_once):
    """A benchmark folder holding results, copied fresh for each test that may lose them."""
    out = tmp_path_factory.mktemp("earlier") / "results"
    assert bench(dirs, out) == 0
    return {f: (out / f).read_bytes() for f in ("trials.jsonl", "trials.csv", "summary.json")}


def _folder_with(earlier, path: Path) -> Path:
    path.mkdir()
    for name, data in earlier.items():
        (path / name).write_bytes(data)
    return path


@pytest.mark.parametrize(
    "what",
    [
        "a mistyped --target",
        "a drafter that is not one",
        "a prompt file that is a FIFO",
        "a prompt the target cannot hold",
    ],
)
def test_bench_force_with_a_bad_input_deletes_nothing(dirs, earlier, tmp_path, capsys, what):
    """The audit's case: `dspark bench --out DIR --force` with a mistyped --target exited 2 having
    already deleted DIR's trials and summary."""
    out = _folder_with(earlier, tmp_path / "results")
    target, drafter, extra = None, None, []
    if what == "a mistyped --target":
        target = dirs["root"] / "targett"
    elif what == "a drafter that is not one":
        drafter = dirs["target"]
    elif what == "a prompt file that is a FIFO":
        os.mkfifo(tmp_path / "fifo.json")
        extra = ["--prompts", str(tmp_path / "fifo.json")]
    else:
        (tmp_path / "long.json").write_text(json.dumps(["x = 1 " * 3000]))
        extra = ["--prompts", str(tmp_path / "long.json")]
    capsys.readouterr()
    assert bench(dirs, out, target, drafter, "--force", *extra) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert {f: (out / f).read_bytes() for f in earlier} == earlier


def test_a_full_disk_during_bench_keeps_the_trials_and_says_where(dirs, tmp_path, capsys, monkeypatch):
    """The audit's case: a full disk during bench threw away every trial it had run. The run stops
    at the failed write, no half line is left, and the summary and every trial measured are kept
    under the temporary directory, the one sentence naming it."""
    real = report.TrialLog._append
    calls = {"n": 0}

    def fills_up(path, text):
        calls["n"] += 1
        if calls["n"] > 4:  # the CSV header and two trials (two lines each) went in
            with path.open("a") as f:
                f.write(text[: len(text) // 2])  # half a line reaches the disk before it is full
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, text)

    monkeypatch.setattr(report.TrialLog, "_append", staticmethod(fills_up))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "spare"))
    (tmp_path / "spare").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    out = tmp_path / "results"
    capsys.readouterr()
    assert bench(dirs, out) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "the disk is full" in err and "kept in" in err, err
    spare = Path(err.split("kept in ")[1])
    assert spare.parent == tmp_path / "spare"
    kept = report.read_trials(spare)
    assert kept and json.loads((spare / "summary.json").read_text())["arms"]
    assert [t["arm"] for t in report.read_trials(out)] == [t["arm"] for t in kept[: len(report.read_trials(out))]]
    assert (out / "trials.jsonl").read_text().endswith("\n")  # the half line was cut back


def _quantize(src: Path, out: Path, limit_bytes: int | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dspark.cli", "quantize", str(src), "--bits", "8", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limits.preexec(file_size=limit_bytes),
    )


def _visible(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


@pytest.mark.parametrize("fmt", ["drafter", "zlab"])
def test_quantize_onto_a_full_disk_leaves_nothing_half_written(dirs, tmp_path, fmt):
    """The audit's case: quantize of a z-lab checkpoint onto a full disk left a truncated,
    non-hidden weights file and no config. Now the output folder appears whole or not at all."""
    out = tmp_path / "q8"
    p = _quantize(dirs[fmt], out, limit_bytes=20_000)  # smaller than the weights
    _, err = p.communicate(timeout=300)
    assert p.returncode == 2 and err.count("\n") == 1 and "could not write" in err, err
    assert not out.exists() and _visible(tmp_path) == []
    p = _quantize(dirs[fmt], out)
    assert p.communicate(timeout=300) and p.returncode == 0
    assert _visible(out) == ["config.json", "model.safetensors"] and main(["inspect", str(out)]) == 0


def test_quantize_killed_as_its_first_file_appears_is_rerun_cleanly(dirs, tmp_path):
    """The audit's case: killed the moment its first file appeared, quantize could leave weights
    without a config, and a rerun into that folder was refused."""
    out = tmp_path / "q8"
    p = _quantize(dirs["drafter"], out)
    deadline = time.time() + 120
    while time.time() < deadline and not any(tmp_path.glob(".q8.*.tmp/*")):
        time.sleep(0.002)
    p.kill()
    p.wait()
    assert not out.exists() or _visible(out) == ["config.json", "model.safetensors"]
    if out.exists():  # the kill came after the rename: the folder is whole
        return
    p = _quantize(dirs["drafter"], out)
    assert p.communicate(timeout=300) and p.returncode == 0
    assert _visible(out) == ["config.json", "model.safetensors"] and not list(tmp_path.glob(".q8.*"))

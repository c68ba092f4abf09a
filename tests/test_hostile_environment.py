"""Issue #43's third audit, the edges and the environment: a temperature too small to compute, prompt
sets that hold no prompt texts, options that mean nothing (a diagnosis of 0 drafts, 0 tokens, a
timeout of NaN), and the process's surroundings (standard output on a full disk or closed by its
reader, ``TMPDIR``, ``HOME`` and ``DSPARK_STUDIO_HOME``, ``DSPARK_DEVICE``, a prompt of one
line of megabytes in a replay, a training rank frozen under ``mlx.launch``). Each is one line
(exit status 2), a quiet end, or a bounded wait, never a traceback, a hang or figures from
nonsense; each case is run as a user runs it where the process itself is what it is about."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_fixtures import good_pair

from dspark.cli import main
from dspark.errors import DsparkError

ROOT = Path(__file__).resolve().parent.parent
TOO_SMALL = "temperature must be 0 or at least 0.001"


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return good_pair(tmp_path_factory.mktemp("environment"))


def said(capsys) -> str:
    """The one line a refused command printed (asserted one line, no traceback)."""
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    """``dspark ARGS`` as a separate process, as the shell runs it."""
    return subprocess.run([sys.executable, "-m", "dspark.cli", *args], text=True, timeout=120, **kw)


def studio_env(tmp_path: Path, **extra: str) -> dict:
    e = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "DSPARK_STUDIO_HOME": str(tmp_path / "home"), **extra}
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")])
    return e


def studio(tmp_path: Path, *args: str, env: dict | None = None, timeout: float = 120):
    start = time.time()
    r = subprocess.run(
        [sys.executable, "-m", "dspark_studio", "--screenshot", str(tmp_path / "shot.png"), *args],
        env=env or studio_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return r, time.time() - start


# ----------------------------------------------------------------------------- a temperature of 1e-40
@pytest.mark.parametrize("temperature", ["1e-40", "1e-320", "1e-05"])
def test_a_temperature_too_small_to_compute_is_refused_by_every_command(dirs, tmp_path, capsys, temperature):
    """The audit's case: 1e-40 passed the range check, the sampler divided by it (a subnormal in
    float32; 1e-320 is 0 there) and generate, diagnose and bench reported <pad> streams, tau 1.00
    and the advice to lower the temperature."""
    t, d = str(dirs["target"]), str(dirs["drafter"])
    for argv in (
        ["generate", "--target", t, "--drafter", d, "--prompt", "x = 1", "--max-tokens", "8"],
        ["diagnose", "--target", t, "--drafter", d, "--max-tokens", "8", "--limit", "1"],
        ["bench", "--target", t, "--drafter", d, "--out", str(tmp_path / "bench"), "--max-tokens", "8"],
    ):
        capsys.readouterr()
        assert main([*argv, "--temperature", temperature]) == 2, argv
        assert TOO_SMALL in said(capsys), argv
    assert not (tmp_path / "bench").exists()  # refused before --out is made


def test_the_smallest_temperature_allowed_samples_tokens(dirs, capsys):
    capsys.readouterr()
    argv = ["generate", "--target", str(dirs["target"]), "--drafter", str(dirs["drafter"]), "--prompt", "x = 1"]
    assert main([*argv, "--max-tokens", "8", "--temperature", "0.001", "--json", "--ignore-eos"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["tokens"]) == 8 and "<pad>" not in out["text"], out  # 1e-40 made seven <pad> of eight


def test_the_app_settings_keep_no_temperature_too_small(monkeypatch):
    """A settings file (or the app's form) holding 1e-40: the field keeps its default and is said."""
    from dspark.config import GenerationConfig
    from dspark.options import check_options, coerce

    with pytest.raises(DsparkError, match=TOO_SMALL):
        check_options(GenerationConfig(temperature=1e-40))
    bad = []
    config = coerce(GenerationConfig, {"temperature": "1e-40", "top_k": "5"}, lambda name, v: bad.append(name))
    assert config.temperature == 0.0 and config.top_k == 5 and bad == ["temperature"]


# ----------------------------------------------------------------------------- prompt sets
BAD_SETS = [
    ("a JSON list holding null", "set.json", '["x = 1", null]', "prompt 1 is null, not a text"),
    ("a JSON list of objects", "set.json", '[{"a": 2}]', 'prompt 0 is {"a": 2}, not a text'),
    ("an object whose prompts hold a number", "set.json", '{"prompts": ["a", "b", 3]}', "prompt 2 is 3, not a text"),
    ("a .txt of separator lines only", "set.txt", "---\n---\n---\n", "holds no prompts"),
    ("a .txt of separators with CRLF", "set.txt", "---\r\n---\r\n\r\n", "holds no prompts"),
]


@pytest.mark.parametrize("name, file, text, says", BAD_SETS, ids=[b[0] for b in BAD_SETS])
def test_a_prompt_set_without_prompt_texts_is_refused(dirs, tmp_path, capsys, name, file, text, says):
    """The audit's cases: a JSON list of non-strings ran ``str()`` of each ('None', "{'a': 2}") and
    a .txt of only --- lines ran the dashes as prompts."""
    from dspark.prompts import read_set

    path = tmp_path / file
    path.write_text(text, newline="")
    with pytest.raises(DsparkError, match="holds no prompts|not a text") as e:
        read_set(path)
    assert says in str(e.value)
    t, d = str(dirs["target"]), str(dirs["drafter"])
    for argv in (
        ["diagnose", "--target", t, "--drafter", d, "--prompts", str(path)],
        ["bench", "--target", t, "--drafter", d, "--prompts", str(path), "--out", str(tmp_path / "b")],
    ):
        capsys.readouterr()
        assert main(argv) == 2, argv
        assert says in said(capsys), argv


def test_separator_lines_separate_wherever_they_are(tmp_path):
    from dspark.prompts import read_set

    path = tmp_path / "set.txt"
    path.write_text("---\nx = 1\n---\n---\ndef f():\n    return 2\n---\n")
    assert read_set(path).prompts == ("x = 1\n", "def f():\n    return 2\n")
    path.write_text("a\n---\nb")  # the documented form reads as it always did
    assert read_set(path).prompts == ("a\n", "b\n")


# ----------------------------------------------------------------------------- options that mean nothing
def test_a_diagnosis_of_no_drafts_is_refused(dirs, capsys):
    """The audit's case: diagnose --block-size 0 decoded plainly and reported tau 0.00 and no finding."""
    from dspark.config import GenerationConfig
    from dspark.diagnose import diagnose
    from dspark.loading import load_drafter, load_target

    capsys.readouterr()
    argv = ["diagnose", "--target", str(dirs["target"]), "--drafter", str(dirs["drafter"]), "--block-size", "0"]
    assert main(argv) == 2
    assert "block-size 0 drafts nothing, so there is nothing to diagnose" in said(capsys)
    target = load_target(dirs["target"])  # Run ▸ Diagnose in the app calls the library
    drafter = load_drafter(dirs["drafter"], target)
    with pytest.raises(DsparkError, match="drafts nothing"):
        diagnose(target, drafter, ["x = 1"], GenerationConfig(max_tokens=8, block_size=0))


APP_REFUSALS = [
    (["--max-tokens", "0"], "--max-tokens must be between 1 and 1e+06, not 0"),
    (["--temperature", "1e-40"], "--" + TOO_SMALL),
    (["--timeout", "nan"], "--timeout must be a number of seconds above 0"),
    (["--timeout", "inf"], "--timeout must be a number of seconds above 0"),
    (["--timeout", "1e308"], "--timeout must be a number of seconds above 0 and at most 2,000,000, not 1e+308"),
    (["--timeout", "0"], "--timeout must be a number of seconds above 0"),
]


@pytest.mark.parametrize("args, says", APP_REFUSALS, ids=[" ".join(a[0]) for a in APP_REFUSALS])
def test_an_app_option_that_means_nothing_is_one_sentence(dirs, tmp_path, args, says):
    """The audit's cases: --max-tokens 0 ran 256 tokens (0 read as "not given"), --timeout
    nan, inf or 1e308 ended in a traceback. Refused before a window or a model is made."""
    r, took = studio(tmp_path, "--target", str(dirs["target"]), *args)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stderr[-2000:])
    assert lines[0].startswith(f"dspark-studio: error: {says}"), lines
    assert not (tmp_path / "shot.png").exists() and took < 60


def test_the_app_reads_0_tokens_as_given():
    from dspark_studio.startup import build_parser, given_settings

    args = build_parser().parse_args(["--max-tokens", "0", "--block-size", "0"])
    assert given_settings(args) == {"max_tokens": 0, "block_size": 0}
    assert given_settings(build_parser().parse_args([])) == {}


# ----------------------------------------------------------------------------- the process's surroundings
def test_make_demo_into_a_file_is_one_sentence(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    for argv in (["--only", "target"], [], ["--only", "measure"]):
        capsys.readouterr()
        assert main(["make-demo", *argv, "--out", str(a_file)]) == 2
        assert "is a file, not a directory" in said(capsys)
    capsys.readouterr()
    assert main(["make-demo", "--only", "target", "--out", str(a_file / "inside")]) == 2
    assert "cannot create" in said(capsys)


def test_make_demo_resuming_from_a_half_written_tokenizer_is_one_sentence(tmp_path, capsys):
    """The audit's case: the target stage's checkpoint kept, its .ckpt/tokenizer.json cut short
    (a copy interrupted, a disk that filled in an older version): an internal error."""
    import mlx.core as mx

    from dspark.demo.pretrain import CKPT_DIR, CKPT_FILE, TargetRecipe

    ckpt = tmp_path / "demo" / "target" / CKPT_DIR
    ckpt.mkdir(parents=True)
    meta = json.dumps({"recipe": TargetRecipe().to_dict(), "history": {}})
    mx.save_safetensors(str(ckpt / CKPT_FILE), {"w": mx.zeros((2,))}, metadata={"meta": meta})
    (ckpt / "tokenizer.json").write_text('{"version": "1.0", "truncation": null, "model": {"type": "BPE", "vo')
    capsys.readouterr()
    assert main(["make-demo", "--only", "target", "--out", str(tmp_path / "demo")]) == 2
    err = said(capsys)
    assert "tokenizer.json is not a readable tokenizer" in err and "--fresh starts over" in err, err
    (ckpt / "tokenizer.json").unlink()
    assert main(["make-demo", "--only", "target", "--out", str(tmp_path / "demo")]) == 2
    assert "tokenizer.json" in said(capsys)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full (macOS has none)")
def test_standard_output_on_a_full_disk_is_one_sentence(dirs):
    """The audit's case: ``dspark ... > /dev/full`` ended in an internal error (or Python's own
    "Exception ignored" at exit). Both a command that prints at its end and one that streams."""
    for args in (
        ["inspect", str(dirs["drafter"])],
        ["generate", "--target", str(dirs["target"]), "--prompt", "x = 1", "--max-tokens", "8"],
    ):
        with open("/dev/full", "w") as full:
            r = cli(*args, stdout=full, stderr=subprocess.PIPE)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and lines[-1] == "dspark: error: could not write the output: the disk is full", (
            args,
            r.returncode,
            r.stderr[-2000:],
        )
        assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly(dirs):
    """The audit's case: ``dspark generate ... | head -c 1``. As a shell command does when its
    reader goes away: no message, the status of a process SIGPIPE ended (128 + 13)."""
    p = subprocess.Popen(
        [sys.executable, "-m", "dspark.cli", "generate", "--target", str(dirs["target"]), "--prompt", "x = 1"]
        + ["--max-tokens", "3000", "--ignore-eos"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout.read(1)
    p.stdout.close()  # what head does after its byte
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141, err[-2000:]
    assert "Traceback" not in err and "error" not in err and "Exception ignored" not in err, err[-2000:]


def test_a_bug_whose_log_cannot_be_written_says_so_and_why(monkeypatch, tmp_path, capsys):
    """The audit's cases: DSPARK_STUDIO_HOME a file, and a HOME the log folder cannot be made in
    (a file stands in for a read-only HOME: the tests may run as root, who writes anywhere)."""
    import dspark.cli.inspect as inspect_command

    monkeypatch.setattr(inspect_command, "run", lambda a: 1 / 0)
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    monkeypatch.setenv("DSPARK_STUDIO_HOME", str(a_file))
    assert main(["inspect", "whatever"]) == 1
    err = said(capsys)
    assert err.startswith("dspark: internal error (a bug, please report it): ZeroDivisionError")
    assert err.endswith(f"the details could not be saved in {a_file / 'logs'} (Not a directory)"), err
    monkeypatch.delenv("DSPARK_STUDIO_HOME")
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(a_file))
    assert main(["inspect", "whatever"]) == 1
    err = said(capsys)
    assert f"the details could not be saved in {a_file}" in err and "(Not a directory)" in err, err


def test_the_app_with_a_file_for_its_home_is_one_sentence(dirs, tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    env = studio_env(tmp_path, DSPARK_STUDIO_HOME=str(a_file))
    r, took = studio(tmp_path, "--target", str(dirs["target"]), "--max-tokens", "4", env=env)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"dspark-studio: error: DSPARK_STUDIO_HOME is {a_file}, a file: it must name a folder (or be unset)"
    ], r.stderr[-2000:]


@pytest.mark.parametrize("variable, value", [("TMPDIR", "nowhere"), ("TMPDIR", ""), ("TMP", "nowhere")])
def test_a_temporary_folder_that_is_none_is_one_sentence(dirs, tmp_path, variable, value):
    """The audit's case: TMPDIR naming nothing. Python's tempfile quietly takes another folder,
    but MLX's CPU backend compiles its kernels in the one C++ names (TMPDIR, else TMP, TEMP,
    TEMPDIR; an empty one too), and its first computation raised an internal error."""
    value = str(tmp_path / value) if value else value
    env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "TMP", "TEMP", "TEMPDIR")}
    env[variable] = value
    r = cli(
        "generate",
        "--target",
        str(dirs["target"]),
        "--prompt",
        "x = 1",
        "--max-tokens",
        "4",
        env=env,
        capture_output=True,
    )
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"dspark: error: {variable} is {value!r}, which is not a folder: MLX compiles its kernels in the temporary "
        "folder it names; point it at a folder, or unset it"
    ], r.stderr[-2000:]
    if variable == "TMPDIR" and value:
        r, _ = studio(tmp_path, "--target", str(dirs["target"]), env=studio_env(tmp_path, TMPDIR=value))
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [
            f"dspark-studio: error: TMPDIR is {value!r}, which is not a folder: MLX compiles its kernels in the "
            "temporary folder it names; point it at a folder, or unset it"
        ], r.stderr[-2000:]


def _has_gpu() -> bool:
    import mlx.core as mx

    return mx.is_available(mx.gpu)


@pytest.mark.skipif(_has_gpu(), reason="this MLX has a GPU: DSPARK_DEVICE=gpu is legal here")
def test_a_gpu_asked_for_where_mlx_has_none_is_one_sentence_in_every_command(dirs, tmp_path, monkeypatch, capsys):
    """DSPARK_DEVICE=gpu without a GPU backend: said where a model loaded, but inspect and quantize
    ran on the CPU as though nothing were wrong, and the app opened its window on a failed load.
    Every command says it first, in one sentence."""
    monkeypatch.setenv("DSPARK_DEVICE", "gpu")
    says = "DSPARK_DEVICE is gpu, but this MLX has no GPU backend here: unset it, or set it to cpu"
    for argv in (
        ["inspect", str(dirs["drafter"])],
        ["quantize", str(dirs["drafter"]), "--bits", "4", "--out", str(tmp_path / "q")],
        ["generate", "--target", str(dirs["target"]), "--prompt", "x = 1", "--max-tokens", "4"],
    ):
        capsys.readouterr()
        assert main(argv) == 2, argv
        assert said(capsys) == f"dspark: error: {says}"
    assert not (tmp_path / "q").exists()
    r, took = studio(tmp_path, "--target", str(dirs["target"]), env=studio_env(tmp_path, DSPARK_DEVICE="gpu"))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [f"dspark-studio: error: {says}"], r.stderr[-2000:]


# ----------------------------------------------------------------------------- hangs
def _saved_run(dirs, prompt: str) -> dict:
    """A run as the app saves it (a generation's events and summary), with ``prompt`` as its prompt."""
    from dspark.config import GenerationConfig
    from dspark.engine import generate
    from dspark.events import RoundEvent, Summary, event_to_dict
    from dspark.loading import load_drafter, load_target

    target = load_target(dirs["target"])
    drafter = load_drafter(dirs["drafter"], target)
    events = list(generate(target, drafter, "x = 1", GenerationConfig(max_tokens=12)))
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    summary = next(e for e in events if isinstance(e, Summary))
    run = {
        "label": "drafter",
        "method": "speculative",
        "drafter": str(dirs["drafter"]),
        "prompt": prompt,
        "prompt_index": 0,
        "config": {"max_tokens": 12, "temperature": 0.0},
        "events": [event_to_dict(e) for e in rounds],
        "drafted_text": [[f"#{i}" for i in e.drafted] for e in rounds],
        "summary": summary.to_dict(),
        "verdict": None,
    }
    return {
        "app": "dspark-studio",
        "version": "0",
        "created": "2026-12-05T08:00:00",
        "kind": "run",
        "prompts": 1,
        "target": str(dirs["target"]),
        "runs": [run],
    }


def test_a_replay_whose_prompt_is_one_line_of_megabytes_draws_in_seconds(dirs, tmp_path):
    """The audit's case: a saved run whose prompt is one line of 1-4 MiB still drew after 120 s
    (40,000 short lines draw in 3.6 s); here one of 2 MiB ran into a 150 s timeout. The view
    leaves the line's middle out, and says so; the run as read keeps the prompt whole."""
    line = "0123456789abcdef" * 2**17  # 2 MiB and nowhere to break it: 25 s with spaces, past 150 s without
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_saved_run(dirs, line)))
    r, took = studio(tmp_path, "--replay", str(path), "--timeout", "100", timeout=200)
    assert r.returncode == 0 and took < 60, (r.returncode, took, r.stderr[-2000:])
    from dspark_studio.files.replay import read_recording
    from dspark_studio.panes.text_view import shown_prompt

    assert read_recording(path).prompts == (line,)
    shown = shown_prompt(line)
    assert len(shown) < 10_000 and shown.startswith(line[:1000]) and shown.endswith(line[-1000:])
    assert f"[… {len(line) - 3000:,} characters of this line not shown here …]" in shown
    assert shown_prompt("x = 1\n" * 10_000) == "x = 1\n" * 10_000  # short lines are drawn as they are


def test_a_frozen_rank_does_not_keep_the_launch_from_ending(tmp_path):
    """The audit's case: under mlx.launch, one rank frozen (SIGSTOP) and --rank-timeout 20: the
    waiting rank said its sentence and exited, but mlx.launch sent the frozen one SIGTERM, which
    a stopped process holds, and waited for it for ever. The waiting rank continues the ranks
    its launch runs on this machine before it exits, so the launch ends."""
    from test_distributed import errors, finish, launch

    script = tmp_path / "frozen.py"
    script.write_text(
        "import os, signal\nimport mlx.core as mx\nfrom dspark.training.distributed import World\n"
        "world = World.join(timeout=3)\n"
        "world.sum([mx.ones(4)], 'the first sum')\n"
        "if world.rank == 1:\n    os.kill(os.getpid(), signal.SIGSTOP)\n"
        "world.sum([mx.ones(4)], 'step 2')\n"
    )
    started = time.time()
    _, err = finish(launch(str(script)), 90)
    assert time.time() - started < 60, err[-3000:]
    assert errors(err)[0] == (
        "dspark: error: rank 0 of 2 waited 3 s at step 2 for another rank that no longer answers "
        "(--rank-timeout); the run stops"
    ), err[-3000:]


def test_a_frozen_rank_ends_a_launched_training_run(dirs, tmp_path):
    """The audit's case as typed: ``mlx.launch ... dspark train --rank-timeout`` with rank 1
    stopped (SIGSTOP) mid-run. Rank 0 says its sentence after the timeout and the launch ends."""
    import numpy as np
    from test_distributed import BIN, TRAIN, _pid, errors, finish, launch, wait_for

    rng = np.random.default_rng(0)
    words = "def class return self if else for in while import from as with print value name".split()
    data = tmp_path / "data.txt"
    data.write_text("\n".join(" ".join(rng.choice(words, size=12)) for _ in range(40)))
    out = tmp_path / "out"
    p = launch(
        str(BIN / "dspark"),
        "train",
        "--target",
        str(dirs["target"]),
        "--data",
        str(data),
        *TRAIN,
        "--steps",
        "100000",  # a run that is still training when rank 1 is stopped
        "--rank-timeout",
        "5",
        "--checkpoint-minutes",
        "0",
        "--no-progress",
        "--out",
        str(out),
    )
    wait_for(out / ".train" / "train_state.safetensors", p)
    os.kill(_pid(out, 1), signal.SIGSTOP)
    started = time.time()
    _, err = finish(p, 120)
    assert time.time() - started < 60, err[-3000:]
    # rank 0's sentence; rank 1, continued, may say its own wait ended too
    said = [line for line in errors(err) if line.startswith("dspark: error: rank 0 of 2 waited 5 s at ")]
    assert len(said) == 1, err[-3000:]
    assert "for another rank that no longer answers (--rank-timeout); the run stops" in said[0], err[-3000:]


class _GoneStream:
    """A standard output whose reader went away (``| head -c 1``), or whose disk is full."""

    def __init__(self, error: OSError):
        self.error = error

    def write(self, text: str) -> int:
        raise self.error

    def flush(self) -> None:
        raise self.error


def test_the_app_without_a_window_ends_as_a_shell_command_does_when_its_output_is_gone(monkeypatch, capsys):
    """dspark-studio's windowless modes (here the device check, which prints one JSON line) write
    for a shell as dspark does: a reader gone ends quietly with SIGPIPE's status, a full disk is one
    sentence, and the real stdout is back afterwards."""
    import errno

    from dspark_studio.main import main as studio

    real = sys.stdout
    monkeypatch.setattr(sys, "stdout", _GoneStream(BrokenPipeError(errno.EPIPE, "Broken pipe")))
    monkeypatch.setattr(os, "dup2", lambda *a: None)  # the test's own descriptors stay as they are
    assert studio(["--check-device"]) == 141
    monkeypatch.setattr(sys, "stdout", _GoneStream(OSError(errno.ENOSPC, "No space left on device")))
    assert studio(["--check-device"]) == 2
    assert "dspark-studio: error: could not write the output: the disk is full" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdout", real)

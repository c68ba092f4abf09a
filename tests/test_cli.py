"""The dspark CLI end to end on a tiny target directory, and its one-line errors."""

import json
import subprocess
import sys

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten
from tiny import write_tiny_target_dir

from dspark.cli import main


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    target = write_tiny_target_dir(root / "target", window=16)
    write_tiny_target_dir(root / "other", seed=1, window=16, layers=5)
    assert (
        main(
            [
                "init",
                "--target",
                str(target),
                "--out",
                str(root / "drafter"),
                "--block-size",
                "4",
                "--layers",
                "1",
                "--taps",
                "1,3",
                "--markov-rank",
                "16",
            ]
        )
        == 0
    )
    return root


def run_json(capsys, *args):
    capsys.readouterr()
    assert main(["generate", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_generate_speculative_with_baseline(dirs, capsys):
    r = run_json(
        capsys,
        "--target",
        str(dirs / "target"),
        "--drafter",
        str(dirs / "drafter"),
        "--prompt",
        "def add(a, b):",
        "--max-tokens",
        "70",
        "--baseline",
        # every round verifies all 4 drafts: under auto (the default) which widths a busy machine
        # verifies, and so how many positions have an acceptance, is the clock's
        "--policy",
        "fixed",
    )
    assert len(r["tokens"]) == 70 or r["finish_reason"] == "stop"
    assert r["identical"] is True  # greedy: lossless
    # 0.1.0's names of the same values still printed, for scripts that read them
    assert r["identical_to_baseline"] is True and r["baseline_tokens_per_sec"] == r["plain_tokens_per_sec"]
    assert r["rounds"] >= 1 and r["tau"] >= 1.0 and r["speedup"] > 0 and r["tokens_per_sec"] > 0
    assert isinstance(r["text"], str) and len(r["per_position_acceptance"]) == 4


def test_generate_plain_without_drafter(dirs, capsys):
    r = run_json(capsys, "--target", str(dirs / "target"), "--prompt", "x = 1", "--max-tokens", "12")
    assert r["method"] == "plain" and r["tau"] == 1.0


def test_generate_sampling_prompt_file(dirs, capsys, tmp_path):
    pf = tmp_path / "p.txt"
    pf.write_text("for i in range(3):")
    r = run_json(
        capsys,
        "--target",
        str(dirs / "target"),
        "--drafter",
        str(dirs / "drafter"),
        "--prompt-file",
        str(pf),
        "--temperature",
        "0.9",
        "--top-p",
        "0.95",
        "--seed",
        "3",
        "--max-tokens",
        "20",
    )
    assert r["method"] == "speculative" and r["tokens"]


def write_llama(path):
    from mlx_lm.models import llama

    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=32,
        num_hidden_layers=2,
        intermediate_size=64,
        num_attention_heads=2,
        rms_norm_eps=1e-5,
        vocab_size=300,
        num_key_value_heads=2,
    )
    model = llama.Model(args)
    path.mkdir()
    (path / "config.json").write_text(json.dumps(vars(args)))
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(model.parameters())))
    return path


def bad_cases(dirs, tmp_path):
    t, d = str(dirs / "target"), str(dirs / "drafter")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for f in (dirs / "target").iterdir():
        (corrupt / f.name).write_bytes(f.read_bytes())
    (corrupt / "model.safetensors").write_bytes(b"not a safetensors file")
    bad_drafter = tmp_path / "bad_drafter"
    bad_drafter.mkdir()
    for f in (dirs / "drafter").iterdir():
        (bad_drafter / f.name).write_bytes(f.read_bytes())
    (bad_drafter / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "config.json").write_text('{"model_type": "no_such_arch"}')
    (unknown / "model.safetensors").write_bytes(b"")
    p = ["--prompt", "x"]
    return {
        "target directory not found": ["--target", str(tmp_path / "nope"), *p],
        "not a Gemma-4 model": ["--target", str(write_llama(tmp_path / "llama")), *p],
        "is not a Gemma-4 model": ["--target", str(unknown), *p],
        "is not a readable safetensors file": ["--target", str(corrupt), *p],
        "drafter was made for different target": ["--target", str(dirs / "other"), "--drafter", d, *p],
        "not a readable safetensors": ["--target", t, "--drafter", str(bad_drafter), *p],
        "drafter directory not found": ["--target", t, "--drafter", str(tmp_path / "nodrafter"), *p],
        "the prompt is empty": ["--target", t, "--prompt", "   "],
        "prompt file not found": ["--target", t, "--prompt-file", str(tmp_path / "none.txt")],
    }


def test_bad_inputs_give_one_clear_line(dirs, tmp_path, capsys):
    for expected, args in bad_cases(dirs, tmp_path).items():
        capsys.readouterr()
        assert main(["generate", *args]) == 2, expected
        err = capsys.readouterr().err.strip()
        assert expected in err and err.startswith("dspark: error:") and "\n" not in err, (expected, err)


def test_console_script_prints_no_traceback(dirs, tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "dspark.cli", "generate", "--target", str(tmp_path / "nope"), "--prompt", "x"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1


def test_dspark_device_chooses_where_mlx_computes_and_a_wrong_value_is_one_line(dirs):
    """DSPARK_DEVICE=cpu makes the CLI compute on the CPU (mlx-lm's generation stream included,
    which is made when mlx-lm is imported); any other value than cpu or gpu is one sentence."""
    import os

    env = dict(os.environ, DSPARK_DEVICE="cpu")
    probe = (
        'import sys, dspark.target, mlx.core as mx, mlx_lm.generate; g = sys.modules["mlx_lm.generate"]; '
        "print(mx.default_device(), g.generation_stream)"
    )
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.count("cpu") == 2, r.stdout + r.stderr
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "dspark.cli",
            "generate",
            "--target",
            str(dirs / "target"),
            "--prompt",
            "x",
            "--max-tokens",
            "2",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    env["DSPARK_DEVICE"] = "tpu"
    r = subprocess.run(
        [sys.executable, "-m", "dspark.cli", "generate", "--target", str(dirs / "target"), "--prompt", "x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "DSPARK_DEVICE is 'tpu': it must be cpu or gpu" in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


@pytest.mark.usefixtures("costs_measured_once")
def test_generate_says_once_why_auto_bought_nothing(dirs, capsys, monkeypatch):
    """auto decoded every token plainly (no round paid): one sentence after the run says so, with
    what to do; on a machine without a fast BLAS the sentence is that one, with its install line."""
    from dspark import blas
    from dspark.policy import Scheduler

    monkeypatch.setattr(Scheduler, "drafts", lambda self, position, budget: False)
    args = ["generate", "--target", str(dirs / "target"), "--drafter", str(dirs / "drafter")]
    args += ["--prompt", "def add(a, b):", "--max-tokens", "12", "--policy", "auto"]
    capsys.readouterr()
    assert main(args) == 0
    err = capsys.readouterr().err
    assert err.count("dspark: note: auto decoded 12 of 12 tokens plainly") == 1 and "dspark diagnose" in err
    monkeypatch.setattr(blas, "is_slow", lambda: True)
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "reference BLAS" in err and blas.INSTALL_HINT in err and "auto decoded" not in err
    assert main([*args[:-2], "--policy", "fixed"]) == 0  # fixed drafted every round: only the BLAS is said
    assert capsys.readouterr().err.count("dspark: note:") == 1

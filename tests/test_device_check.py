"""The first-launch GPU check (``dspark.device``, ``dspark.gpu_check``): a short greedy demo run on the GPU against the
CPU, in a child process, its answer kept per machine and software, and the app computing on the
CPU with one sentence when the GPU is wrong or fails. This machine has no GPU, so the GPU is a
test double (``tests/gpu_double.py``): a decode that returns zeros, raises, crashes or hangs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import pytest

from dspark import device, gpu_check

ROOT = Path(__file__).resolve().parent.parent
DOUBLE = [sys.executable, str(ROOT / "tests" / "gpu_double.py")]


def decoded(tokens, rows):
    return gpu_check.Decoded(tokens=list(tokens), logprobs=[mx.array(r, dtype=mx.float32) for r in rows])


def test_the_same_tokens_and_numbers_agree():
    rows = [[-0.1, -3.0, -5.0], [-4.0, -0.2, -6.0]]
    outcome, sentence = gpu_check.compare_decodes(decoded([0, 1], rows), decoded([0, 1], rows))
    assert outcome == "agrees" and "computes what the CPU computes (2 tokens" in sentence


def test_a_first_difference_within_rounding_is_a_tie_and_said_as_one():
    cpu = decoded([0, 1], [[-0.1, -3.0, -5.0], [-0.6931, -0.6932, -9.0]])
    gpu = decoded([0, 0], [[-0.1, -3.0, -5.0], [-0.6932, -0.6931, -9.0]])
    outcome, sentence = gpu_check.compare_decodes(gpu, cpu)
    assert outcome == "tie" and "at token 2 it chose 0 where the CPU chose 1, a numerical tie" in sentence, sentence


def test_numbers_apart_are_wrong_even_where_the_tokens_agree():
    cpu = decoded([0], [[-0.1, -3.0, -5.0]])
    gpu = decoded([0], [[-0.1, -3.5, -5.0]])  # the same argmax, another distribution
    outcome, sentence = gpu_check.compare_decodes(gpu, cpu)
    assert outcome == "wrong" and "0.5 apart at token 1" in sentence and "computes on the CPU" in sentence


def test_nan_is_wrong():
    outcome, _ = gpu_check.compare_decodes(decoded([0], [[float("nan"), -1.0]]), decoded([0], [[-0.3, -1.4]]))
    assert outcome == "wrong"


def test_a_different_token_where_the_numbers_differ_is_wrong_not_a_tie():
    cpu = decoded([1], [[-2.0, -0.2, -9.0]])
    gpu = decoded([0], [[-0.2, -2.0, -9.0]])
    assert gpu_check.compare_decodes(gpu, cpu)[0] == "wrong"


@pytest.mark.parametrize(
    "mode, outcome, words",
    [
        ("honest", "agrees", "computes what the CPU computes"),
        ("zeros", "wrong", "computed other numbers than the CPU"),
        ("raises", "failed", "failed to run MLX (RuntimeError: [metal::Device] Unable to load kernel"),
        ("crashes", "failed", "the GPU check crashed (signal SIGSEGV"),
    ],
)
def test_the_child_answers_for_the_gpu_whatever_it_does(mode, outcome, words):
    check = device.ask_child(DOUBLE + [mode], timeout=300)
    assert check.outcome == outcome and words in check.sentence, check
    assert check.device == ("gpu" if outcome == "agrees" else "cpu")
    assert check.fell_back == (outcome != "agrees")


def test_a_hung_gpu_check_is_ended_and_said():
    check = device.ask_child(DOUBLE + ["hangs"], timeout=20)
    assert check.outcome == "failed" and "did not finish in 20 s" in check.sentence


def test_a_child_that_prints_nonsense_is_a_failed_check_not_a_crash_of_the_app():
    check = device.read_child(0, '{"outcome": "agrees"}\n', "")  # no device, no sentence
    assert check.outcome == "failed" and "exit 0" in check.sentence
    check = device.read_child(2, "", "dspark.device: the demo target is missing under /x\n")
    assert check.outcome == "failed" and "exit 2: dspark.device: the demo target is missing" in check.sentence


def test_the_answer_is_kept_per_machine_and_software_and_asked_again_when_they_change(tmp_path, monkeypatch):
    monkeypatch.delenv(device.ENV, raising=False)
    cache, asked = tmp_path / "device-check.json", []

    def ask():
        asked.append(1)
        return device.DeviceCheck(outcome="wrong", device="cpu", sentence="this GPU is wrong")

    first = device.startup_check(cache, ask=ask, gpu=True)
    again = device.startup_check(cache, ask=ask, gpu=True)
    assert first == again and first.key == device.check_key() and len(asked) == 1  # once per machine
    doc = json.loads(cache.read_text())
    cache.write_text(json.dumps({**doc, "key": {**doc["key"], "mlx": "0.0.1"}}))  # another MLX since
    device.startup_check(cache, ask=ask, gpu=True)
    assert len(asked) == 2
    cache.write_text("{not json")  # a damaged record: asked again, never an error
    device.startup_check(cache, ask=ask, gpu=True)
    device.startup_check(cache, ask=ask, gpu=True, again=True)
    assert len(asked) == 4


def test_no_gpu_or_a_device_asked_for_is_not_checked(tmp_path, monkeypatch):
    never = lambda: pytest.fail("the child must not be asked")
    monkeypatch.delenv(device.ENV, raising=False)
    check = device.startup_check(tmp_path / "c.json", ask=never, gpu=False)
    assert check.outcome == "cpu" and not check.fell_back
    monkeypatch.setenv(device.ENV, "cpu")
    check = device.startup_check(tmp_path / "c.json", ask=never, gpu=True)
    assert check.outcome == "asked" and check.device == "cpu" and "DSPARK_DEVICE=cpu" in check.sentence
    assert not (tmp_path / "c.json").exists()


def test_applying_a_wrong_gpu_sends_the_work_to_the_cpu_and_is_remembered(monkeypatch):
    monkeypatch.setenv(device.ENV, "")  # so that the "cpu" apply() sets is taken back after the test
    monkeypatch.setitem(device._current, "check", None)
    wrong = device.DeviceCheck(outcome="wrong", device="cpu", sentence="this GPU is wrong", gpu="Apple Paravirtual")
    before = mx.default_device()
    try:
        device.apply(wrong)
        assert os.environ[device.ENV] == "cpu" and mx.default_device() == mx.cpu
    finally:  # the rest of this worker's tests run where they ran (a Mac's GPU on CI)
        mx.set_default_device(before)
    assert device.current() is wrong
    assert device.describe_current() == {
        "outcome": "wrong",
        "device": "cpu",
        "gpu": "Apple Paravirtual",
        "sentence": "this GPU is wrong",
    }


def test_asking_for_a_gpu_that_mlx_does_not_have_is_one_sentence(monkeypatch):
    if mx.is_available(mx.gpu):
        pytest.skip("this MLX has a GPU")
    monkeypatch.setenv(device.ENV, "gpu")
    with pytest.raises(device.DsparkError, match="this MLX has no GPU backend here"):
        device.use_env_device()


def test_the_module_runs_as_the_child_the_app_starts():
    """``python -m dspark.gpu_check --check`` as :func:`dspark.device.child_command` starts it: on a
    machine without a GPU the answer is the CPU, with nothing compared."""
    env = {k: v for k, v in os.environ.items() if k != device.ENV}
    r = subprocess.run(device.child_command(), capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    check = device.read_child(r.returncode, r.stdout, r.stderr)
    expected = "agrees" if mx.is_available(mx.gpu) else "cpu"
    assert check.outcome in (expected, "tie"), check


def test_a_device_asked_for_in_the_environment_keeps_the_fast_blas():
    """``DSPARK_DEVICE`` makes ``import dspark`` import MLX; OpenBLAS must be in the process first,
    or a Linux user who asks for the CPU gets the wheel's reference BLAS (and the suite's
    subprocesses other numbers than its own)."""

    def slow(code: str, **extra) -> str:
        env = {k: v for k, v in os.environ.items() if k not in (device.ENV, "DSPARK_NO_OPENBLAS")}
        r = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**env, **extra}, cwd=ROOT
        )
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout.strip()

    # as an entry point does it: the fast BLAS first, then MLX
    first = slow("from dspark import blas; blas.use_fast_blas(); import mlx.core; print(blas.is_slow())")
    assert slow("import dspark; from dspark import blas; print(blas.is_slow())", DSPARK_DEVICE="cpu") == first


def test_openblas_workers_sleep_soon_after_a_call_unless_the_environment_says():
    """OpenBLAS's workers spin ~0.1 s after each call by default; on a 2-core machine that took a
    core from MLX and Python between calls (plain decoding at two threads ~17% slower, measured).
    Linux sets a short spin before OpenBLAS loads, unless the user's environment sets one; macOS
    has no OpenBLAS and sets nothing."""
    from dspark import blas

    code = "import os; from dspark import blas; blas.use_fast_blas(); print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'))"

    def timeout(**extra) -> str:
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_THREAD_TIMEOUT", "DSPARK_NO_OPENBLAS")}
        r = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**env, **extra}, cwd=ROOT
        )
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout.strip()

    assert timeout() == (blas.THREAD_TIMEOUT if sys.platform.startswith("linux") else "None")
    assert timeout(OPENBLAS_THREAD_TIMEOUT="25") == "25"

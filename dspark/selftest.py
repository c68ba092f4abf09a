"""The self-test of an install: load the demo pair, generate ``TOKENS`` tokens speculatively
and by plain mlx-lm decoding, check that the two agree (``dspark.lossless``), and say in one
line which device computed, which BLAS ran and what came out. ``dspark-studio --self-test`` runs
it (and CI after each bundle build); everything MLX stays on the calling thread.

A device that MLX *can* use proves nothing, and a GPU that returns garbage would still agree
with itself, so when the default device is a GPU the demo target also decodes on it and on the
CPU and the two must agree (:func:`dspark.gpu_check.check_devices`, the same check the app makes at
its first launch). On macOS a run that computed on the CPU fails, since the app is built for
Metal, unless the CPU was asked for (``DSPARK_DEVICE=cpu``, the app's ``--device cpu``): CI does
that on a runner whose GPU does not run MLX, and the line then says Metal was not exercised.
"""

from __future__ import annotations

import os
import sys

import dspark

from . import blas, device, gpu_check, lossless, metrics, resources
from .prompts import HELD_OUT_SET, held_out_prompt

TOKENS = 32


def computed_on() -> tuple[str, str]:
    """The device MLX computes on by default, ("gpu" or "cpu", its name from ``mx.device_info``)."""
    import mlx.core as mx  # noqa: PLC0415 (ordered: after the BLAS; a broken mlx is reported)

    dev = mx.default_device()
    kind = "gpu" if dev.type == mx.gpu else "cpu"
    try:
        info = mx.device_info(dev)
    except (AttributeError, RuntimeError, ValueError):  # an mlx without device_info
        info = {}
    name = str(info.get("device_name") or info.get("architecture") or "").strip()
    return kind, name


def device_check(model, ids: list[int], *, run_gpu=None) -> tuple[str | None, str]:
    """(None, what was found) when MLX's default device computes what the CPU computes (the same
    greedy tokens, or a numerical tie said as one), or is the CPU; else (why not, in one
    sentence, the same sentence). ``run_gpu`` replaces the GPU's decode (a test double)."""
    import mlx.core as mx  # noqa: PLC0415 (ordered: after the BLAS is loaded)

    if run_gpu is None and mx.default_device().type != mx.gpu:
        return None, "the CPU (nothing to compare)"
    found = gpu_check.check_devices(model, ids, run_gpu=run_gpu, gpu=device.gpu_name() if run_gpu is None else "")
    return (found.sentence if found.fell_back else None), found.sentence


def check(tokens: int = TOKENS, *, platform: str | None = None) -> tuple[bool, str]:
    """The headless check: (passed, one line saying what ran and what came out). ``platform``:
    whose rules apply (default ``sys.platform``; on "darwin" the run must be on Metal unless the
    CPU was asked for)."""
    try:
        kind, name = computed_on()
    except (ImportError, OSError, RuntimeError) as e:  # a broken mlx install or a missing metallib
        return False, f"mlx does not load: {type(e).__name__}: {e}"
    head = f"device {kind}{f' ({name})' if name else ''}, BLAS {blas.describe()}"
    paths = {name: resources.demo_model(name) for name in ("target", "dspark")}
    missing = [name for name, p in paths.items() if p is None]
    if missing:
        return False, f"{head}; demo model(s) missing under {resources.demo_dir()}: {', '.join(missing)}"
    prompt = held_out_prompt()
    if prompt is None:
        return False, f"{head}; the prompt set {HELD_OUT_SET!r} is missing under {resources.prompts_dir()}"
    try:
        from dspark.loading import load_drafter  # noqa: PLC0415 (ordered: after the BLAS is loaded)

        target = dspark.load_target(paths["target"])
        drafter = load_drafter(paths["dspark"], target)
        warm = dspark.GenerationConfig(max_tokens=8, stop_at_eos=False, policy="fixed")
        dspark.run_to_summary(dspark.generate_plain(target, prompt, warm))  # compile and allocate
        dspark.run_to_summary(dspark.generate(target, drafter, prompt, warm))  # before the timed runs
        # every draft verified: the check compares outputs, and needs no costs measured first
        config = dspark.GenerationConfig(max_tokens=tokens, stop_at_eos=False, policy="fixed")
        speculative = dspark.run_to_summary(dspark.generate(target, drafter, prompt, config))
        plain = dspark.run_to_summary(dspark.generate_plain(target, prompt, config))
        verdict = lossless.compare(target, speculative, plain)
        wrong_device, _found = device_check(target.model, list(speculative.prompt_tokens))
        kind, name = computed_on()  # what the run computed on
    except Exception as e:  # anything at all is a failed self-test, said in the one line
        return False, f"{head}; the demo run failed: {type(e).__name__}: {e}"
    checked = ", checked against the CPU" if kind == "gpu" else ""
    head = f"device {kind}{f' ({name})' if name else ''}{checked}, BLAS {blas.describe()}"
    figures = (
        f"{len(speculative.tokens)} tokens, tau {speculative.tau:.2f}, "
        f"{speculative.tokens_per_sec:.0f} tok/s vs "
        f"{plain.tokens_per_sec:.0f} plain, speedup "
        f"{metrics.speedup(speculative.tokens_per_sec, plain.tokens_per_sec):.2f}x"
    )
    if wrong_device:
        return False, f"{head}; {figures}; {wrong_device}"
    if (platform or sys.platform) == "darwin" and kind != "gpu":
        if os.environ.get(device.ENV, "").strip().lower() != "cpu":
            return False, (
                f"{head}; {figures}; the demo run computed on the CPU, not on Metal: this Mac's GPU is not "
                f"available to MLX"
            )
        head += "; Metal not exercised: the CPU was asked for (--device cpu)"
    ok = len(speculative.tokens) == tokens and verdict.lossless
    return ok, f"{head}; {figures}; {verdict.explain()}"


def main(argv: list[str] | None = None) -> int:
    """``python -m dspark.selftest``: the check, one line, exit 0 or 1. ``--device``: only whether
    MLX's default device computes what the CPU computes on the demo target (CI asks this of a
    runner before choosing where the test suite runs; a GPU that crashes the process says so too)."""
    blas.use_fast_blas()
    args = sys.argv[1:] if argv is None else argv
    if args == ["--device"]:
        try:
            target = dspark.load_target(resources.demo_model("target"))
        except dspark.DsparkError as e:
            print(f"dspark.selftest: {e}", flush=True)
            return 2
        why, verdict = device_check(target.model, target.encode(held_out_prompt() or "def f(x):"))
        kind, name = computed_on()
        print(f"dspark.selftest: device {kind} ({name}): {verdict}", flush=True)
        return 1 if why else 0
    ok, line = check()
    print(f"dspark.selftest: {'ok' if ok else 'FAILED'}: {line}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

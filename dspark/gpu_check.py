"""The GPU check itself, run in a child process (:mod:`dspark.device` asks it and applies the
answer): the demo target decodes :data:`CHECK_TOKENS` greedy tokens on the GPU and again on the
CPU, and the two must agree. ``python -m dspark.gpu_check --check`` prints the answer as one JSON
line (:class:`dspark.device.DeviceCheck`)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from .blas import use_fast_blas
from .device import ENV, DeviceCheck, check_key, failed, gpu_name, no_gpu
from .errors import DsparkError
from .prompts import held_out_prompt
from .resources import demo_dir, demo_model

#: Greedy tokens the check decodes on each device: enough for a wrong kernel to show in the
#: tokens, few enough for a first launch (about a second on a Mac, the model load included).
CHECK_TOKENS = 24
#: The largest difference of the demo target's float32 log-probabilities between the GPU and the
#: CPU that still counts as the same computation (their range is tens of nats; the two devices'
#: rounding moves them by about 1e-5).
TOLERANCE = 1e-2


@dataclass(frozen=True)
class Decoded:
    """A short greedy decode: the tokens, and the log-probabilities each was chosen from."""

    tokens: list[int]
    logprobs: list  # one float32 [V] array per token


def greedy_on(model, prompt_ids: Sequence[int], *, tokens: int, device) -> Decoded:
    """``tokens`` greedy tokens of ``model`` after ``prompt_ids``, every operation on ``device``
    (a fresh cache; mlx-lm's greedy rule, the argmax of the log-softmax)."""
    import mlx.core as mx  # noqa: PLC0415 (ordered: after the BLAS is loaded)
    from mlx_lm.models.cache import make_prompt_cache  # noqa: PLC0415 (ordered: after the BLAS is loaded)

    out, rows = [], []
    with mx.stream(device):
        cache = make_prompt_cache(model)
        logits = model(mx.array(list(prompt_ids))[None], cache=cache)[0, -1].astype(mx.float32)
        for _ in range(tokens):
            lp = logits - mx.logsumexp(logits)
            mx.eval(lp)
            token = int(mx.argmax(lp).item())
            out.append(token)
            rows.append(lp)
            logits = model(mx.array([[token]]), cache=cache)[0, -1].astype(mx.float32)
    return Decoded(tokens=out, logprobs=rows)


def compare_decodes(gpu: Decoded, cpu: Decoded, *, gpu_label: str = "the GPU") -> tuple[str, str]:
    """(outcome, sentence) for two decodes of the same prompt: "agrees" when the tokens are the
    same and every log-probability is within :data:`TOLERANCE`; "tie" when the first different
    token comes where both devices' log-probabilities are still within it (the same computation,
    rounded differently, on two candidates closer than that); "wrong" otherwise, including NaN."""
    import mlx.core as mx  # noqa: PLC0415 (ordered: after the BLAS is loaded)

    n = min(len(gpu.tokens), len(cpu.tokens))
    first = next((i for i in range(n) if gpu.tokens[i] != cpu.tokens[i]), None)
    worst = 0.0
    for i in range(n if first is None else first + 1):
        diff = float(mx.max(mx.abs(gpu.logprobs[i] - cpu.logprobs[i])).item())
        if not diff <= TOLERANCE:  # NaN too
            return "wrong", (
                f"{gpu_label} computed other numbers than the CPU for the same prompt (log-probabilities "
                f"{diff:.3g} apart at token {i + 1}, allowed {TOLERANCE:g}): it does not run MLX's "
                f"kernels correctly, so DSpark Studio computes on the CPU"
            )
        worst = max(worst, diff)
    if first is None and len(gpu.tokens) == len(cpu.tokens):
        return (
            "agrees",
            f"{gpu_label} computes what the CPU computes ({n} tokens, log-probabilities within {worst:.1e})",
        )
    if first is None:
        return "wrong", f"{gpu_label} decoded {len(gpu.tokens)} tokens where the CPU decoded {len(cpu.tokens)}"
    g, c = gpu.tokens[first], cpu.tokens[first]
    gap = float(cpu.logprobs[first][c].item() - cpu.logprobs[first][g].item())
    return "tie", (
        f"{gpu_label} computes what the CPU computes; at token {first + 1} it chose {g} where the CPU "
        f"chose {c}, a numerical tie (the CPU puts them {gap:.2g} nats apart, within the devices' "
        f"rounding of {worst:.1e})"
    )


def check_devices(
    model,
    prompt_ids: Sequence[int],
    *,
    tokens: int = CHECK_TOKENS,
    run_gpu: Callable[[], Decoded] | None = None,
    run_cpu: Callable[[], Decoded] | None = None,
    gpu: str = "",
) -> DeviceCheck:
    """The check on ``model``: decode on the GPU (``run_gpu``, by default :func:`greedy_on` on
    MLX's GPU) and on the CPU, and compare. A GPU that raises is "failed". Without a GPU
    (and no ``run_gpu``) there is nothing to compare: "cpu"."""
    import mlx.core as mx  # noqa: PLC0415 (ordered: after the BLAS is loaded)

    label = f"this GPU ({gpu})" if gpu else "this GPU"
    if run_gpu is None:
        if not mx.is_available(mx.gpu):
            return no_gpu()
        run_gpu = lambda: greedy_on(model, prompt_ids, tokens=tokens, device=mx.Device(mx.gpu))
    run_cpu = run_cpu or (lambda: greedy_on(model, prompt_ids, tokens=tokens, device=mx.Device(mx.cpu)))
    try:
        on_gpu = run_gpu()
    except Exception as e:  # whatever Metal raises, the answer is the same: not this GPU
        return replace(failed(f"{label} failed to run MLX ({type(e).__name__}: {str(e)[:200]})"), gpu=gpu)
    outcome, sentence = compare_decodes(on_gpu, run_cpu(), gpu_label=label)
    return DeviceCheck(
        outcome=outcome, device="gpu" if outcome in ("agrees", "tie") else "cpu", gpu=gpu, sentence=sentence
    )


def check_demo(run_gpu: Callable | None = None, *, gpu: str | None = None) -> DeviceCheck:
    """:func:`check_devices` on the bundled demo target and the self-test's held-out prompt;
    ``gpu`` names the GPU (default: as MLX names it). DsparkError when the demo target is
    missing."""
    from .loading import load_target  # noqa: PLC0415 (ordered: after the BLAS is loaded)

    path = demo_model("target")
    if path is None:
        raise DsparkError(f"the demo target is missing under {demo_dir()}: the GPU cannot be checked")
    target = load_target(path)
    ids = target.encode(held_out_prompt() or "def f(x):")
    gpu = gpu_name() if gpu is None else gpu
    check = check_devices(target.model, ids, run_gpu=run_gpu and (lambda: run_gpu(target.model, ids)), gpu=gpu)
    return replace(check, key=check_key())


def main(argv: list[str] | None = None, *, run_gpu: Callable | None = None, gpu: str | None = None) -> int:
    """``python -m dspark.gpu_check --check``: the check on the demo target, as one JSON line on
    stdout (what :func:`dspark.device.read_child` reads); exit 0, or 2 when it could not run at
    all. ``run_gpu(model, ids)`` replaces the GPU's decode and ``gpu`` its name (a test double:
    a GPU that is wrong)."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["--check"]:
        print("usage: python -m dspark.gpu_check --check", file=sys.stderr)
        return 2
    os.environ.pop(ENV, None)  # the check compares both devices whatever the parent was told
    use_fast_blas()
    try:
        check = check_demo(run_gpu, gpu=gpu)
    except DsparkError as e:
        print(f"dspark.gpu_check: {e}", file=sys.stderr)
        return 2
    print(json.dumps(check.to_dict()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

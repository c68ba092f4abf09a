"""A child process of the GPU check (``python -m dspark.gpu_check --check``) whose GPU is a test
double, for tests on machines without one: ``python tests/gpu_double.py MODE``.

MODE: ``honest`` (the GPU decodes on the CPU: the same numbers), ``zeros`` (returns zeros, as a
virtual Mac's paravirtual GPU has been seen doing), ``raises`` (Metal raises), ``crashes`` (the
process dies on a signal, as a GPU fault takes it down) or ``hangs``."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def double(mode: str):
    import mlx.core as mx

    from dspark import gpu_check

    def run_gpu(model, ids):
        if mode == "honest":
            return gpu_check.greedy_on(model, ids, tokens=gpu_check.CHECK_TOKENS, device=mx.Device(mx.cpu))
        if mode == "zeros":
            vocab = model.args.vocab_size if hasattr(model, "args") else 4096
            return gpu_check.Decoded(
                tokens=[0] * gpu_check.CHECK_TOKENS, logprobs=[mx.zeros((vocab,))] * gpu_check.CHECK_TOKENS
            )
        if mode == "raises":
            raise RuntimeError("[metal::Device] Unable to load kernel rms_float32")
        if mode == "crashes":
            os.kill(os.getpid(), signal.SIGSEGV)
        if mode == "hangs":
            time.sleep(3600)
        raise SystemExit(f"unknown mode {mode}")

    return run_gpu


if __name__ == "__main__":
    from dspark import gpu_check

    sys.exit(gpu_check.main(["--check"], run_gpu=double(sys.argv[1]), gpu="test double"))

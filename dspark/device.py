"""Which device MLX computes on: its own default (Metal's GPU on a Mac; the CPU on Linux, or the
GPU with ``mlx[cuda]``), unless ``DSPARK_DEVICE`` says ``cpu`` or ``gpu``. A model load applies
it (:func:`dspark.loading.load_target`), and so does the test suite at its start.

Why it exists: a Mac without a usable GPU (a virtual machine whose paravirtual GPU does not run
MLX's kernels) can still run everything on its CPU, and a CPU run on a Mac is a useful
comparison. The app's self-test still demands the GPU on a Mac (:mod:`dspark.selftest`).
"""

from __future__ import annotations

import os

from .errors import DsparkError

ENV = "DSPARK_DEVICE"


def use_env_device() -> str | None:
    """Make ``DSPARK_DEVICE`` (``cpu`` or ``gpu``) MLX's default device; returns it, or None when unset."""
    name = os.environ.get(ENV, "").strip().lower()
    if not name:
        return None
    if name not in ("cpu", "gpu"):
        raise DsparkError(f"{ENV} is {name[:20]!r}: it must be cpu or gpu (or unset: MLX's own default)")
    import mlx.core as mx

    mx.set_default_device(mx.cpu if name == "cpu" else mx.gpu)
    return name

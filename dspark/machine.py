"""The machine and software a measurement ran on: the CPU by its model name, the cores, MLX's
version and device, the BLAS. The costs are kept under it (``dspark.costs``), and a benchmark's
record names it (``dspark.bench.report``)."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from pathlib import Path

import mlx.core as mx

from . import blas


@functools.cache
def cpu_name() -> str:
    """The CPU's model name, as each system tells it: Linux in /proc/cpuinfo, macOS (no /proc) in
    sysctl's machdep.cpu.brand_string ("Apple M2 Pro"). Elsewhere, or where neither says, what
    ``platform`` knows, which on a Mac is only "arm" and would key every Apple chip's costs alike."""
    if sys.platform.startswith("linux"):
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
    elif sys.platform == "darwin":
        try:  # by its full path: an app started from the Finder may have no /usr/sbin on PATH
            r = subprocess.run(
                ["/usr/sbin/sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=10
            )
            if r.returncode == 0 and r.stdout.strip():
                return r.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """This machine and software, as the costs (and the benchmark's records) depend on them."""
    return {
        "os": platform.platform(),
        "node": platform.node(),
        "cpu": cpu_name(),
        "cpus": os.cpu_count(),
        "mlx": mx.__version__,
        "device": str(mx.default_device()),
        "blas": blas.describe(),
    }


__all__ = ["cpu_name", "machine"]

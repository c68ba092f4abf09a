"""Fast matrix products on Linux CPUs: the ``mlx[cpu]`` wheel links a slow reference BLAS, and
preloading Debian's OpenBLAS made matrix products 20-40x faster on the project's machines.

A library cannot change what the dynamic linker already loaded, so the command-line entry
points restart themselves once with ``LD_PRELOAD`` set when that library is installed. Set
``DSPARK_NO_OPENBLAS=1`` to keep the wheel's own BLAS.
"""

from __future__ import annotations

import os
import sys

OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"


def ensure_fast_blas(module: str) -> None:
    """Re-execute ``python -m module argv...`` with OpenBLAS preloaded, if that helps here."""
    if not sys.platform.startswith("linux") or os.environ.get("DSPARK_NO_OPENBLAS"):
        return
    preload = os.environ.get("LD_PRELOAD", "")
    if "openblas" in preload or not os.path.exists(OPENBLAS) or "mlx" in sys.modules:
        return
    env = dict(os.environ, LD_PRELOAD=f"{OPENBLAS}:{preload}" if preload else OPENBLAS)
    try:
        os.execve(sys.executable, [sys.executable, "-m", module, *sys.argv[1:]], env)
    except OSError:
        pass  # keep running on the slow BLAS rather than fail

"""Fast matrix products on Linux CPUs: the ``mlx[cpu]`` wheel links a slow reference BLAS, and
Debian's OpenBLAS made matrix products 20-40x faster on the project's machines.

Loading OpenBLAS into the process with ``RTLD_GLOBAL`` before mlx is first imported makes
libmlx's BLAS calls bind to it (as ``LD_PRELOAD`` would, without a restart, and also inside a
frozen bundle). The entry points call :func:`use_fast_blas` first thing. Set
``DSPARK_NO_OPENBLAS=1`` to keep the wheel's own BLAS. Nothing here imports mlx.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3",
    "/usr/lib64/libopenblas.so.0",
)
INSTALL_HINT = "apt-get install libopenblas0-pthread"
#: OpenBLAS's worker threads spin for 2**THREAD_TIMEOUT cycles after each call before they sleep
#: (its default 28: ~0.1 s). Between two calls MLX and Python run, and on the project's 2-core
#: machine a spinning worker took a core from them: plain decoding at two threads 83-99 tok/s at
#: the default against 109-120 at 4, 12 or 18, the demo EAGLE-3 head's rounds +12%, each figure
#: the median of 6 trials, processes alternated (one thread, which never wakes a worker, alike).
#: 4, 12 and 18 measured alike; 18 (~0.1 ms) keeps the longest spin of them. Set only when the
#: environment does not: ``OPENBLAS_THREAD_TIMEOUT`` is OpenBLAS's own setting, read when it loads.
THREAD_TIMEOUT = "18"

_loaded: dict = {"path": None, "lib": None, "late": False, "threads": None}


def _candidates() -> list[str]:
    frozen = getattr(sys, "_MEIPASS", None)
    found = [str(Path(frozen) / "openblas" / "libblas.so.3")] if frozen else []
    return found + list(CANDIDATES)


def use_fast_blas() -> str | None:
    """Load OpenBLAS (Linux only) before mlx is imported; returns its path, or None when it is
    not installed, not wanted, or not needed (macOS uses Accelerate / Metal)."""
    if _loaded["path"] or not sys.platform.startswith("linux") or os.environ.get("DSPARK_NO_OPENBLAS"):
        return _loaded["path"]
    preload = os.environ.get("LD_PRELOAD", "")
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", THREAD_TIMEOUT)  # before OpenBLAS loads and reads it
    _loaded["late"] = "mlx.core" in sys.modules and "openblas" not in preload
    for path in _candidates():
        if os.path.exists(path):
            try:
                _loaded["lib"] = ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
            except OSError:
                continue
            _loaded["path"] = path
            _loaded["threads"] = threads()
            break
    return _loaded["path"]


def threads() -> int | None:
    """OpenBLAS's thread count, when it is loaded."""
    fn = getattr(_loaded["lib"], "openblas_get_num_threads", None)
    return int(fn()) if fn is not None else None


def set_threads(n: int) -> None:
    """Set OpenBLAS's thread count (no-op when it is not loaded)."""
    fn = getattr(_loaded["lib"], "openblas_set_num_threads", None)
    if fn is not None:
        fn(int(n))


def use_threads(n: int | None) -> None:
    """Set OpenBLAS's thread count to ``n`` when given and not already so (None: leave it)."""
    if n and n != threads():
        set_threads(n)


def loaded_path() -> str | None:
    """The OpenBLAS library this process loaded (None: none)."""
    return _loaded["path"]


def default_threads() -> int | None:
    """OpenBLAS's own thread count when it was loaded (what :func:`restore_threads` sets back)."""
    return _loaded["threads"]


def restore_threads() -> None:
    if _loaded["threads"]:
        set_threads(_loaded["threads"])


def is_slow() -> bool:
    """True on Linux when matrix products run on the wheel's reference BLAS."""
    return sys.platform.startswith("linux") and (_loaded["path"] is None or _loaded["late"])


def describe() -> str:
    """Which BLAS this process uses, for benchmark records and the app's status bar."""
    if sys.platform == "darwin":
        return "Accelerate / Metal"
    if not sys.platform.startswith("linux"):
        return "the BLAS linked by the mlx wheel"
    if _loaded["path"] is None:
        return f"reference BLAS of the mlx wheel (slow; {INSTALL_HINT})"
    if _loaded["late"]:
        return f"reference BLAS (OpenBLAS at {_loaded['path']} was loaded after mlx)"
    return f"OpenBLAS ({_loaded['path']}, {threads()} threads)"

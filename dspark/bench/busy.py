"""A bounded CPU load beside a benchmark's trials (``dspark bench --load N``): N processes that
each keep one core busy, started before the costs are measured and ended after the last trial, so
the floor of ``auto`` on a busy machine (a build, a browser) is measured reproducibly rather than
waited for. Each process is plain Python arithmetic: it takes a core, not memory bandwidth, the
way a compiler or a script does. A process whose parent is gone (the benchmark killed, even by
SIGKILL) ends within a few hundredths of a second: the load never outlives its benchmark."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: The most busy processes a benchmark starts: enough for load 16 on a laptop; more is a typo.
MOST = 64

# Each turn of the inner loop is 20-80 ms of arithmetic; between turns the process checks that the
# benchmark that started it is still its parent (its pid is given: read at start, a benchmark
# killed within the child's first milliseconds would already have left it to init).
_SPIN = """\
import os
import sys
parent = int(sys.argv[1])
x = 1
while os.getppid() == parent:
    for _ in range(200_000):
        x = (x * x + 1) % 1_000_003
"""

_running = 0


def running() -> int:
    """How many busy processes run beside this process's trials now (0: none)."""
    return _running


@contextmanager
def load(processes: int) -> Iterator[list[subprocess.Popen]]:
    """``processes`` busy processes for the duration of the ``with`` block (0: none)."""
    global _running
    if not 0 <= processes <= MOST:
        raise ValueError(f"busy processes: {processes} is not between 0 and {MOST}")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SPIN, str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        for _ in range(processes)
    ]
    _running = processes
    try:
        yield procs
    finally:
        _running = 0
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


__all__ = ["MOST", "load", "running"]

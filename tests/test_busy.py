"""dspark.bench.busy: the CPU load ``dspark bench --load N`` runs beside its trials."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from dspark.bench import busy

# a process's CPU time and state are read from /proc; macOS has no /proc
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc (Linux)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie no one has reaped yet has ended too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().split(")")[-1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_load_spins_while_the_block_runs_and_ends_with_it():
    with busy.load(2) as procs:
        assert busy.running() == 2
        deadline = time.monotonic() + 20  # a loaded machine gives each its share late, not never
        while min(_cpu_seconds(p.pid) for p in procs) < 0.1 and time.monotonic() < deadline:
            time.sleep(0.1)
        spent = [_cpu_seconds(p.pid) for p in procs]
        assert all(s >= 0.1 for s in spent), spent  # each one computes, not sleeps
    assert busy.running() == 0
    assert not any(_alive(p.pid) for p in procs)
    with busy.load(0) as none:
        assert none == [] and busy.running() == 0
    with pytest.raises(ValueError):
        with busy.load(busy.MOST + 1):
            pass


def test_the_load_never_outlives_a_killed_benchmark():
    script = (
        "import sys, time\n"
        "from dspark.bench import busy\n"
        "with busy.load(1) as procs:\n"
        "    print(procs[0].pid, flush=True)\n"
        "    time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)  # no finally runs: the child must notice by itself
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)

"""Resource limits on the child processes tests start, as the platform running them honours them.

A ``preexec_fn`` that sets a limit the kernel refuses raises in the child, and the test dies with
"SubprocessError: Exception occurred in preexec_fn" before its command runs; so each limit here is
set only where the kernel takes it, and ``tests/test_portability.py`` fails any other module whose
``preexec_fn`` sets one macOS refuses.

Memory is the limit that differs. Linux caps a child's address space (RLIMIT_AS): an allocation
past it fails inside the child. macOS refuses both RLIMIT_AS and RLIMIT_DATA below what the
process has already mapped: XNU's ``dosetrlimit`` (bsd/kern/kern_resource.c) hands either to the
Mach VM, whose ``vm_map_set_size_limit`` / ``vm_map_set_data_limit`` (osfmk/vm/vm_map.c) return
KERN_FAILURE when the new limit is below the map's current size, and setrlimit fails with EINVAL
(Python's ValueError); ``vm_map_enter`` then measures both against that same whole-map size, so
RLIMIT_DATA is no narrower a cap there than RLIMIT_AS (read in xnu-11417, macOS 15). A
``preexec_fn`` runs in a fork of the test process, which has mapped MLX, Metal and Qt, and the
8 GB address-space limit the tests ask for is refused. What caps memory there instead is
:func:`run`'s watch on the child's resident size, which kills it past its limit; it watches on
every platform, so Linux runs that branch too.
"""

from __future__ import annotations

import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

#: How often :func:`run` reads the child's resident size: a run of a few seconds is read tens of
#: times, and a child filling memory at a few GB/s passes its limit by at most a fraction of it.
POLL_S = 0.1


class OverLimit(AssertionError):
    """A child process used more memory than its test allows (it has been killed)."""


class Ran(subprocess.CompletedProcess):
    """``subprocess.CompletedProcess`` and the largest resident size :func:`run` saw (bytes)."""

    def __init__(self, args, returncode, stdout, stderr, *, peak_resident: int):
        super().__init__(args, returncode, stdout, stderr)
        self.peak_resident = peak_resident


def rlimits(
    *, address_space: int | None = None, file_size: int | None = None, platform: str | None = None
) -> dict[str, int]:
    """The resource limits (names in ``resource``, values in bytes) that cap what was asked on
    ``platform`` (default: the running one): nothing for the address space on macOS."""
    platform = platform or sys.platform
    chosen = {}
    if address_space is not None and platform.startswith("linux"):
        chosen["RLIMIT_AS"] = address_space
    if file_size is not None:  # Linux and XNU both fail a write past it with EFBIG (and SIGXFSZ)
        chosen["RLIMIT_FSIZE"] = file_size
    return chosen


def preexec(
    *, address_space: int | None = None, file_size: int | None = None, platform: str | None = None
) -> Callable[[], None]:
    """A ``preexec_fn`` setting :func:`rlimits` in the child, soft and hard alike so the command
    cannot lift them. ``platform`` chooses the limits, not where they are set: a test can ask on
    Linux for what a Mac would set."""
    chosen = rlimits(address_space=address_space, file_size=file_size, platform=platform)

    def apply() -> None:
        if "RLIMIT_FSIZE" in chosen:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails (EFBIG), as on a full disk
        for name, limit in chosen.items():
            resource.setrlimit(getattr(resource, name), (limit, limit))

    return apply


def resident_bytes(pid: int) -> int | None:
    """A running process's resident set size, from ps(1), whose ``-o rss`` is in KiB in Linux's
    procps and macOS's BSD ps alike; None once it has exited."""
    r = subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True, text=True)
    out = r.stdout.strip()
    return int(out) * 1024 if r.returncode == 0 and out.isdigit() else None


def run(
    cmd: Sequence[str],
    *,
    resident: int,
    timeout: float,
    address_space: int | None = None,
    platform: str | None = None,
    **popen,
) -> Ran:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)`` with the child's
    memory capped: RLIMIT_AS at ``address_space`` where the platform honours it, and everywhere
    its resident size, read every :data:`POLL_S` s; past ``resident`` bytes it is killed and
    :class:`OverLimit` raised, naming the command and the size."""
    if shutil.which("ps") is None:
        raise RuntimeError("ps(1) is not on PATH: the child's resident memory cannot be watched")
    deadline = time.monotonic() + timeout
    peak = 0
    with subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec(address_space=address_space, platform=platform),
        **popen,
    ) as p:
        while True:
            try:  # communicate() again after its timeout loses no output, and drains both pipes meanwhile
                out, err = p.communicate(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                size = resident_bytes(p.pid) or 0
                peak = max(peak, size)
                if size > resident or time.monotonic() > deadline:
                    p.kill()
                    out, err = p.communicate()
                    if size > resident:
                        command = " ".join(map(str, cmd))[-300:]
                        raise OverLimit(
                            f"{command} was killed holding {size / 2**20:,.0f} MB, past its limit of "
                            f"{resident / 2**20:,.0f} MB; it said: {err[-2000:]}"
                        ) from None
                    raise subprocess.TimeoutExpired(cmd, timeout, out, err) from None
    return Ran(cmd, p.returncode, out, err, peak_resident=peak)


__all__ = ["POLL_S", "OverLimit", "Ran", "preexec", "resident_bytes", "rlimits", "run"]

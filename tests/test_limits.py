"""The resource limits tests put on their child processes (``limits.py``): each platform gets only
the limits its kernel takes, and macOS's branch (no memory rlimit, the resident-size watch) runs
here on Linux too, asked for by name."""

from __future__ import annotations

import ast
import os
import resource
import subprocess
import sys
import time

import limits
import pytest

GB = 1 << 30
MB = 1 << 20

#: A child printing the limits it runs under, as the resource module numbers them.
SHOW_LIMITS = (
    "import resource; print((resource.getrlimit(resource.RLIMIT_AS), resource.getrlimit(resource.RLIMIT_FSIZE)))"
)


def _child_limits(**asked) -> tuple:
    out = subprocess.run(
        [sys.executable, "-c", SHOW_LIMITS],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limits.preexec(**asked),
        check=True,
    ).stdout
    return ast.literal_eval(out)


def _hold(megabytes: int, seconds: float) -> list[str]:
    """A child that fills ``megabytes`` of memory it touches (a repeated byte string is written,
    so resident), then holds it."""
    return [
        sys.executable,
        "-c",
        f"import time; b = b'x' * ({megabytes} << 20); print('held', flush=True); time.sleep({seconds})",
    ]


def test_each_platform_gets_only_the_limits_its_kernel_takes(monkeypatch):
    asked = {"address_space": 8 * GB, "file_size": 20_000}
    assert limits.rlimits(**asked, platform="linux") == {"RLIMIT_AS": 8 * GB, "RLIMIT_FSIZE": 20_000}
    assert limits.rlimits(**asked, platform="darwin") == {"RLIMIT_FSIZE": 20_000}
    assert limits.rlimits(file_size=1, platform="darwin") == limits.rlimits(file_size=1, platform="linux")
    assert limits.rlimits(platform="linux") == {}
    monkeypatch.setattr(sys, "platform", "darwin")  # the default is the running platform, read when called
    assert limits.rlimits(**asked) == {"RLIMIT_FSIZE": 20_000}
    monkeypatch.setattr(sys, "platform", "linux")
    assert limits.rlimits(**asked) == {"RLIMIT_AS": 8 * GB, "RLIMIT_FSIZE": 20_000}


def test_a_child_runs_under_exactly_the_limits_chosen_for_the_platform_asked():
    before_as = resource.getrlimit(resource.RLIMIT_AS)
    mac_as, mac_fsize = _child_limits(address_space=8 * GB, file_size=20_000, platform="darwin")
    assert mac_as == before_as and mac_fsize == (20_000, 20_000)  # the address space left as it was
    if sys.platform.startswith("linux"):
        assert _child_limits(address_space=8 * GB, file_size=20_000, platform="linux") == ((8 * GB,) * 2, (20_000,) * 2)
    else:
        # why the helper branches: this kernel refuses the limit Linux takes, in the child, before the command runs
        with pytest.raises(subprocess.SubprocessError, match="preexec_fn"):
            _child_limits(address_space=8 * GB, platform="linux")


def test_a_child_past_its_resident_limit_is_killed_and_named():
    """macOS's only memory cap, run here whatever the platform: no rlimit is set (platform
    darwin), the watch alone stops a child holding 400 MB under a 150 MB limit."""
    start = time.monotonic()
    with pytest.raises(limits.OverLimit, match=r"was killed holding [\d,]+ MB, past its limit of 150 MB"):
        limits.run(_hold(400, 60), resident=150 * MB, timeout=60, platform="darwin")
    assert time.monotonic() - start < 30  # killed, not left to sleep out its minute


def test_a_child_within_its_limits_runs_and_its_peak_is_measured():
    r = limits.run(_hold(200, 1.5), resident=1 * GB, timeout=60, address_space=8 * GB)
    assert r.returncode == 0 and r.stdout == "held\n", r.stderr
    assert 200 * MB <= r.peak_resident < 1 * GB, r.peak_resident  # the watch saw the child's memory


def test_a_large_allocation_is_stopped_by_what_the_platform_honours():
    """2 GB asked under a 1 GB cap: on Linux the address-space limit fails the allocation inside
    the child (MemoryError); on macOS, where no rlimit caps memory, the watch kills the child."""
    cmd = _hold(2048, 30)
    if sys.platform.startswith("linux"):
        r = limits.run(cmd, resident=3 * GB, timeout=60, address_space=1 * GB)
        assert r.returncode == 1 and "MemoryError" in r.stderr and "held" not in r.stdout, r.stderr[-2000:]
    else:
        with pytest.raises(limits.OverLimit):
            limits.run(cmd, resident=1 * GB, timeout=60, address_space=1 * GB)


def test_a_child_past_its_time_is_killed_with_what_it_said():
    with pytest.raises(subprocess.TimeoutExpired) as e:
        limits.run(_hold(1, 60), resident=1 * GB, timeout=1)
    assert e.value.output == "held\n"


def test_the_resident_size_of_a_process_that_has_exited_is_none():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert limits.resident_bytes(p.pid) is None
    assert limits.resident_bytes(os.getpid()) > 10 * MB  # this test process, read through ps

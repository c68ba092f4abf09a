import atexit
import dataclasses
import os
import shutil
import sys
import tempfile

import pytest

# Tests run headless and find the tiny-model helpers beside them.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, os.path.dirname(__file__))

# The app's settings and data folder (app.settings) live in a folder of this test process's own,
# inherited by the subprocesses it starts: tests never read or change the developer's own settings
# and saved runs, and parallel test workers (make test runs two) never share one.
os.environ["DSPARK_STUDIO_HOME"] = tempfile.mkdtemp(prefix="dspark-tests-home-")
atexit.register(shutil.rmtree, os.environ["DSPARK_STUDIO_HOME"], ignore_errors=True)
# The costs `auto` and `dspark bench` divide by (dspark.costs), cached in that folder too: the
# developer's own cache is never read or written, and a target and drafter shape is measured once
# per worker (~8 s each) instead of once per test that runs a benchmark. Tests of measuring
# itself point DSPARK_COSTS_DIR at a folder of their own.
os.environ["DSPARK_COSTS_DIR"] = os.path.join(os.environ["DSPARK_STUDIO_HOME"], "costs")

# OpenBLAS before mlx is first imported, as the entry points do (see dspark.blas).
from dspark.blas import use_fast_blas  # noqa: E402 (after the test folders are set in the environment)

use_fast_blas()

# DSPARK_DEVICE=cpu|gpu (dspark.device): CI on a virtual Mac whose GPU does not run MLX runs the
# suite on the CPU; subprocesses inherit it and apply it when they load a model.
from dspark.device import use_env_device  # noqa: E402 (after the fast BLAS is loaded)

use_env_device()

#: Modules that run longest (test_real_layouts: eleven checkpoint layouts, ~250 s of test time;
#: test_sampling: eight checks of 1,500 generations each, ~210 s), started first: make test's
#: workers take a module at a time in collection order, and the longest one started last would
#: run alone at the end.
LONGEST_FIRST = ("test_real_layouts", "test_sampling")


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.module.__name__ not in LONGEST_FIRST)  # stable: the rest keep their order


_MEASURED: dict = {}


@pytest.fixture(autouse=True)
def priced_clock(monkeypatch):
    """``auto`` judges by the clock (dspark.clock.Clock, as dspark.policy reads it): in tests every
    round and plain step takes what the costs price it at (tiny.PricedClock), so decisions follow
    each test's costs and not this machine's noise; the clock's own tests install a scripted one
    over it."""
    from tiny import PricedClock

    monkeypatch.setattr("dspark.policy.Clock", PricedClock)


@pytest.fixture(scope="module")
def costs_measured_once():
    """``dspark.costs.measure``'s full measurement (every context, thread counts of its own
    choosing: ~8 s on a tiny pair) taken once per worker for each target and drafter shape and
    thread choice, then handed back to every later call, as ``dspark bench`` (which measures
    afresh each run) and the app would get it on an unchanged machine. Everything around it runs
    as it does: ``load_or_measure`` says it is measuring and writes its cache. For tests that
    need some costs, not tests of measuring; a narrower measurement (given contexts or thread
    counts) is always taken."""
    from dspark import costs

    real = costs.measure

    def measure(target, drafter, block_size, *args, **kw):
        if args or kw.keys() - {"key"}:
            return real(target, drafter, block_size, *args, **kw)
        memo = (costs.key_for(target, drafter, block_size), tuple(costs._thread_choices()))
        if memo not in _MEASURED:
            _MEASURED[memo] = real(target, drafter, block_size, **kw)
        return dataclasses.replace(_MEASURED[memo], key=kw.get("key", ""))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(costs, "measure", measure)
        yield

import atexit
import os
import shutil
import sys
import tempfile

# Tests run headless and find the tiny-model helpers beside them.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, os.path.dirname(__file__))

# The app's settings and data folder (app.settings) live in a folder of this test process's own,
# inherited by the subprocesses it starts: tests never read or change the developer's own settings
# and saved runs, and parallel test workers (make test runs two) never share one.
os.environ["DSPARK_STUDIO_HOME"] = tempfile.mkdtemp(prefix="dspark-tests-home-")
atexit.register(shutil.rmtree, os.environ["DSPARK_STUDIO_HOME"], ignore_errors=True)

# OpenBLAS before mlx is first imported, as the entry points do (see dspark.blas).
from dspark.blas import use_fast_blas  # noqa: E402

use_fast_blas()

# DSPARK_DEVICE=cpu|gpu (dspark.device): CI on a virtual Mac whose GPU does not run MLX runs the
# suite on the CPU; subprocesses inherit it and apply it when they load a model.
from dspark.device import use_env_device  # noqa: E402

use_env_device()

#: Modules that run longest (test_real_layouts: eleven checkpoint layouts, ~250 s of test time;
#: test_sampling: eight checks of 1,500 generations each, ~210 s), started first: make test's
#: workers take a module at a time in collection order, and the longest one started last would
#: run alone at the end.
LONGEST_FIRST = ("test_real_layouts", "test_sampling")


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.module.__name__ not in LONGEST_FIRST)  # stable: the rest keep their order

import os
import sys

# Tests run headless and find the tiny-model helpers beside them.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, os.path.dirname(__file__))

# OpenBLAS before mlx is first imported, as the entry points do (see dspark.blas).
from dspark.blas import use_fast_blas  # noqa: E402

use_fast_blas()

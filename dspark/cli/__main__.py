"""``python -m dspark.cli``: the ``dspark`` command, without the console script."""

import sys

from . import main

sys.exit(main())

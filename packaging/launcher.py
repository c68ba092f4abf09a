"""The frozen app's entry point: PyInstaller starts from a script, the wheel from the
``dspark-studio`` console script; both run ``dspark_studio.main.main``."""

import sys

from dspark_studio.main import main

sys.exit(main())

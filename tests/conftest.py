import os
import sys

# Tests run headless and find the tiny-model helpers beside them.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, os.path.dirname(__file__))

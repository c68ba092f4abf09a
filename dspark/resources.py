"""Where the bundled resources are (demo models, prompt sets, icons), in every way the project
runs: a source checkout, an installed wheel, and a frozen bundle.

- ``DSPARK_RESOURCES`` (a folder) wins when set;
- a frozen bundle (PyInstaller) carries them as ``resources/`` beside its modules;
- an installed wheel carries them as the package ``dspark_resources`` (``pyproject.toml``
  maps the checkout's ``resources/`` folder to that name);
- a source checkout has them next to the ``dspark`` package.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def root() -> Path:
    """The resources folder (it may be missing in a stripped-down install)."""
    env = os.environ.get("DSPARK_RESOURCES")
    if env:
        return Path(env)
    frozen = getattr(sys, "_MEIPASS", None)
    if frozen:
        return Path(frozen) / "resources"
    checkout = Path(__file__).resolve().parent.parent / "resources"
    if checkout.is_dir():
        return checkout
    spec = importlib.util.find_spec("dspark_resources")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return checkout


def path(*parts: str) -> Path:
    """A path inside the resources folder, e.g. ``path("demo", "target")``."""
    return root().joinpath(*parts)


def demo_dir() -> Path:
    return path("demo")


#: The bundled demo drafters, one of each kind the demo trains, in the order the app and the
#: benchmark show them: DSpark, DFlash-style, EAGLE-3-style, Gemma-4-assistant-style.
DEMO_DRAFTERS = ("dspark", "dflash", "eagle3", "assistant")


def demo_model(name: str) -> Path | None:
    """``resources/demo/<name>`` ("target" or one of ``DEMO_DRAFTERS``) if it holds a model."""
    p = path("demo", name)
    return p if (p / "config.json").is_file() else None


def demo_drafters() -> list[str]:
    """The bundled demo drafters that are there (a checkout may have only some built)."""
    return [str(p) for p in map(demo_model, DEMO_DRAFTERS) if p]


def prompts_dir() -> Path:
    return path("prompts")

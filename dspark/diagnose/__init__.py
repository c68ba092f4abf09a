"""``dspark diagnose``: why a drafter is rejected, named.

It runs a few prompts, compares what it measured with what the drafter should reach (its
profile) and says what lowers acceptance, each cause a :class:`Finding` with a stable code
(``findings.CODES``). Layout: ``findings`` (the result, no MLX), ``style`` (chat template and
thinking of a run or of training data), ``acceptance`` (the generation loop and the acceptance
figures), ``checks`` (one pure function per code, thresholds explained), ``run``
(:func:`diagnose`, :func:`record`). The command is :mod:`dspark.cli.diagnose`. What a drafter
should reach, recorded and read, is ``dspark.drafter_profile``: loading and training read and
write it too.

Importing this package loads no MLX: ``diagnose`` and ``record`` load their module when first
used.
"""

from __future__ import annotations

import importlib

from .findings import CODES, SEVERITIES, Diagnosis, Finding

_LAZY = {"diagnose": "run", "record": "run"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CODES", "SEVERITIES", "Diagnosis", "Finding", "diagnose", "record"]

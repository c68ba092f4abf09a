"""The reading conventions of published drafters, and the flag that chooses one.

Three things decide how a block drafter's weights are read, and checkpoints of one format do not
always agree on them (each is a real source of silently low acceptance, see the formats' notes):

- ``anchor_predicts``: whether block slot 0, the anchor, predicts the first draft (DSpark,
  DeepSpec, speculators' ``sample_from_anchor``) or only feeds the block (z-lab DFlash). Read
  the wrong way, every draft is one position off: a round keeps about 1.1 tokens.
- ``embed_scale``: what the block's embedding is multiplied by: ``"target"`` (the target's own
  scale, sqrt(hidden) for Gemma) or a number (1: the table unscaled, as speculators trains).
- ``window_from_anchor``: sliding-window draft layers take one window ``[anchor - W, anchor)``
  for every slot (speculators) or each slot its own (z-lab).

A published drafter's ``config.json`` may set any of them under dspark's extension key,
``"dspark": {"conventions": {"anchor_predicts": true}}``; the loaders apply it over what the
format implies (:func:`apply`). ``dspark diagnose`` tries the other values when acceptance is low
and names this flag when one of them is much better. The native format has one reading only.
"""

from __future__ import annotations

import dataclasses
import json
import math

from ..errors import DsparkError
from .base import EXTENSION, CheckpointDrafter, Spec

#: Where the flag lives in a published drafter's config.json: ``config[EXTENSION][KEY]``.
KEY = "conventions"
NAMES = ("anchor_predicts", "embed_scale", "window_from_anchor")


def read(config: dict, where) -> dict:
    """The conventions ``config.json`` sets (checked: known names, values of the right kind)."""
    ext = config.get(EXTENSION)
    chosen = ext.get(KEY) if isinstance(ext, dict) else None
    if chosen is None:
        return {}
    if not isinstance(chosen, dict):
        raise DsparkError(f'{where}: "{EXTENSION}"."{KEY}" must be an object, not {json.dumps(chosen)[:40]}')
    for name, value in chosen.items():
        if name not in NAMES:
            raise DsparkError(f"{where}: unknown drafter convention {name!r} (known: {', '.join(NAMES)})")
        if name == "embed_scale":
            ok = value == "target" or (type(value) in (int, float) and math.isfinite(value) and 0 < value <= 1e4)
        else:
            ok = isinstance(value, bool)
        if not ok:
            want = '"target" or a number in (0, 10000]' if name == "embed_scale" else "true or false"
            raise DsparkError(f"{where}: drafter convention {name} is {json.dumps(value)[:40]}, expected {want}")
    return dict(chosen)


def current(spec: Spec) -> dict:
    """The conventions ``spec`` reads its weights under."""
    return {
        "anchor_predicts": spec.layout.anchor_predicts,
        "embed_scale": "target" if spec.embed_scale is None else spec.embed_scale,
        "window_from_anchor": spec.layout.window_from_anchor,
    }


def apply(spec: Spec, chosen: dict) -> Spec:
    """``spec`` read under the ``chosen`` conventions (the others as they were). The block keeps its
    slots: with the anchor predicting it drafts one token more."""
    if not chosen:
        return spec
    layout, block_size = spec.layout, spec.block_size
    if "anchor_predicts" in chosen and chosen["anchor_predicts"] != layout.anchor_predicts:
        slots = block_size + (0 if layout.anchor_predicts else 1)
        block_size = slots - (0 if chosen["anchor_predicts"] else 1)
        if block_size < 1:
            raise DsparkError(f"a block of {slots} slot cannot draft with the anchor slot only feeding it")
        layout = dataclasses.replace(layout, anchor_predicts=chosen["anchor_predicts"])
    if "window_from_anchor" in chosen:
        layout = dataclasses.replace(layout, window_from_anchor=chosen["window_from_anchor"])
    scale = spec.embed_scale
    if "embed_scale" in chosen:
        scale = None if chosen["embed_scale"] == "target" else float(chosen["embed_scale"])
    return dataclasses.replace(spec, layout=layout, block_size=block_size, embed_scale=scale)


def alternatives(spec: Spec, hidden: int) -> list[tuple[str, object]]:
    """The other readings worth trying, as (name, value): the anchor slot flipped, the other
    embedding scale (the target's sqrt(``hidden``) or none), and, with sliding-window layers, the
    other window rule. A scale within 5% of the target's counts as the target's."""
    now = current(spec)
    out: list[tuple[str, object]] = [("anchor_predicts", not now["anchor_predicts"])]
    scale = now["embed_scale"]
    as_target = scale == "target" or abs(scale - math.sqrt(hidden)) <= 0.05 * math.sqrt(hidden)
    out.append(("embed_scale", 1.0 if as_target else "target"))
    if any(spec.layout.windows):
        out.append(("window_from_anchor", not now["window_from_anchor"]))
    return out


def variant(drafter: CheckpointDrafter, name: str, value) -> CheckpointDrafter:
    """``drafter`` read under one other convention, sharing its weights (nothing is copied)."""
    other = CheckpointDrafter(apply(drafter.spec, {name: value}), drafter.net, drafter.config)
    other.draft_to_target, other.calibration = drafter.draft_to_target, drafter.calibration
    return other


def flag(name: str, value) -> str:
    """The config.json entry that selects ``name = value``, as a person writes it."""
    return json.dumps({EXTENSION: {KEY: {name: value}}})


def describe(name: str, value) -> str:
    """A convention's value in words."""
    if name == "anchor_predicts":
        return "the anchor slot predicting the first draft" if value else "the anchor slot only feeding the block"
    if name == "embed_scale":
        return (
            "the block embedding scaled as the target scales its own"
            if value == "target"
            else f"the block embedding scaled by {value:g}"
        )
    return "one sliding window before the anchor for every slot" if value else "a sliding window per block slot"


__all__ = ["KEY", "NAMES", "alternatives", "apply", "current", "describe", "flag", "read", "variant"]

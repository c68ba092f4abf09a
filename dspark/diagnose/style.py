"""The prompt style of a run or of training data: in the target's chat template or not, with
thinking on or not. A drafter learns the text it is trained on, template tokens included, so a
style it never saw costs acceptance.

The template's *scaffold* is what it puts around a user message: the ids before the message
(``prefix``: BOS, a system turn with the thinking switch, the user turn's opening) and after it
(``suffix``: the turn's end and the generation prompt). They are found by rendering two different
probe messages and keeping what the two id lists share at each end, so they do not depend on how
a message's own text tokenizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..errors import DsparkError

#: A scaffold shorter than this (ids) could occur in plain text by chance: not used as evidence.
MIN_SCAFFOLD = 3
#: Training data counts as templated (or as thinking) when this share of its sequences holds the scaffold.
MIN_SHARE = 0.1
PROBES = ("alpha beta", "Zulu 42?")  # differing first and last characters: no message text in the scaffold


class Scaffold(NamedTuple):
    prefix: tuple[int, ...]
    suffix: tuple[int, ...]


def scaffold(target, thinking: bool) -> Scaffold | None:
    """The template's scaffold with thinking on or off; None without a template, or when it fails."""
    if not target.has_chat_template:
        return None
    try:
        a, b = (target.encode_chat(p, "", {"enable_thinking": thinking}) for p in PROBES)
    except DsparkError:
        return None
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    m = 0
    while m < min(len(a), len(b)) - n and a[-1 - m] == b[-1 - m]:
        m += 1
    return Scaffold(tuple(a[:n]), tuple(a[len(a) - m :]))


def thinking_switch(target) -> bool:
    """Whether the target's template renders differently with thinking on (Gemma-4's adds a
    system turn holding ``<|think|>``); False without a template."""
    on, off = scaffold(target, True), scaffold(target, False)
    return on is not None and off is not None and on != off


def run_style(target, config, prompts: Sequence) -> tuple[bool | None, bool | None]:
    """(templated, thinking) of a generation with ``config`` on ``prompts``: templated when text
    prompts go through the target's chat template (None: the target has none); thinking as the
    template options say, None where it makes no difference."""
    if not target.has_chat_template:
        return None, None
    templated = bool(config.chat_template) and any(isinstance(p, str) for p in prompts)
    if not templated or not thinking_switch(target):
        return templated, None
    return True, bool(config.template_options().get("enable_thinking"))


def _share(rows: Sequence[Sequence[int]], pattern: Sequence[int]) -> float:
    """Share of ``rows`` that hold ``pattern`` as a contiguous run of ids."""
    if len(pattern) < MIN_SCAFFOLD or not rows:
        return 0.0
    p = np.asarray(pattern, np.int64)
    hits = 0
    for row in rows:
        r = np.asarray(row, np.int64)
        starts = np.flatnonzero(r[: max(len(r) - len(p) + 1, 0)] == p[0])
        hits += any(np.array_equal(r[s : s + len(p)], p) for s in starts)
    return hits / len(rows)


def data_style(target, rows: Sequence[Sequence[int]]) -> tuple[bool | None, bool | None]:
    """(templated, thinking) of training data (token-id rows): templated when at least
    ``MIN_SHARE`` of the rows hold one of the template's scaffolds (a leading BOS left out);
    thinking when they hold what thinking adds. (None, None) without a template."""
    on, off = scaffold(target, True), scaffold(target, False)
    if off is None:
        return None, None
    parts = {off.prefix[1:], off.suffix} | ({on.prefix[1:], on.suffix} if on else set())
    if max(_share(rows, p) for p in parts) < MIN_SHARE:
        return False, (False if on is not None and on != off else None)
    if on is None or on == off:
        return True, None
    if on.prefix != off.prefix:  # thinking opens with its own turn (Gemma-4)
        return True, _share(rows, on.prefix[1:]) >= MIN_SHARE
    if len(on.suffix) > len(off.suffix):
        return True, _share(rows, on.suffix) >= MIN_SHARE
    return True, _share(rows, off.suffix) < MIN_SHARE <= _share(rows, on.suffix)


__all__ = ["Scaffold", "data_style", "run_style", "scaffold", "thinking_switch"]

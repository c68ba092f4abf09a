"""Rendering a model directory's chat template within a budget of time and size.

A chat template is a program from the checkpoint. Jinja's sandbox (which transformers renders
it in) stops it from reaching Python's internals, but not from running ``{% for %}`` loops of
10^5 x 10^5 iterations or building a string of 10^10 characters. So a rendering here has:

- a time budget: a trace function on the rendering thread ends it when the budget is spent
  (every loop iteration of a compiled template is a line of Python, so none escapes it);
- a size budget: the sandbox's arithmetic (``*``, ``**``, ``+``, ``%``), its calls and its filters
  check the size of what they would make *before* making it, and refuse past the budget (a
  multiple of the prompt's own size), so no single step can allocate gigabytes.

``render`` applies both to whatever renders the template (transformers' ``apply_chat_template``,
or one of mlx-lm's Python templates); :class:`BoundedSandbox` is the environment transformers
compiles templates in once this module is imported.
"""

from __future__ import annotations

import functools
import math
import re
import sys
import threading
import time
from collections.abc import Callable

from .errors import DsparkError

#: Seconds one rendering may take (a real template renders in milliseconds).
TIME_BUDGET_S = 10.0
#: Characters a rendering may produce or any step of it may build: this many plus four times the
#: text of the messages.
BASE_CHARS = 1 << 20
#: An integer argument of a call or filter above this is a size, and a crafted one (widths, counts).
MAX_INT_ARGUMENT = 1 << 20
#: Bits of an integer ``**`` may produce.
MAX_POWER_BITS = 1 << 16
_WIDE = re.compile(r"\d{8,}")  # a width or precision of 10^7 and more in a format string
_budget = threading.local()


class TemplateBudgetError(Exception):
    """A rendering went past its budget (raised inside the template; ``render`` words it)."""


def _limit() -> int:
    return getattr(_budget, "chars", 64 * BASE_CHARS)


def _refuse(what: str) -> None:
    raise TemplateBudgetError(f"it would build {what}, more than the {_limit():,} characters allowed")


def _length(x) -> int | None:
    return len(x) if isinstance(x, (str, list, tuple)) else None


def check_binop(op: str, left, right) -> None:
    if op == "*":
        for seq, n in ((left, right), (right, left)):
            if _length(seq) is not None and isinstance(n, int) and _length(seq) * max(n, 0) > _limit():
                _refuse(f"a sequence of {_length(seq) * n:,} items")
    elif op == "+":
        if _length(left) is not None and _length(right) is not None and _length(left) + _length(right) > _limit():
            _refuse(f"a sequence of {_length(left) + _length(right):,} items")
    elif op == "**":
        if (
            isinstance(left, int)
            and isinstance(right, int)
            and abs(left) > 1
            and right > 0
            and right * math.log2(abs(left)) > MAX_POWER_BITS
        ):
            _refuse(f"an integer of about {right * math.log2(abs(left)):,.0f} bits")
    elif op == "%" and isinstance(left, str) and _WIDE.search(left):
        _refuse("a formatted text with a width of ten million or more")


def check_arguments(func, args, kwargs) -> None:
    """Before a call: no size argument past ``MAX_INT_ARGUMENT``, no format string asking for a
    huge width, no ``replace`` that would grow past the budget."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_INT_ARGUMENT:
            _refuse(f"something sized by the argument {a:,}")
    target = getattr(getattr(func, "__wrapped__", func), "__self__", None)
    name = getattr(getattr(func, "__wrapped__", func), "__name__", "")
    if isinstance(target, str):
        if name in ("format", "format_map") and _WIDE.search(target):
            _refuse("a formatted text with a width of ten million or more")
        if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
            _check_replace(target, args[0], args[1])


def _check_replace(text: str, old: str, new: str) -> None:
    grown = len(text) + (text.count(old) if old else len(text) + 1) * (len(new) - len(old))
    if grown > _limit():
        _refuse(f"a text of {grown:,} characters")


def check_result(result) -> None:
    if _length(result) is not None and _length(result) > _limit():
        _refuse(f"a sequence of {_length(result):,} items")


def _bounded_filter(name: str, f: Callable) -> Callable:
    """``f`` (a Jinja filter: the value first, after the context or environment when it asks for
    one) with its size arguments and its result held to the budget."""
    skip = 2 if getattr(f, "jinja_pass_arg", None) is not None else 1

    @functools.wraps(f)
    def bounded(*args, **kwargs):
        check_arguments(f, args[skip:], kwargs)
        if name == "replace" and len(args) >= skip + 2 and all(isinstance(a, str) for a in args[skip - 1 : skip + 2]):
            _check_replace(*args[skip - 1 : skip + 2])
        result = f(*args, **kwargs)
        check_result(result)
        return result

    return bounded


def _sandbox_class():
    from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: PLC0415 (optional: jinja2 comes with transformers)

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        """transformers' sandbox with a size budget on every step that can build something large."""

        intercepted_binops = frozenset({"*", "**", "+", "%"})

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.filters = {k: _bounded_filter(k, f) for k, f in self.filters.items()}

        def call_binop(self, context, operator, left, right):
            check_binop(operator, left, right)
            result = super().call_binop(context, operator, left, right)
            check_result(result)
            return result

        def call(__self, __context, __obj, *args, **kwargs):  # jinja's own signature
            check_arguments(__obj, args, kwargs)
            result = super().call(__context, __obj, *args, **kwargs)
            check_result(result)
            return result

    return BoundedSandbox


def install() -> bool:
    """Make transformers compile chat templates in :class:`BoundedSandbox` (and forget templates it
    compiled before); False when this transformers has no such hook (the time budget still holds)."""
    try:
        from transformers.utils import chat_template_utils as ctu  # noqa: PLC0415 (optional: transformers)
    except ImportError:
        return False
    if not hasattr(ctu, "ImmutableSandboxedEnvironment"):
        return False
    if getattr(ctu.ImmutableSandboxedEnvironment, "__name__", "") != "BoundedSandbox":
        ctu.ImmutableSandboxedEnvironment = _sandbox_class()
        cached = getattr(ctu, "_cached_compile_jinja_template", None)
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()
    return True


def render(fn: Callable[[], str], text_chars: int, seconds: float = TIME_BUDGET_S) -> str:
    """``fn()`` (a call that renders a chat template) within the time budget and a size budget of
    ``BASE_CHARS + 4 * text_chars``; a DsparkError saying which budget it went past."""
    install()
    _budget.chars = BASE_CHARS + 4 * text_chars
    deadline = time.monotonic() + seconds

    def on_line(frame, event, arg):
        if time.monotonic() > deadline:
            raise TemplateBudgetError(f"it ran past its {seconds:g} s budget")
        return on_line

    previous = sys.gettrace()
    sys.settrace(on_line)
    try:
        rendered = fn()
    except TemplateBudgetError as e:
        raise DsparkError(
            f"the target's chat template was stopped: {e} (a template from the model directory "
            f"that loops or grows without end)"
        ) from None
    finally:
        sys.settrace(previous)
        del _budget.chars
    if not isinstance(rendered, str):
        raise DsparkError(f"the target's chat template rendered {type(rendered).__name__}, not text")
    if len(rendered) > BASE_CHARS + 4 * text_chars:
        raise DsparkError(
            f"the target's chat template made {len(rendered):,} characters of a "
            f"{text_chars:,}-character prompt: more than its budget"
        )
    return rendered


__all__ = ["BASE_CHARS", "MAX_INT_ARGUMENT", "TIME_BUDGET_S", "TemplateBudgetError", "install", "render"]

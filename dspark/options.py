"""Settings dataclasses are the one source of every knob (nanoGPT's config-as-data).

A field declared with :func:`option` carries its help text, its command-line flag and its
legal range. From that one declaration:

- :func:`add_options` builds the argparse arguments (defaults and help read from the field);
- :func:`from_args` turns the parsed namespace back into the dataclass;
- :func:`check_options` validates a value before anything is allocated (one clear sentence);
- :func:`describe` lists the fields for a settings form (the app builds its form from it).

A new field therefore appears in the CLI, the app and the validation at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import DsparkError


def option(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    choices: Sequence[str] | None = None,
    lo: float | None = None,
    hi: float | None = None,
    label: str | None = None,
    form: bool = True,
    none: str | None = None,
    step: float | None = None,
    suggest: Sequence[str] | None = None,
    least: float | None = None,
):
    """A dataclass field with its help, ``--flag`` (default: from the name), legal values
    (``choices`` or the closed range ``lo``..``hi``), a form ``label`` and whether the app's
    form shows it. ``none`` names what a None value means (shown by forms and help);
    ``suggest`` lists common values of a free-text field (a form offers them); ``least`` is the
    smallest legal value above 0, for a field whose 0 means something of its own (a greedy
    temperature) and whose values just above 0 mean nothing a computer can compute."""
    meta = dict(
        help=help,
        flag=flag,
        choices=tuple(choices) if choices else None,
        lo=lo,
        hi=hi,
        label=label,
        form=form,
        none=none,
        step=step,
        suggest=tuple(suggest) if suggest else None,
        least=least,
    )
    return field(default=default, metadata={"option": meta})


@dataclass(frozen=True, kw_only=True)
class OptionSpec:
    """One field of a settings dataclass, as a form or a parser sees it."""

    name: str
    kind: type  # int, float, str, bool or tuple (of ints)
    optional: bool  # None is allowed
    default: Any
    help: str
    flag: str
    choices: tuple[str, ...] | None
    lo: float | None
    hi: float | None
    label: str
    form: bool
    none: str | None
    step: float | None
    suggest: tuple[str, ...] | None = None
    least: float | None = None  # the smallest legal value above 0 (option's ``least``)


def _kind(hint) -> tuple[type, bool]:
    """(base type, None allowed) of a field annotation such as ``int | None``."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _kind(inner[0])[0], True
    if typing.get_origin(hint) is tuple:
        return tuple, False
    return hint, False


@functools.cache
def describe(cls) -> tuple[OptionSpec, ...]:
    """The option fields of ``cls`` in declaration order (read once per class: every generation
    checks its settings, and reading the type hints costs about a millisecond)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        meta = f.metadata.get("option")
        if meta is None:
            continue
        kind, optional = _kind(hints[f.name])
        flag = meta["flag"] or "--" + f.name.replace("_", "-")
        if kind is bool and f.default is True and not meta["flag"]:
            flag = "--no-" + f.name.replace("_", "-")
        label = meta["label"] or f.name.replace("_", " ").capitalize()
        out.append(
            OptionSpec(
                name=f.name,
                kind=kind,
                optional=optional,
                default=f.default,
                help=meta["help"],
                flag=flag,
                choices=meta["choices"],
                lo=meta["lo"],
                hi=meta["hi"],
                label=label,
                form=meta["form"],
                none=meta["none"],
                step=meta["step"],
                suggest=meta.get("suggest"),
                least=meta.get("least"),
            )
        )
    return tuple(out)


class ShowDefaults(argparse.HelpFormatter):
    """``--help`` names the default of every option that has one (a value, not a switch), unless
    its help already says what happens without it."""

    SWITCHES = (
        argparse._StoreTrueAction,
        argparse._StoreFalseAction,
        argparse._StoreConstAction,
        argparse._CountAction,
        argparse._HelpAction,
        argparse._VersionAction,
    )

    def _get_help_string(self, action):
        text = action.help or ""
        if (
            action.option_strings
            and "default" not in text
            and not isinstance(action, self.SWITCHES)
            and action.default not in (None, argparse.SUPPRESS)
        ):
            text += " (default: %(default)s)"
        return text


class KeepEpilogLines(ShowDefaults, argparse.RawDescriptionHelpFormatter):
    """:class:`ShowDefaults` that prints the description and epilog as written (line by line)."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors, like every other dspark error (exit status 2), whose help
    shows the options' defaults (:class:`ShowDefaults`)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", ShowDefaults)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_options(parser, cls, only: Sequence[str] | None = None, skip: Sequence[str] = ()) -> None:
    """Add an argument per option field of ``cls`` to ``parser`` (or an argument group)."""
    for option in describe(cls):
        if (only is not None and option.name not in only) or option.name in skip:
            continue
        help_text = option.help
        if option.kind is bool:
            action = "store_false" if option.default else "store_true"
            if option.default:  # the flag turns the field off: its help describes what is on without it
                help_text = f"turn off (on by default): {help_text}"
            parser.add_argument(option.flag, dest=option.name, action=action, default=option.default, help=help_text)
            continue
        if option.default not in (None, ()):
            shown = ",".join(map(str, option.default)) if option.kind is tuple else option.default
            help_text += f" (default: {shown})"
        elif option.none:
            help_text += f" (default: {option.none})"
        kind = _int_list if option.kind is tuple else option.kind
        parser.add_argument(
            option.flag,
            dest=option.name,
            type=kind,
            choices=option.choices,
            default=option.default,
            help=help_text,
            metavar=None if option.choices else option.name.upper(),
        )


def from_args(cls, namespace, **overrides):
    """``cls`` built from the option fields found in an argparse namespace."""
    values = {s.name: getattr(namespace, s.name) for s in describe(cls) if hasattr(namespace, s.name)}
    return cls(**{**values, **overrides})


def check_range(flag: str, value: float | None, lo: float, hi: float | None = None) -> None:
    """One line for a command's own numeric option (one that is no settings field) outside
    ``lo``..``hi``; None (not given) passes."""
    if value is None:
        return
    if not math.isfinite(value) or value < lo or (hi is not None and value > hi):
        raise DsparkError(
            f"{flag} must be "
            + (f"between {lo:g} and {hi:g}" if hi is not None else f"at least {lo:g}")
            + f", not {value:g}"
        )


def check_options(value) -> None:
    """Raise a DsparkError naming the first option of ``value`` outside its legal values."""
    for option in describe(type(value)):
        v = getattr(value, option.name)
        name = option.flag.lstrip("-") if option.kind is not bool else option.name
        if v is None:
            if not option.optional:
                raise DsparkError(f"{name} must be set")
            continue
        if option.kind in (int, float):
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or (option.kind is int and not isinstance(v, int))
            ):
                raise DsparkError(f"{name} must be {'an integer' if option.kind is int else 'a number'}, not {v!r}")
            if not math.isfinite(v):
                raise DsparkError(f"{name} must be a finite number, not {v}")
            if (option.lo is not None and v < option.lo) or (option.hi is not None and v > option.hi):
                raise DsparkError(f"{name} must be {_range(option)}, not {v:g}")
            if option.least is not None and 0 < v < option.least:
                raise DsparkError(
                    f"{name} must be 0 or at least {option.least:g}, not {v:g}: a smaller one is 0 in all "
                    f"but name, and what is divided by it leaves the range of a float"
                )
        elif option.kind is tuple:
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                raise DsparkError(f"{name} must be integers, not {list(v)!r}")
        elif option.kind is bool:
            if not isinstance(v, bool):
                raise DsparkError(f"{name} must be true or false, not {v!r}")
        elif option.choices is not None and v not in option.choices:
            raise DsparkError(f"{name} must be one of {', '.join(option.choices)}, not {v!r}")


def _range(option: OptionSpec) -> str:
    if option.lo is not None and option.hi is not None:
        return f"between {option.lo:g} and {option.hi:g}"
    return f"at least {option.lo:g}" if option.lo is not None else f"at most {option.hi:g}"


def replace(value, **changes):
    """``dataclasses.replace`` that validates the result."""
    out = dataclasses.replace(value, **changes)
    check_options(out)
    return out


def coerce(cls, raw: dict, on_error: Callable[[str, Any], None] | None = None):
    """``cls`` from loosely typed values (strings from a settings file): each field that
    cannot be read or is out of range keeps its default, and ``on_error(name, value)`` is told."""
    good = {}
    for option in describe(cls):
        if option.name not in raw:
            continue
        v = raw[option.name]
        try:
            if v in (None, "") and option.optional:
                v = None
            elif option.kind is bool:
                v = v if isinstance(v, bool) else str(v).strip().lower() in ("1", "true", "yes", "on")
            elif option.kind is tuple:
                v = tuple(v) if isinstance(v, (list, tuple)) else _int_list(str(v))
            else:
                v = option.kind(v)
            check_options(dataclasses.replace(cls(**good), **{option.name: v}))
            good[option.name] = v
        except (ValueError, TypeError, DsparkError, argparse.ArgumentTypeError):
            if on_error is not None:
                on_error(option.name, raw[option.name])
    return cls(**good)

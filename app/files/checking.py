"""Checking a file the app opens as a whole, before anything of it is drawn or scheduled: the rules
(a number in range, a record of fields, a list of at most so many), the event schema's records, and
a saved run or comparison (a ``dspark bench`` summary's own rules stand with its reader,
``app.files.benchmark``). These files are meant to be shared, so a
stranger's file is held to what the app itself writes: every field of its type, every number
finite and in range, counts and sizes within what a replay can draw, times that only move
forward. What fails is one sentence naming the file, the place and the field (DsparkError).

Plain Python: no Qt, no MLX (``app.files.benchmark`` reads with it, and stays Qt-free).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable

from dspark.errors import DsparkError
from dspark.events import CommittedToken, RoundEvent, Source, Summary
from dspark.lossless import Difference
from dspark.validate import LIMITS

#: Limits of a saved run or comparison.
MAX_RUNS = 1_000
MAX_ROUNDS = 100_000  # rounds in one file: a replay schedules a message for each
MAX_TOKENS = 1_000_000  # tokens of one run (GenerationConfig.max_tokens' limit)
MAX_PROMPTS = 10_000
MAX_TEXT = 4 * 2**20  # characters of a prompt or a run's text
MAX_PIECE = 1_000  # characters of one token's text
MAX_SECONDS = 7 * 86_400.0  # a recorded time: a week
MAX_RATE = 1e7  # tokens per second
MAX_BLOCK = LIMITS["block_size"][1] + 1  # drafted or committed tokens of one round
MAX_TOKEN_ID = LIMITS["vocab_size"][1]
MAX_TOP = 64  # the target's best tokens kept per verified draft (the inspector keeps 5)
MAX_POSITION = 2 * MAX_TOKENS  # tokens before a round's anchor: the prompt's and the output's
#: Limits of a benchmark summary.
METHODS = ("speculative", "plain", "baseline")  # "baseline": plain decoding's name in files of 0.1.0

Rule = Callable[[object], "str | None"]


# --------------------------------------------------------------------------- rules: None when a value is good
def integer(lo: int, hi: int) -> Rule:
    return lambda v: None if type(v) is int and lo <= v <= hi else f"must be a whole number from {lo:,} to {hi:,}"


def number(lo: float, hi: float, nan: bool = False) -> Rule:
    def rule(v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if nan and isinstance(v, float) and math.isnan(v):
                return None
            if math.isfinite(v) and lo <= v <= hi:
                return None
        return f"must be a finite number from {lo:g} to {hi:g}"

    return rule


def text(n: int) -> Rule:
    return lambda v: None if isinstance(v, str) and len(v) <= n else f"must be a text of at most {n:,} characters"


def one_of(*choices) -> Rule:
    return lambda v: None if v in choices else f"must be one of {', '.join(map(repr, choices))}"


def boolean(v) -> str | None:
    return None if isinstance(v, bool) else "must be true or false"


def optional(rule: Rule) -> Rule:
    return lambda v: None if v is None else rule(v)


def items(rule: Rule, n: int) -> Rule:
    def check(v):
        if not isinstance(v, list) or len(v) > n:
            return f"must be a list of at most {n:,} entries"
        for i, x in enumerate(v):
            bad = rule(x)
            if bad:
                return f"entry {i + 1} {bad}"
        return None

    return check


def record(
    fields: dict[str, Rule], required: tuple[str, ...] = (), strict: bool = True, others: Rule | None = None
) -> Rule:
    """An object with these keys (those in ``required`` present), each by its rule. Any other key:
    refused when ``strict`` (an event's fields are its dataclass's), else checked by ``others``
    (a figure a newer dspark adds), else left unread."""

    def check(v):
        if not isinstance(v, dict):
            return "must be an object"
        unknown = [k for k in v if k not in fields]
        if unknown and strict:
            return f"has an unknown field {str(unknown[0])[:40]!r}"
        for k in required:
            if k not in v:
                return f"has no {k}"
        for k, x in v.items():
            rule = fields.get(k, others)
            bad = rule(x) if rule is not None else None
            if bad:
                return f"{str(k)[:40]} {bad}"
        return None

    return check


def flat_object(n: int) -> Rule:
    """An object of at most ``n`` plain values (a config as the app saves it)."""
    value = lambda x: (
        None
        if x is None or isinstance(x, bool)
        else (text(10_000)(x) if isinstance(x, str) else number(-1e15, 1e15)(x))
    )

    def check(v):
        if not isinstance(v, dict) or len(v) > n or not all(isinstance(k, str) and len(k) <= 100 for k in v):
            return f"must be an object of at most {n} named values"
        for k, x in v.items():
            bad = value(x)
            if bad:
                return f"{k} {bad}"
        return None

    return check


def by_annotation(hint) -> Rule:
    """A rule from a dataclass field's type, for the fields no explicit rule names: a field the
    event schema gains is still checked (kind, finiteness, size) and a file with it still opens."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return optional(by_annotation(inner[0])) if len(inner) == 1 else (lambda v: "has an unreadable type")
    if typing.get_origin(hint) is tuple:
        return items(by_annotation(args[0]), MAX_TOKENS)
    return {
        bool: boolean,
        int: integer(-(2**53), 2**53),
        float: number(-1e15, 1e15),
        str: text(MAX_TEXT),
        dict: flat_object(100),
    }.get(hint, lambda v: f"has a type no rule reads ({hint})")


def from_dataclass(cls, explicit: dict[str, Rule], kind: str | None = None) -> Rule:
    """The rule of ``cls``' dict form (``dataclasses.asdict``, with a ``kind`` when given): exactly
    its fields, those without a default present, each by its explicit rule or by its type."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: explicit.get(f.name) or by_annotation(hints[f.name]) for f in dataclasses.fields(cls)}
    required = tuple(
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    return record({**({"kind": one_of(kind)} if kind else {}), **fields}, required)


# --------------------------------------------------------------------------- a saved run or comparison
TOKEN = integer(0, MAX_TOKEN_ID)
SECONDS = number(0.0, MAX_SECONDS)
PROB = number(0.0, 1.0, nan=True)  # NaN: not computed (a run without a screen)
COUNT = integer(0, MAX_TOKENS)


def top_pair(v) -> str | None:
    """One of the target's best tokens as the inspector saves it: [token id, probability]."""
    if isinstance(v, list) and len(v) == 2 and TOKEN(v[0]) is None and number(0.0, 1.0)(v[1]) is None:
        return None
    return f"must be a [token, probability] pair (a token id up to {MAX_TOKEN_ID:,}, a probability from 0 to 1)"


COMMITTED = from_dataclass(
    CommittedToken,
    {
        "id": TOKEN,
        "text": text(MAX_PIECE),
        "source": one_of(*(src.value for src in Source)),
        "round": COUNT,
        "position": integer(0, MAX_BLOCK),
        "target_prob": PROB,
        "draft_prob": optional(PROB),
    },
)
ROUND = from_dataclass(
    RoundEvent,
    {
        "index": integer(0, MAX_TOKENS),
        "anchor": TOKEN,
        "drafted": items(TOKEN, MAX_BLOCK),
        "draft_probs": items(PROB, MAX_BLOCK),
        "confidences": optional(items(number(0.0, 1.0), MAX_BLOCK)),
        "verify_width": integer(0, MAX_BLOCK),
        "accepted": integer(0, MAX_BLOCK),
        "committed": items(COMMITTED, MAX_BLOCK),
        "draft_seconds": SECONDS,
        "verify_seconds": SECONDS,
        "elapsed_seconds": SECONDS,
        "tokens_generated": COUNT,
        "tokens_per_sec": number(0.0, MAX_RATE),
        "confidence_logits": optional(items(number(-1e6, 1e6), MAX_BLOCK)),
        "position": integer(0, MAX_POSITION),
        # the rejection inspector (dspark.rounds.Inspection): per verified draft, [token, probability] best first
        "target_top": optional(items(items(top_pair, MAX_TOP), MAX_BLOCK)),
        "draft_rank": optional(items(integer(0, MAX_TOKEN_ID), MAX_BLOCK)),
        "draft_tie": optional(items(boolean, MAX_BLOCK)),
    },
    "round",
)
SUMMARY = from_dataclass(
    Summary,
    {
        "method": one_of(*METHODS),
        "tokens": items(TOKEN, MAX_TOKENS),
        "text": text(MAX_TEXT),
        "prompt_tokens": items(TOKEN, MAX_TOKENS),
        "rounds": COUNT,
        "accepted_lengths": items(integer(0, MAX_BLOCK), MAX_TOKENS),
        "verify_widths": items(integer(0, MAX_BLOCK), MAX_TOKENS),
        "tau": number(0.0, MAX_BLOCK),
        "acceptance_rate": number(0.0, 1.0),
        "per_position_acceptance": items(number(0.0, 1.0), MAX_BLOCK),
        "tokens_per_sec": number(0.0, MAX_RATE),
        "ttft_seconds": SECONDS,
        "prefill_seconds": SECONDS,
        "draft_seconds": SECONDS,
        "verify_seconds": SECONDS,
        "plain_seconds": SECONDS,
        "total_seconds": SECONDS,
        "finish_reason": one_of("length", "stop", "cancelled"),
        "peak_memory_bytes": integer(0, 2**50),
        "accepted_histogram": items(COUNT, MAX_BLOCK + 1),
        "token_logprobs": items(number(-1e6, 0.0, nan=True), MAX_TOKENS),
        "extra": flat_object(100),
    },
    "summary",
)
DIFFERENCE = from_dataclass(
    Difference,
    {
        "index": COUNT,
        "kind": one_of("tie", "mismatch"),
        "speculative": optional(TOKEN),
        "plain": optional(TOKEN),
        "logprobs": optional(items(number(-1e6, 0.0), 2)),
        "one_pass_logprobs": optional(items(number(-1e6, 0.0), 2)),
        "tolerance": optional(number(0.0, 1e6)),
        "drift": optional(number(0.0, 1e6)),
    },
)
VERDICT = optional(record({"identical": boolean, "first_difference": optional(DIFFERENCE)}, ("identical",)))
RUN = record(
    {
        "label": text(500),
        "method": one_of(*METHODS),
        "drafter": optional(text(4096)),
        "drafter_kind": optional(text(100)),
        "prompt": text(MAX_TEXT),
        "prompt_index": integer(0, MAX_PROMPTS - 1),
        "config": optional(flat_object(100)),
        "events": lambda v: None if isinstance(v, list) else "must be a list of rounds",
        "drafted_text": optional(items(items(text(MAX_PIECE), MAX_BLOCK), MAX_ROUNDS)),
        "top_text": optional(items(items(items(text(MAX_PIECE), MAX_TOP), MAX_BLOCK), MAX_ROUNDS)),
        "summary": optional(SUMMARY),
        "verdict": VERDICT,
    },
    ("label", "method", "events"),
    strict=False,
)
DOCUMENT = record(
    {
        "app": text(100),
        "version": text(100),
        "created": text(100),
        "kind": optional(one_of("run", "compare")),
        "prompts": optional(integer(0, MAX_PROMPTS)),
        "target": optional(text(4096)),
        "runs": lambda v: None if isinstance(v, list) and v else "must be a non-empty list of runs",
        "environment": lambda v: ENVIRONMENT(v),  # defined below (a benchmark summary has one too)
        "comparison": lambda v: None,
    },
    ("runs",),
    strict=False,
)


def check_document(doc, name: str) -> None:
    """A saved run or comparison (``app.files.run_export.document``), checked whole; one sentence naming
    ``name`` and the place when it is not one the app can replay."""
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list) or not doc["runs"]:
        raise DsparkError(f"{name} is not a run or comparison saved by DSpark Studio (it has no runs)")
    _fail(name, "", DOCUMENT(doc))
    runs = doc["runs"]
    if len(runs) > MAX_RUNS:
        raise DsparkError(f"{name} holds {len(runs):,} runs: a replay draws at most {MAX_RUNS:,}")
    if (
        sum(len(r["events"]) if isinstance(r, dict) and isinstance(r.get("events"), list) else 0 for r in runs)
        > MAX_ROUNDS
    ):
        raise DsparkError(f"{name} holds more than {MAX_ROUNDS:,} rounds: more than a replay draws")
    for i, run in enumerate(runs):
        problem = _run_problem(run)
        if problem:
            raise DsparkError(f"{name}: run {i + 1} is not readable ({problem})")
    if doc.get("prompts") is not None and doc["prompts"] < max(r.get("prompt_index", 0) for r in runs) + 1:
        raise DsparkError(f"{name}: prompts is {doc['prompts']}, fewer than its runs' prompt indices")


def _run_problem(run) -> str | None:
    problem = RUN(run)
    if problem:
        return problem
    last = 0.0
    for j, ev in enumerate(run["events"]):
        problem = ROUND(ev)
        if problem:
            return f"round {j + 1}: {problem}"
        if ev["elapsed_seconds"] < last:
            return f"round {j + 1}: its time goes back ({ev['elapsed_seconds']:g} s after {last:g} s)"
        last = ev["elapsed_seconds"]
        if not ev["accepted"] <= ev["verify_width"] <= len(ev["drafted"]) or len(ev["draft_probs"]) != len(
            ev["drafted"]
        ):
            return f"round {j + 1}: its accepted, verified and drafted counts disagree"
        problem = _inspection_problem(ev)
        if problem:
            return f"round {j + 1}: {problem}"
    texts = run.get("drafted_text")
    if (
        texts is not None
        and len(texts) == len(run["events"])
        and any(len(t) != len(ev["drafted"]) for t, ev in zip(texts, run["events"]))
    ):
        return "drafted_text does not match the drafted tokens"
    tops = run.get("top_text")
    if tops and (
        len(tops) != len(run["events"])
        or any(
            [len(p) for p in t] != [len(row) for row in ev.get("target_top") or ()]
            for t, ev in zip(tops, run["events"])
        )
    ):
        return "top_text does not match the target's best tokens (target_top)"
    return None


def _inspection_problem(ev: dict) -> str | None:
    """The inspector's fields of one round against its counts: one entry per verified draft, the
    target's best tokens best first and distinct, a rank only where the draft lost a tie."""
    top, rank, tie = ev.get("target_top"), ev.get("draft_rank"), ev.get("draft_tie")
    for name, v in (("target_top", top), ("draft_rank", rank), ("draft_tie", tie)):
        if v is not None and len(v) != ev["verify_width"]:
            return f"{name} has {len(v)} entries for {ev['verify_width']} verified drafts"
    for k, row in enumerate(top or ()):
        probs = [p for _t, p in row]
        if not row or probs != sorted(probs, reverse=True) or len({t for t, _p in row}) != len(row):
            return f"target_top entry {k + 1} is not distinct tokens, best first"
    if rank is not None and tie is not None and any(t and r == 0 for r, t in zip(rank, tie)):
        return "draft_tie marks a tie where the draft was the target's choice (rank 0)"
    return None


def _fail(name: str, where: str, problem: str | None) -> None:
    if problem:
        raise DsparkError(f"{name}: {where + ': ' if where else ''}{problem}")


# --------------------------------------------------------------------------- what a newer dspark may add
def plain_value(v) -> str | None:
    """A value a newer dspark may add to a record: a plain value, or a short list or object of them."""
    scalar = lambda x: (
        None
        if x is None or isinstance(x, bool)
        else (text(10_000)(x) if isinstance(x, str) else number(-1e15, 1e15)(x))
    )
    if isinstance(v, list):
        return items(scalar, 1_000)(v)
    if isinstance(v, dict):
        return flat_object(100)(v)
    return scalar(v)


ENVIRONMENT = lambda v: (
    None
    if isinstance(v, dict) and len(v) <= 100 and not any(plain_value(x) for x in v.values())
    else "must be an object of at most 100 plain values"
)


__all__ = ["ENVIRONMENT", "MAX_ROUNDS", "MAX_RUNS", "check_document", "plain_value"]

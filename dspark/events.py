"""The one event schema: what the engine did, for the CLI, the benchmark, the app and tests.

Everything here is plain Python data (frozen dataclasses of ints, floats, strings and
tuples), so it can cross threads and be written to JSON without touching MLX.

A generation yields one ``RoundEvent`` per round and ends with one ``Summary``.
Plain decoding (``generate_plain``) uses the same schema: each of its "rounds" commits
one token with source ``TARGET`` and drafts nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum


class Source(str, Enum):
    """How a committed token came to be."""

    ACCEPTED = "accepted"  # a drafted token the target accepted
    CORRECTION = "correction"  # the target's own token where a draft was rejected
    BONUS = "bonus"  # the target's token after every verified draft was accepted
    TARGET = "target"  # plain decoding, or a round that verified no draft


@dataclass(frozen=True, kw_only=True)
class CommittedToken:
    id: int
    text: str  # the token's own piece of text (may be empty for partial characters)
    source: Source
    round: int  # index of the round that committed it
    position: int  # 0-based slot in that round: slot k < accepted is draft k+1
    target_prob: float  # the target's probability of this token at its position
    draft_prob: float | None = None  # q(token) for accepted drafts, else None


@dataclass(frozen=True, kw_only=True)
class RoundEvent:
    """One speculative round (or one plain decoding step)."""

    index: int
    anchor: int  # the last committed token the round drafted from
    drafted: tuple[int, ...]  # every token the drafter proposed
    draft_probs: tuple[float, ...]  # q(d_k), the probability each was drawn with
    confidences: tuple[float, ...] | None  # calibrated survival estimates c_k, if any
    verify_width: int  # how many drafted tokens the target verified (<= len(drafted))
    accepted: int  # how many verified drafts were accepted (<= verify_width)
    committed: tuple[CommittedToken, ...]  # accepted drafts then one target token
    draft_seconds: float
    verify_seconds: float  # the verify forward, acceptance and cache rollback
    elapsed_seconds: float  # since generation started
    tokens_generated: int  # cumulative committed tokens
    tokens_per_sec: float  # cumulative decode throughput (see Summary.tokens_per_sec)
    confidence_logits: tuple[float, ...] | None = None  # raw z_k before calibration (what STS fits)
    plain_step: bool = False  # a speculative run decoded this token plainly: no draft was verified
    position: int = 0  # the anchor's position: tokens before it in the sequence (prompt and output)
    # the rejection inspector (generate's inspect): per verified position, the target's best tokens
    # as (id, probability), best first, and the drafted token's rank in its distribution (0: its choice)
    target_top: tuple[tuple[tuple[int, float], ...], ...] | None = None
    draft_rank: tuple[int, ...] | None = None
    draft_tie: tuple[bool, ...] | None = None  # per verified position: lost only a numerical tie (rank >= 1)


@dataclass(frozen=True, kw_only=True)
class Summary:
    """The whole generation. Metric definitions live in ``dspark.metrics``."""

    method: str  # "speculative" or "plain" (files of 0.1.0 say "baseline": event_from_dict reads it as "plain")
    tokens: tuple[int, ...]
    text: str
    prompt_tokens: tuple[int, ...]  # the ids fed to the target (chat template applied)
    rounds: int  # rounds that drafted (plain decoding: one per token)
    accepted_lengths: tuple[int, ...]  # accepted drafts per round that drafted
    verify_widths: tuple[int, ...]  # verified drafts per round that drafted
    tau: float  # committed tokens per round that drafted, the bonus/correction token included
    acceptance_rate: float  # accepted drafts / verified drafts
    per_position_acceptance: tuple[float, ...]
    tokens_per_sec: float
    ttft_seconds: float
    prefill_seconds: float
    draft_seconds: float
    verify_seconds: float
    total_seconds: float
    finish_reason: str  # "length", "stop" or "cancelled"
    peak_memory_bytes: int = 0
    accepted_histogram: tuple[int, ...] = ()  # rounds by accepted drafts, 0..max verify width
    token_logprobs: tuple[float, ...] = ()  # the target's log-probability of each output token, as this run computed it
    extra: dict = field(default_factory=dict)
    plain_steps: int = 0  # tokens a speculative run decoded plainly, no draft verified (the auto policy)
    plain_seconds: float = 0.0  # those plain steps' own time (draft_seconds and verify_seconds are the rounds')

    def to_dict(self) -> dict:
        return asdict(self)


def plain_method(method):
    """A run's ``method`` under today's name: 0.1.0 wrote plain decoding's as "baseline"."""
    return "plain" if method == "baseline" else method


def event_to_dict(event: RoundEvent | Summary) -> dict:
    d = asdict(event)
    d["kind"] = "round" if isinstance(event, RoundEvent) else "summary"
    return d


def event_from_dict(d: dict) -> RoundEvent | Summary:
    """The inverse of :func:`event_to_dict` (and of ``Summary.to_dict``, which has no "kind"):
    JSON's lists become tuples again and token sources ``Source`` values. Raises KeyError,
    TypeError or ValueError on a dict that is not such an event (a reader turns that into one
    message)."""
    d = dict(d)
    kind = d.pop("kind", "summary")
    if kind == "round":
        d["committed"] = tuple(CommittedToken(**{**t, "source": Source(t["source"])}) for t in d["committed"])
        for name in ("drafted", "draft_probs", "confidences", "confidence_logits", "draft_rank", "draft_tie"):
            if d.get(name) is not None:
                d[name] = tuple(d[name])
        if d.get("target_top") is not None:
            d["target_top"] = tuple(tuple((int(t), float(p)) for t, p in row) for row in d["target_top"])
        return RoundEvent(**d)
    if kind != "summary":
        raise ValueError(f"unknown event kind {kind!r}")
    if "method" in d:
        d["method"] = plain_method(d["method"])
    for name in (
        "tokens",
        "prompt_tokens",
        "accepted_lengths",
        "verify_widths",
        "per_position_acceptance",
        "accepted_histogram",
        "token_logprobs",
    ):
        if name in d:
            d[name] = tuple(d[name])
    return Summary(**d)

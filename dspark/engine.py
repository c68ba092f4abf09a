"""The speculative generation loop, and plain mlx-lm decoding in the same event schema: a run
prefills the prompt, then runs rounds (:mod:`dspark.rounds`: draft, verify, accept, roll back)
until its stop rules say so; where the ``auto`` policy says no round pays, plain steps, in whose
shadow the drafter drafts now and then unverified (judged by the tokens committed after).
Everything else about a run (clock, text, stop rules, events, summary) is :class:`_Generation`'s,
shared with :func:`generate_plain`.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator, Sequence
from time import perf_counter

import mlx.core as mx
import numpy as np
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_sampler

from . import blas, metrics
from .config import GenerationConfig
from .costs import Costs, for_policy
from .errors import DsparkError
from .events import CommittedToken, RoundEvent, Source, Summary
from .plain import plain_outcome, plain_steps, prefill
from .policy import Scheduler
from .policy import parse as parse_policy
from .rounds import Proposer, RoundOutcome, speculative_round
from .shadows import draft_shadow, judge_shadow
from .target import Target


def prompt_ids(target: Target, prompt: str | Sequence[int], config: GenerationConfig = GenerationConfig()) -> list[int]:
    """The ids fed to the target: a text prompt in the chat template when the config asks for it
    and the tokenizer has one (else as it is); token ids pass through."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise DsparkError("the prompt is empty")
        if config.chat_template and target.has_chat_template:
            ids = target.encode_chat(prompt, config.system_prompt, config.template_options())
        else:
            ids = target.encode(prompt)
    else:
        ids = [int(t) for t in prompt]
    if not ids:
        raise DsparkError("the prompt is empty")
    bad = [t for t in ids if not 0 <= t < target.dims.vocab_size]
    if bad:
        raise DsparkError(f"token id {bad[0]} is outside the target's vocabulary ({target.dims.vocab_size})")
    limit = target.config.get("max_position_embeddings") or (target.config.get("text_config") or {}).get(
        "max_position_embeddings"
    )
    if isinstance(limit, int) and len(ids) > limit:  # refused before a prefill of minutes on positions it never saw
        raise DsparkError(
            f"the prompt is {len(ids):,} tokens, more than the {limit:,} positions this target holds: shorten it"
        )
    return ids


def length_note(target: Target, prompt_tokens: int, max_tokens: int) -> str | None:
    """A warning when the prompt and the output exceed the positions the target was trained on."""
    limit = target.config.get("max_position_embeddings") or (target.config.get("text_config") or {}).get(
        "max_position_embeddings"
    )
    if isinstance(limit, int) and prompt_tokens + max_tokens > limit:
        return (
            f"the prompt ({prompt_tokens} tokens) and up to {max_tokens} new tokens exceed the {limit} positions "
            f"this target was trained on: expect degraded output past position {limit}"
        )
    return None


# ----------------------------------------------------------------------------- one round
# ----------------------------------------------------------------------------- runs
def generate(
    target: Target,
    drafter: Proposer,
    prompt: str | Sequence[int],
    config: GenerationConfig = GenerationConfig(),
    *,
    cancel: Callable[[], bool] | None = None,
    costs: Costs | None = None,
    display: bool = True,
    inspect: bool = False,
    prompt_progress: Callable[[int, int], None] | None = None,
) -> Iterator[RoundEvent | Summary]:
    """Speculative generation: yields a ``RoundEvent`` per round, then a ``Summary``.
    ``costs`` (this machine's, :mod:`dspark.costs`) drive the ``auto`` policy and the
    loop's BLAS thread count; ``auto`` loads or measures them when none are given.
    ``display=False`` skips what only a screen reads: each drafted and, greedy, each committed
    token's probability (a log-sum-exp over the vocabulary per row, a measurable share of a
    round on a CPU); those fields are then NaN and ``Summary.token_logprobs`` is empty; and the
    confidence head, unless the policy reads it (``RoundEvent.confidences`` is then None).
    ``inspect`` keeps what the target thought of every verified draft (``RoundEvent.target_top``
    and ``draft_rank``: the rejection inspector; a top-k over the vocabulary per verified row).
    ``prompt_progress(done, total)``: the prompt's tokens processed so far, as mlx-lm's
    ``prompt_progress_callback`` says them (``total`` the prompt's length; the last token is the
    first round's anchor, so ``done`` stops one short of it)."""
    config.check(target.dims.vocab_size)
    pol = parse_policy(config.policy)
    ids = prompt_ids(target, prompt, config)
    cache = target.make_cache()
    draft_session = drafter.start(target, cache=cache)
    block_size = draft_session.block_size if config.block_size is None else config.block_size
    if costs is None:
        costs = for_policy(config.policy, target, drafter, block_size)
    sched = Scheduler(
        pol, block_size, costs, prior=measured_acceptance(drafter, target), thread_choices=_thread_choices()
    )
    # an autoregressive drafter pays a step per token: the policy sets how many it drafts, before it drafts
    stepwise = getattr(draft_session, "autoregressive", False)
    threads = costs.threads if costs is not None else {}
    run = _Generation("speculative", target, ids, config, cancel=cancel)
    keys = _round_keys(config.seed)
    shadow_keys = _round_keys(config.seed + 2**31)  # seeds are below 2**31: a stream of its own
    new_rows = prefill(
        target,
        cache,
        ids[:-1],
        draft_session.tap_layers,
        step=config.prefill_step_size,
        progress=None if prompt_progress is None else (lambda done: prompt_progress(done, len(ids))),
    )
    run.prefilled()
    anchor, position = ids[-1], len(ids) - 1

    drafts_next = False  # the scheduler has decided already that the next round drafts

    def plain_next(p: int) -> bool:
        """Whether the step at position ``p`` is plain too, asked while the step before it is
        still to be committed (hence one token fewer than ``run.remaining``). The scheduler is
        asked once per position. Block size 0: always."""
        nonlocal drafts_next
        left = run.remaining - 1
        if left < 1:
            return False
        if not block_size:
            return True
        drafts_next = sched.drafts(p, left - 1)
        if not drafts_next:
            blas.use_threads(sched.step_threads(p))
        return not drafts_next

    try:
        while run.wants_more():
            budget = run.remaining - 1
            if block_size and (drafts_next or sched.drafts(position, budget)):
                drafts_next = False
                v = speculative_round(
                    target,
                    draft_session,
                    cache,
                    anchor=anchor,
                    position=position,
                    new_rows=new_rows,
                    history=run.ids + run.out,
                    block_size=sched.draft_count(block_size, budget, position) if stepwise else block_size,
                    budget=budget,
                    sched=sched,
                    sampling=config.sampling,
                    key=next(keys),
                    threads=threads,
                    display=display,
                    inspect=inspect,
                )
                sched.round_took(
                    position,
                    drafted=len(v.drafted) if stepwise else 1,
                    width=v.width,
                    accepted=v.accepted,
                    seconds=v.draft_seconds + v.verify_seconds,
                )
                yield run.commit(anchor, v, position)
                anchor, position, new_rows = v.tokens[-1], position + v.accepted + 1, v.new_rows
                continue
            # plain steps: their tap rows wait, with any before them, for the drafter's next draft
            rows = [] if new_rows is None else [new_rows]
            stretch = sched.step_threads(position)
            steps = plain_steps(
                target,
                cache,
                tap_layers=draft_session.tap_layers,
                anchor=anchor,
                position=position,
                sampling=config.sampling,
                keys=keys,
                more=plain_next,
                threads={**threads, "step": stretch} if stretch else threads,
                display=display,
                inspect=inspect,
            )
            shadow = None
            try:
                for v in steps:
                    sched.step_took(position, v.verify_seconds)
                    yield run.commit(anchor, v, position)
                    rows.append(v.new_rows)
                    anchor, position = v.tokens[0], position + 1
                    if shadow is not None:
                        shadow = judge_shadow(sched, shadow, run.ids + run.out)
                    if not run.wants_more():
                        break
                    if shadow is None and block_size and sched.shadow_due():  # nothing to draft: no shadow
                        shadow = draft_shadow(
                            draft_session,
                            anchor=anchor,
                            position=position,
                            new_rows=_rows(rows),
                            history=run.ids + run.out,
                            block_size=sched.draft_count(block_size, block_size, position) if stepwise else block_size,
                            sampling=config.sampling,
                            key=next(shadow_keys),
                            threads=threads,
                        )
                        rows = []
            finally:
                steps.close()
            if shadow is not None:
                judge_shadow(sched, shadow, run.ids + run.out, final=True)
            new_rows = _rows(rows)
    finally:
        blas.restore_threads()
    yield run.summary()


def _thread_choices() -> tuple[int, ...]:
    """The BLAS thread counts ``auto``'s plain steps may try: 1 and all of them with OpenBLAS on a
    multi-core machine, as the bench's plain decoding does; none elsewhere."""
    n = blas.default_threads()
    return (1, n) if n and n > 1 else ()


def _rows(rows: list) -> mx.array | None:
    return mx.concatenate(rows, axis=1) if rows else None


def measured_acceptance(drafter, target: Target) -> list[float] | None:
    """The drafter's per-position acceptance from its profile (``load_drafter`` reads it), when
    that was measured on this target's weights: the ``auto`` policy's prior."""
    profile = getattr(drafter, "profile", None)
    if profile is None:
        return None
    recorded = profile.target_fingerprint
    if recorded is not None and recorded != target.weights_fingerprint:
        return None
    if recorded is None and profile.target_id != target.target_id:
        return None
    return list(profile.per_position_acceptance)


def _round_keys(seed: int) -> Iterator[mx.array]:
    """One key for each round and each plain step, in the order they run."""
    key = mx.random.key(seed)
    while True:
        key, k_round = mx.random.split(key)
        yield k_round


def generate_plain(
    target: Target,
    prompt: str | Sequence[int],
    config: GenerationConfig = GenerationConfig(),
    cancel: Callable[[], bool] | None = None,
    *,
    prompt_progress: Callable[[int, int], None] | None = None,
) -> Iterator[RoundEvent | Summary]:
    """Plain decoding by mlx-lm's own ``generate_step``, in the same event schema;
    ``prompt_progress`` is its ``prompt_progress_callback``."""
    config.check(target.dims.vocab_size)
    ids = prompt_ids(target, prompt, config)
    sp = config.sampling
    sampler = make_sampler(sp.temperature, top_p=sp.top_p if sp.top_p < 1 else 0.0, top_k=sp.top_k)
    mx.random.seed(config.seed)
    run = _Generation("plain", target, ids, config, cancel=cancel)
    marks: list[tuple[int, int, float]] = []
    steps = generate_step(
        mx.array(ids),
        target.model,
        max_tokens=config.max_tokens,
        sampler=sampler,
        prefill_step_size=config.prefill_step_size,
        prompt_progress_callback=lambda done, total: _progress(marks, prompt_progress, done, total),
    )
    anchor = ids[-1]
    for tok, logprobs in steps:
        if not run.out:
            # generate_step processes all but the last prompt token first, as generate() does.
            run.prefilled(max((t for d, n, t in marks if d < n), default=run.start))
        if not run.wants_more():
            break
        prob = math.exp(_host_value(logprobs, tok))
        yield run.commit(anchor, plain_outcome(tok, prob, seconds=0.0, new_rows=None, plain_step=False))
        anchor = tok
    yield run.summary()


def _progress(marks: list, tell: Callable[[int, int], None] | None, done: int, total: int) -> None:
    marks.append((done, total, perf_counter()))
    if tell is not None:
        tell(done, total)


def _host_value(x: mx.array, i: int) -> float:
    """``x[i]`` of a 1-D array read from its memory. An MLX op (``x[i].item()``) would wait for
    the stream, where mlx-lm has already queued the next step: plain decoding lost 3-4% of its
    speed to that wait (measured on the demo target)."""
    if x.dtype == mx.bfloat16:  # numpy has no bfloat16: its bits are a float32's upper half
        raw = bytes(memoryview(x).cast("B")[2 * i : 2 * i + 2])
        return struct.unpack("<f", b"\x00\x00" + raw)[0]
    return float(np.asarray(x)[i])


class _Generation:
    """One generation's bookkeeping: clock, committed tokens and their text, stop rules
    (max tokens, EOS, cancel), the events and the summary."""

    def __init__(self, method: str, target: Target, ids: list[int], config: GenerationConfig, *, cancel):
        self.method, self.target, self.ids, self.config, self.cancel = method, target, ids, config, cancel
        self.stop_ids = target.eos_token_ids if config.stop_at_eos else set()
        self.detok = target.tokenizer.detokenizer if target.tokenizer is not None else None
        if self.detok is not None:
            self.detok.reset()
        self.out: list[int] = []
        self.events: list[RoundEvent] = []
        self.finish = "length"
        mx.reset_peak_memory()
        self.start = self.decode_start = perf_counter()
        self.first_token: float | None = None
        self.draft_seconds = self.verify_seconds = self.plain_seconds = 0.0

    @property
    def remaining(self) -> int:
        return self.config.max_tokens - len(self.out)

    def prefilled(self, at: float | None = None) -> None:
        """The prompt (all but its last token) is processed: decode time starts here."""
        self.decode_start = perf_counter() if at is None else at

    def wants_more(self) -> bool:
        if self.finish != "length" or self.remaining <= 0:
            return False
        if self.cancel is not None and self.cancel():
            self.finish = "cancelled"
            return False
        return True

    def tokens_per_sec(self) -> float:
        """Decode throughput: tokens / seconds since the prompt (all but its last token) was processed."""
        dt = perf_counter() - self.decode_start
        return len(self.out) / dt if dt > 0 else 0.0

    def _piece(self, token: int) -> str:
        if self.detok is None:
            return ""
        self.detok.add_token(token)
        return self.detok.last_segment

    def commit(self, anchor: int, v: RoundOutcome, position: int | None = None) -> RoundEvent:
        index, a = len(self.events), v.accepted
        committed = []
        for k, tok in enumerate(v.tokens):
            src = (
                Source.ACCEPTED
                if k < a
                else (Source.TARGET if v.width == 0 else Source.BONUS if a == v.width else Source.CORRECTION)
            )
            committed.append(
                CommittedToken(
                    id=tok,
                    text=self._piece(tok),
                    source=src,
                    round=index,
                    position=k,
                    target_prob=v.target_probs[k],
                    draft_prob=v.draft_probs[k] if k < a else None,
                )
            )
            self.out.append(tok)
            if tok in self.stop_ids:
                self.finish = "stop"
                break
        if self.first_token is None:
            self.first_token = perf_counter()
        if v.plain_step:  # a plain step's time is no round's: kept apart, so per-round figures stay a round's
            self.plain_seconds += v.verify_seconds
        else:
            self.draft_seconds += v.draft_seconds
            self.verify_seconds += v.verify_seconds
        ev = RoundEvent(
            index=index,
            anchor=anchor,
            drafted=tuple(v.drafted),
            draft_probs=tuple(v.draft_probs),
            confidences=tuple(v.confidences) if v.confidences is not None else None,
            verify_width=v.width,
            accepted=a,
            committed=tuple(committed),
            draft_seconds=v.draft_seconds,
            verify_seconds=v.verify_seconds,
            elapsed_seconds=perf_counter() - self.start,
            tokens_generated=len(self.out),
            tokens_per_sec=self.tokens_per_sec(),
            confidence_logits=tuple(v.conf_logits) if v.conf_logits is not None else None,
            plain_step=v.plain_step,
            target_top=v.inspected.top if v.inspected is not None else None,
            draft_rank=v.inspected.rank if v.inspected is not None else None,
            draft_tie=v.inspected.tie if v.inspected is not None else None,
            position=len(self.ids) - 1 + len(self.out) - len(committed) if position is None else position,
        )
        self.events.append(ev)
        return ev

    def summary(self) -> Summary:
        if self.detok is not None:
            self.detok.finalize()
        end = perf_counter()
        f = metrics.summarize(self.events)
        return Summary(
            method=self.method,
            tokens=tuple(self.out),
            text=self.target.decode(self.out),
            prompt_tokens=tuple(self.ids),
            rounds=f.rounds,
            accepted_lengths=tuple(e.accepted for e in self.events if not e.plain_step),
            verify_widths=tuple(e.verify_width for e in self.events if not e.plain_step),
            tau=f.tau,
            acceptance_rate=f.acceptance_rate,
            per_position_acceptance=f.per_position_acceptance,
            tokens_per_sec=self.tokens_per_sec(),
            ttft_seconds=(self.first_token or end) - self.start,
            prefill_seconds=self.decode_start - self.start,
            draft_seconds=self.draft_seconds,
            verify_seconds=self.verify_seconds,
            plain_seconds=self.plain_seconds,
            total_seconds=end - self.start,
            finish_reason=self.finish,
            peak_memory_bytes=int(mx.get_peak_memory()),
            accepted_histogram=f.accepted_histogram,
            plain_steps=f.plain_steps,
            token_logprobs=tuple(
                math.log(max(t.target_prob, 1e-45))
                for e in self.events
                for t in e.committed
                if not math.isnan(t.target_prob)
            ),
        )


def run_to_summary(events: Iterator[RoundEvent | Summary]) -> Summary:
    """Drain a generation and return its summary."""
    summary = None
    for ev in events:
        if isinstance(ev, Summary):
            summary = ev
    return summary


generate_baseline = generate_plain  # the old name of generate_plain, kept so that users' code runs on

__all__ = [
    "GenerationConfig",
    "Proposer",
    "generate",
    "generate_baseline",
    "generate_plain",
    "prompt_ids",
    "run_to_summary",
]

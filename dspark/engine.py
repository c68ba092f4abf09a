"""The speculative generation loop, and plain mlx-lm decoding in the same event schema.

One round (DSpark convention, anchor = the last committed token, not yet seen by the target):

1. the drafter proposes ``G`` tokens from the anchor and the target's tap rows so far;
2. the target verifies ``[anchor, d_1..d_w]`` in one forward (``w <= G``, see ``_verify_width``);
3. greedy: accept while ``d_k`` equals the target's argmax; sampling: the ratio test;
   then one target token (correction, or bonus if all ``w`` were accepted) is committed;
4. the target's KV cache forgets the ``w - a`` rejected rows (``dspark.cache.rollback``);
5. the tap rows of ``[anchor, d_1..d_a]`` become the drafter's new context rows.

Host syncs: one after drafting (to time it and read the draft), one after verifying.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter
from typing import Callable, Iterator, Protocol, Sequence

import mlx.core as mx

from . import metrics
from .cache import rollback
from .errors import DsparkError
from .events import CommittedToken, RoundEvent, Source, Summary
from .sampling import SamplingParams, accept_sampled, distribution, token_probs
from .target import Target


@dataclass(frozen=True)
class GenerationConfig:
    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    block_size: int | None = None  # drafted tokens per round; None: the drafter's own
    verify: str = "all"  # "all" drafted tokens, or "confidence": the prefix whose predicted survival stays >= threshold
    confidence_threshold: float = 0.3
    stop_at_eos: bool = True
    prefill_step_size: int = 2048

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_p, self.top_k)

    def check(self) -> None:
        if self.max_tokens < 1:
            raise DsparkError("max tokens must be at least 1")
        if self.temperature < 0 or not 0 <= self.top_p <= 1 or self.top_k < 0:
            raise DsparkError("temperature must be >= 0, top-p in [0, 1] and top-k >= 0")
        if self.block_size is not None and self.block_size < 0:
            raise DsparkError("block size must be >= 0")
        if self.verify not in ("all", "confidence"):
            raise DsparkError(f"unknown verify policy {self.verify!r} (use 'all' or 'confidence')")


class Proposer(Protocol):
    """Anything that drafts: ``DflashDrafter`` or, in tests, an oracle."""

    def start(self, target: Target) -> "Session": ...


class Session(Protocol):
    tap_layers: Sequence[int]
    block_size: int

    def propose(self, anchor: int, position: int, new_rows: mx.array | None, gamma: int, sampling: SamplingParams, key: mx.array):
        """Return an object with ``tokens`` [1, G], ``draft_probs`` [1, G], ``q`` [1, G, V]
        (the exact distributions sampled from; None if greedy) and ``confidences`` (or None)."""

    def state(self) -> list: ...


def prompt_ids(target: Target, prompt: str | Sequence[int]) -> list[int]:
    ids = target.encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
    if not ids or (isinstance(prompt, str) and not prompt.strip()):
        raise DsparkError("the prompt is empty")
    bad = [t for t in ids if not 0 <= t < target.dims.vocab_size]
    if bad:
        raise DsparkError(f"token id {bad[0]} is outside the target's vocabulary ({target.dims.vocab_size})")
    return ids


class _Clock:
    def __init__(self):
        self.start = perf_counter()
        self.decode_start = self.start
        self.first_token: float | None = None

    def tokens_per_sec(self, n: int) -> float:
        """Decode throughput: tokens / seconds since the prompt (all but its last token) was processed."""
        dt = perf_counter() - self.decode_start
        return n / dt if dt > 0 else 0.0


class _Text:
    """Incremental detokenization: each token's own piece of text."""

    def __init__(self, target: Target):
        tok = target.tokenizer
        self.detok = tok.detokenizer if tok is not None else None
        if self.detok is not None:
            self.detok.reset()

    def piece(self, token: int) -> str:
        if self.detok is None:
            return ""
        self.detok.add_token(token)
        return self.detok.last_segment

    def flush(self) -> str:
        if self.detok is None:
            return ""
        self.detok.finalize()
        return self.detok.last_segment


def _prefill(target: Target, cache: list, ids: list[int], taps: Sequence[int], step: int) -> mx.array | None:
    rows = []
    for i in range(0, len(ids), step):
        _, t = target.forward(mx.array([ids[i : i + step]]), cache, taps, logits=False)
        mx.eval(t, [c.state for c in cache])
        rows.append(t)
    return mx.concatenate(rows, axis=1) if rows else None


def _verify_width(conf: list[float] | None, drafted: int, remaining: int, cfg: GenerationConfig) -> int:
    width = min(drafted, remaining - 1)
    if cfg.verify == "confidence" and conf is not None:
        # Admit draft k while the predicted survival of drafts 1..k stays above the threshold.
        # c_k depends on d_1..d_{k-1} only, so the choice never peeks at d_k: still lossless.
        survival, k = 1.0, 0
        while k < width and survival * conf[k] >= cfg.confidence_threshold:
            survival *= conf[k]
            k += 1
        width = k
    return width


def generate(
    target: Target,
    drafter: Proposer,
    prompt: str | Sequence[int],
    config: GenerationConfig = GenerationConfig(),
    cancel: Callable[[], bool] | None = None,
) -> Iterator[RoundEvent | Summary]:
    """Speculative generation: yields a ``RoundEvent`` per round, then a ``Summary``."""
    config.check()
    ids = prompt_ids(target, prompt)
    session = drafter.start(target)
    taps, sp = session.tap_layers, config.sampling
    gamma = session.block_size if config.block_size is None else config.block_size
    stop = target.eos_token_ids if config.stop_at_eos else set()
    key = mx.random.key(config.seed)
    cache = target.make_cache()
    text = _Text(target)
    mx.reset_peak_memory()
    clock = _Clock()

    new_rows = _prefill(target, cache, ids[:-1], taps, config.prefill_step_size)
    clock.decode_start = perf_counter()
    prefill_seconds = clock.decode_start - clock.start
    anchor, position = ids[-1], len(ids) - 1
    out: list[int] = []
    accepted_n, widths, committed_n = [], [], []
    draft_total = verify_total = 0.0
    finish = "length"
    while len(out) < config.max_tokens:
        if cancel is not None and cancel():
            finish = "cancelled"
            break
        key, k_draft, k_accept = mx.random.split(key, 3)
        remaining = config.max_tokens - len(out)
        t0 = perf_counter()
        draft = session.propose(anchor, position, new_rows, gamma, sp, k_draft) if gamma > 0 else None
        n_draft = 0 if draft is None else draft.tokens.shape[1]
        drafted, dprobs, conf = [], [], None
        if draft is not None:
            mx.async_eval(draft.tokens, draft.draft_probs, draft.q, draft.confidences, session.state())
        width = min(n_draft, remaining - 1)
        fixed = config.verify == "all" or draft is None or draft.confidences is None
        if fixed and width > 0:
            # The width does not depend on the draft's values: build the verify graph on the
            # lazy draft tokens while the draft computes, instead of after a host round trip.
            verify_ids = mx.concatenate([mx.array([anchor], mx.int32), draft.tokens[0, :width].astype(mx.int32)])
            logits, new_taps = target.forward(verify_ids[None], cache, taps)
        if draft is not None:
            mx.eval(draft.tokens, draft.draft_probs, draft.q, draft.confidences, session.state())
            drafted = draft.tokens[0].tolist()
            dprobs = draft.draft_probs[0].tolist()
            conf = draft.confidences[0].tolist() if draft.confidences is not None else None
        t1 = perf_counter()
        if not (fixed and width > 0):
            width = _verify_width(conf, n_draft, remaining, config)
            logits, new_taps = target.forward(mx.array([[anchor] + drafted[:width]]), cache, taps)
        a, final, probs = _accept(logits[0], drafted, width, draft, sp, k_accept, new_taps)
        rollback(cache, width - a)
        new_rows = new_taps[:, : a + 1]
        t2 = perf_counter()

        tokens = drafted[:a] + [final]
        round_tokens = []
        for k, tok in enumerate(tokens):
            src = Source.ACCEPTED if k < a else _source_of_target_token(a, width)
            round_tokens.append(
                CommittedToken(tok, text.piece(tok), src, len(widths), k, probs[k], dprobs[k] if k < a else None)
            )
            out.append(tok)
            if tok in stop:
                finish = "stop"
                break
        if clock.first_token is None:
            clock.first_token = perf_counter()
        accepted_n.append(a)
        widths.append(width)
        committed_n.append(len(round_tokens))
        draft_total += t1 - t0
        verify_total += t2 - t1
        round_anchor, anchor, position = anchor, final, position + a + 1
        yield RoundEvent(
            index=len(widths) - 1,
            anchor=round_anchor,
            drafted=tuple(drafted),
            draft_probs=tuple(dprobs),
            confidences=tuple(conf) if conf is not None else None,
            verify_width=width,
            accepted=a,
            committed=tuple(round_tokens),
            draft_seconds=t1 - t0,
            verify_seconds=t2 - t1,
            elapsed_seconds=perf_counter() - clock.start,
            tokens_generated=len(out),
            tokens_per_sec=clock.tokens_per_sec(len(out)),
        )
        if finish == "stop":
            break
    text.flush()
    yield _summary("speculative", target, ids, out, accepted_n, widths, committed_n, clock, prefill_seconds, draft_total, verify_total, finish)


def _accept(logits, drafted: list[int], width: int, draft, sp: SamplingParams, key, new_taps):
    """How many of the ``width`` verified drafts the target accepts, the target's own token
    after them, and the target's probabilities of every committed token. One host sync, which
    also evaluates ``new_taps``."""
    if sp.greedy:
        best = mx.argmax(logits, axis=-1)
        shown = token_probs(logits, best)
        mx.eval(best, shown, new_taps)
        best, shown = best.tolist(), shown.tolist()
        a = 0
        while a < width and drafted[a] == best[a]:
            a += 1
        return a, best[a], shown[: a + 1]
    p = distribution(logits, sp)
    d = mx.array(drafted[:width], mx.int32)
    ok, fallback = accept_sampled(p, draft.q[0, :width] if width else None, d, key)
    p_drafted, p_fallback = p[mx.arange(width), d], p[mx.arange(width + 1), fallback]
    mx.eval(ok, fallback, p_drafted, p_fallback, new_taps)
    ok = ok.tolist()
    a = ok.index(False) if False in ok else width
    return a, fallback.tolist()[a], p_drafted.tolist()[:a] + [p_fallback.tolist()[a]]


def _source_of_target_token(accepted: int, width: int) -> Source:
    if width == 0:
        return Source.TARGET  # nothing was drafted or verified: a plain decoding step
    return Source.BONUS if accepted == width else Source.CORRECTION


def generate_baseline(
    target: Target,
    prompt: str | Sequence[int],
    config: GenerationConfig = GenerationConfig(),
    cancel: Callable[[], bool] | None = None,
) -> Iterator[RoundEvent | Summary]:
    """Plain decoding by mlx-lm's own ``generate_step``, in the same event schema."""
    from mlx_lm.generate import generate_step
    from mlx_lm.sample_utils import make_sampler

    config.check()
    ids = prompt_ids(target, prompt)
    sp = config.sampling
    sampler = make_sampler(sp.temperature, top_p=sp.top_p if sp.top_p < 1 else 0.0, top_k=sp.top_k)
    stop = target.eos_token_ids if config.stop_at_eos else set()
    mx.random.seed(config.seed)
    text = _Text(target)
    mx.reset_peak_memory()
    clock = _Clock()
    marks: list[tuple[int, int, float]] = []
    steps = generate_step(
        mx.array(ids),
        target.model,
        max_tokens=config.max_tokens,
        sampler=sampler,
        prefill_step_size=config.prefill_step_size,
        prompt_progress_callback=lambda done, total: marks.append((done, total, perf_counter())),
    )
    out: list[int] = []
    finish = "length"
    prefill_seconds = 0.0
    for tok, logprobs in steps:
        if not out:
            # generate_step processes all but the last prompt token first, as generate() does.
            clock.decode_start = max((t for d, n, t in marks if d < n), default=clock.start)
            prefill_seconds = clock.decode_start - clock.start
            clock.first_token = perf_counter()
        if cancel is not None and cancel():
            finish = "cancelled"
            break
        out.append(tok)
        prob = float(mx.exp(logprobs[tok]).item())
        committed = (CommittedToken(tok, text.piece(tok), Source.TARGET, len(out) - 1, 0, prob),)
        yield RoundEvent(
            index=len(out) - 1,
            anchor=out[-2] if len(out) > 1 else ids[-1],
            drafted=(),
            draft_probs=(),
            confidences=None,
            verify_width=0,
            accepted=0,
            committed=committed,
            draft_seconds=0.0,
            verify_seconds=0.0,
            elapsed_seconds=perf_counter() - clock.start,
            tokens_generated=len(out),
            tokens_per_sec=clock.tokens_per_sec(len(out)),
        )
        if tok in stop:
            finish = "stop"
            break
    text.flush()
    n = len(out)
    yield _summary("baseline", target, ids, out, [0] * n, [0] * n, [1] * n, clock, prefill_seconds, 0.0, 0.0, finish)


def _summary(method, target, ids, out, accepted, widths, committed, clock, prefill, draft_s, verify_s, finish) -> Summary:
    end = perf_counter()
    return Summary(
        method=method,
        tokens=tuple(out),
        text=target.decode(out),
        prompt_tokens=len(ids),
        rounds=len(widths),
        accepted_lengths=tuple(accepted),
        verify_widths=tuple(widths),
        tau=metrics.tau(committed),
        acceptance_rate=metrics.acceptance_rate(accepted, widths),
        per_position_acceptance=tuple(metrics.per_position_acceptance(accepted, widths)),
        tokens_per_sec=clock.tokens_per_sec(len(out)),
        ttft_seconds=(clock.first_token or end) - clock.start,
        prefill_seconds=prefill,
        draft_seconds=draft_s,
        verify_seconds=verify_s,
        total_seconds=end - clock.start,
        finish_reason=finish,
        peak_memory_bytes=int(mx.get_peak_memory()),
    )


def run_to_summary(events: Iterator[RoundEvent | Summary]) -> Summary:
    """Drain a generation and return its summary."""
    summary = None
    for ev in events:
        if isinstance(ev, Summary):
            summary = ev
    return summary


__all__ = ["GenerationConfig", "generate", "generate_baseline", "prompt_ids", "run_to_summary"]

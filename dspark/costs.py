"""What a round costs on this machine: the target's verify forward for 1 + w rows (w = 0..G),
the drafter's block, and a plain one-token step, measured once per machine, model, drafter
shape and MLX version and kept in the user cache folder (``dspark costs --remeasure`` measures
again). The ``auto`` verify policy reads it; ``dspark bench`` records it.

The phases are the engine's own (:mod:`dspark.rounds`), run as a round runs them without a screen.
The plain step is mlx-lm's own decoding timed per token, in turns taken with the draft and the
verify (so a change of the machine's load touches all three alike: what ``auto`` compares is
their ratio, and a step timed in a busier moment than the verify once priced plain decoding at a
full round, so that ``auto`` drafted at a loss). On Linux with OpenBLAS the BLAS thread
count is chosen by measurement too: for the plain step the faster of one thread and all of them;
for the speculative loop the count whole rounds run faster at, timed as rounds. Phases timed
alone mislead there: on a 2-core x86 CPU the verify forward timed alone was faster at one
thread, yet rounds that switched to one thread for the verify ran 12-14% slower than rounds at
two threads throughout (OpenBLAS's threads spin after the draft's products and contend with
MLX's), so the loop uses one count. On a Mac MLX computes on the GPU and no count is chosen.

:func:`for_policy` is the one place that decides when a run needs costs (the ``auto`` policy).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.generate import generate_step
from platformdirs import user_cache_dir

from . import blas, plain, rounds
from .cache import rollback
from .config import SamplingParams
from .cost_record import VERSION, Costs, describe, monotone, straight
from .errors import DsparkError
from .files import write_text
from .machine import machine
from .policy import Scheduler
from .policy import parse as parse_policy
from .reading import read_json

#: Cache lengths the costs are measured at (those a target holds); between them costs are interpolated.
CONTEXTS = (256, 1024, 3072)
PHASES = ("draft", "verify", "step")


def cache_dir() -> Path:
    return Path(os.environ.get("DSPARK_COSTS_DIR") or Path(user_cache_dir("dspark", "DSpark")) / "costs")


def shape_fingerprint(module) -> str:
    """What a model's cost depends on: its parameters' names, shapes and dtypes (not values)."""
    if module is None or not hasattr(module, "parameters"):
        return type(module).__name__
    h = hashlib.sha1()
    for name, v in tree_flatten(module.parameters()):
        h.update(f"{name}:{tuple(v.shape)}:{v.dtype};".encode())
    return h.hexdigest()[:16]


def key_for(target, drafter, block_size: int) -> str:
    m = machine()
    parts = [
        m["node"],
        m["cpu"],
        m["mlx"],
        m["device"],
        m["blas"].split(",")[0],
        # how long OpenBLAS's workers spin after a call moved which thread count won (dspark.blas)
        os.environ.get("OPENBLAS_THREAD_TIMEOUT", ""),
        shape_fingerprint(target.lm),
        shape_fingerprint(getattr(drafter, "net", drafter)),
        str(block_size),
        str(VERSION),
    ]
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:20]


def load_or_measure(
    target, drafter, block_size: int, remeasure: bool = False, say: Callable[[str], None] | None = None, **kw
) -> Costs:
    """The cached costs for this machine, target, drafter shape and block size, measured now
    when there are none (or ``remeasure``)."""
    key = key_for(target, drafter, block_size)
    path = cache_dir() / f"{key}.json"
    if not remeasure and path.is_file():
        try:  # through the bounded reader: a huge or 10^5-deep file is refused, not a RecursionError
            return Costs.from_dict(read_json(path, 1 << 20, "costs cache"))
        except (DsparkError, OSError, ValueError, KeyError, TypeError):
            pass  # a damaged or older file is measured again
    if say is not None:
        say(f"measuring this machine's verify and draft costs (kept in {path.parent})")
    costs = measure(target, drafter, block_size, key=key, **kw)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(costs.to_dict(), indent=1))
    except Exception:  # a read-only cache only means measuring again next time
        pass
    return costs


def for_policy(policy: str, target, drafter, block_size: int, say: Callable[[str], None] | None = None) -> Costs | None:
    """This machine's costs when the verify ``policy`` schedules by them (``auto``), else None."""
    if parse_policy(policy).kind != "auto":
        return None
    return load_or_measure(target, drafter, block_size, say=say)


def measure(
    target,
    drafter,
    block_size: int,
    *,
    contexts: tuple[int, ...] = CONTEXTS,
    repeats: int = 7,
    key: str = "",
    threads: dict[str, int] | None = None,
) -> Costs:
    """Time each phase on caches holding each of ``contexts`` tokens (those that fit the
    target's positions); medians of ``repeats`` runs after a warm-up. ``threads`` (phase ->
    BLAS threads) fixes the counts; without it the plain step keeps the count it is timed faster
    at, and the draft and the verify the count whole rounds run faster at (module docstring),
    chosen at the first context and kept at the others. Nothing of it is kept in any
    generation's state."""
    limit = _max_positions(target) - block_size - 2
    contexts = sorted({c for c in contexts if c <= limit}) or [max(1, min(contexts[0], limit))]
    first, best, stepwise = _at_context(
        target, drafter, block_size, context=contexts[0], repeats=repeats, threads=threads
    )
    # longer caches: fewer repeats and three widths (verify time is close to linear in the rows
    # between them), so that measuring stays a matter of seconds on the project's demo pair
    longer = tuple(
        (
            c,
            *_at_context(
                target,
                drafter,
                block_size,
                context=c,
                repeats=max(3, repeats // 2),
                threads=best,
                widths=sorted({0, block_size // 2, block_size}),
            )[0],
        )
        for c in contexts[1:]
    )
    verify, draft, step = first
    draft_steps: tuple[float, ...] = ()
    if stepwise:  # an autoregressive drafter: priced from whole rounds at the first context
        verify = tuple(straight(verify))  # its count is chosen across every width: no noise steps
        loop_draft, draft_steps = _stepwise_draft_ms(
            target,
            drafter,
            block_size,
            context=contexts[0],
            verify_ms=list(verify),
            threads={p: n for p, n in best.items() if p in ("draft", "verify")},
        )
        # what a round's draft pays beyond the draft timed alone (the committed pairs it reads,
        # the verify graph built beside it) taken to be the same at the longer contexts; never
        # less than the draft alone (a noisy verify timing once made the rounds' difference 0)
        loop_draft = max(loop_draft, draft)
        extra = loop_draft - draft
        longer = tuple((c, v, max(0.0, d + extra), st) for c, v, d, st in longer)
        draft = loop_draft
    blas.restore_threads()
    return Costs(
        verify_ms=verify,
        draft_ms=draft,
        step_ms=step,
        draft_steps_ms=draft_steps,
        threads=best,
        context=contexts[0],
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
        key=key,
        longer=longer,
    )


def _max_positions(target) -> int:
    config = target.config or {}
    limit = config.get("max_position_embeddings") or (config.get("text_config") or {}).get("max_position_embeddings")
    return int(limit) if isinstance(limit, int) and limit > 0 else 4096


def _at_context(
    target,
    drafter,
    block_size: int,
    *,
    context: int,
    repeats: int,
    threads: dict[str, int] | None,
    widths: list[int] | None = None,
):
    """((verify_ms by width, draft_ms, step_ms), the thread counts used, whether the drafter is
    autoregressive (its draft_ms then its first token's)) on a cache of ``context``
    random tokens, medians of ``repeats``, at the ``threads`` given (None: the fastest found);
    only ``widths`` are timed when given, the others read off the line between."""
    rng = mx.random.key(1234)
    vocab = target.dims.vocab_size
    ids = mx.random.randint(5, vocab, (context + block_size + 1,), key=rng).astype(mx.int32)
    cache = target.make_cache()
    draft_session = drafter.start(target, cache=cache)
    taps = draft_session.tap_layers
    # chunks of 512: the cache is only set up here, and wide chunks cost more in the attention masks
    rows = plain.prefill(target, cache, ids[:context].tolist(), taps, step=512)
    anchor = int(ids[context].item())
    history = ids[: context + 1].tolist()
    first = draft_session.propose(
        anchor,
        context,
        new_rows=rows,
        history=history,
        block_size=block_size,
        sampling=SamplingParams(),
        key=mx.random.key(0),
    )
    mx.eval(first.tokens, draft_session.state())

    def draft(tokens: int):
        def run():
            d = draft_session.propose(
                anchor,
                context,
                new_rows=None,
                history=history,
                block_size=tokens,
                sampling=SamplingParams(),
                key=mx.random.key(0),
            )
            rounds.read_draft(d, draft_session, display=False, heads=False)  # as a round reads it without a screen

        return run

    # an autoregressive drafter is timed at one token: each further token is one more step
    # (:func:`measure` then prices them from whole rounds)
    stepwise = getattr(draft_session, "autoregressive", False) and block_size > 1

    drafted = ids[None, context + 1 :]  # random drafts: a greedy verify costs the same whatever it accepts

    def verify(w):
        def run():
            logits, taps_ = rounds.verify_forward(
                target, cache, tap_layers=taps, anchor=anchor, draft_tokens=drafted, width=w
            )
            rounds.accept(
                logits[0],
                target.projection.softcap,
                drafted[0, :w].tolist(),
                None,
                sampling=SamplingParams(),
                key=None,
                taps=taps_,
                display=False,
            )
            rollback(cache, 1 + w)

        return run

    timed = widths or list(range(block_size + 1))
    prompt = ids[:context].tolist()
    choices = [threads.get("step", 0)] if threads is not None else _thread_choices()
    step, steps = _step_turn(target, prompt + [anchor], len(choices) * (repeats + 1))
    phases = {
        "draft": [draft(1 if stepwise else block_size)],
        "verify": [verify(w) for w in timed],
        "step": [step],
    }
    try:
        if threads is not None:
            timings, best = _interleaved_ms(phases, repeats, threads), dict(threads)
        else:
            by_threads = {n: _interleaved_ms(phases, repeats, {p: n for p in phases}) for n in choices}
            step_n = min(choices, key=lambda n: by_threads[n]["step"][0])
            loop_n = _fastest_loop_threads(target, drafter, prompt, block_size, choices=choices)
            timings = {**by_threads[loop_n], "step": by_threads[step_n]["step"]}
            best = {p: n for p, n in (("draft", loop_n), ("verify", loop_n), ("step", step_n)) if n}
    finally:
        steps.close()
    verify = monotone([_between(timed, timings["verify"], w) for w in range(block_size + 1)])
    step_ms = one_row_bound(timings["step"][0] / STEP_TOKENS, verify[0])
    return (tuple(verify), timings["draft"][0], step_ms), best, stepwise


def one_row_bound(step_ms: float, verify_one_ms: float) -> float:
    """A plain step, at most what a verify of the anchor alone costs: both are the target's
    forward over one row, the step pipelined as mlx-lm runs it (the next forward queued before the
    last token is read) and without the taps and the acceptance check, so it never costs more. A
    measurement that says it does was timed in a busier moment, and believed it would price plain
    decoding above drafting (so ``auto`` would draft at a loss)."""
    return min(step_ms, verify_one_ms)


def _between(xs: list[int], ys: list[float], x: int) -> float:
    """``ys`` at ``x``, linear between the nearest measured ``xs`` (sorted)."""
    if x in xs:
        return ys[xs.index(x)]
    i = next(j for j in range(1, len(xs)) if x < xs[j])
    return ys[i - 1] + (x - xs[i - 1]) * (ys[i] - ys[i - 1]) / (xs[i] - xs[i - 1])


def _thread_choices() -> list[int]:
    """BLAS thread counts to try: [1, all] with OpenBLAS on a multi-core machine, else [0] (leave it)."""
    n = blas.default_threads()
    if not n or n < 2:
        return [0]
    return [1, n]


#: Plain steps in one timed turn of :func:`_step_turn`.
STEP_TOKENS = 16


def _step_turn(target, prompt: list[int], turns: int):
    """(a turn, the generation it continues): each call of the turn decodes ``STEP_TOKENS``
    tokens of plain decoding as mlx-lm runs it (``generate_step``: each step queued while the
    last one computes) after ``prompt``, then waits for the step it queued, so a turn's time holds
    exactly ``STEP_TOKENS`` forwards, all at the turn's BLAS thread count, and none runs into the
    next phase's time. One generation (prefilled here, once, in chunks of 512 as a round's prefill)
    for ``turns`` turns: at 3,000 tokens a prefill per turn was most of the measuring time. A step
    timed alone, with the cache rolled back after it, cost about twice as much on the demo target:
    the pipelining is part of what a plain step costs."""
    steps = generate_step(mx.array(prompt), target.model, max_tokens=STEP_TOKENS * turns + 2, prefill_step_size=512)
    next(steps)  # the prefill and the first token
    mx.synchronize()

    def turn():
        for _ in itertools.islice(steps, STEP_TOKENS):
            pass
        mx.synchronize()

    return turn, steps


def _round_turn(target, drafter, prompt: list[int], *, count: int, threads: dict[str, int], n_rounds: int) -> float:
    """Milliseconds per round of ``n_rounds`` rounds as the engine runs them without a screen
    (``count`` drafts a round, every one verified, greedy) from ``prompt`` freshly prefilled."""
    cache = target.make_cache()
    draft_session = drafter.start(target, cache=cache)
    new_rows = plain.prefill(target, cache, prompt[:-1], draft_session.tap_layers, step=2048)
    sched = Scheduler(parse_policy(f"fixed:{count}"), count)
    anchor, position, key = prompt[-1], len(prompt) - 1, mx.random.key(0)
    history = list(prompt)
    t0 = time.perf_counter()
    for _ in range(n_rounds):
        v = rounds.speculative_round(
            target,
            draft_session,
            cache,
            anchor=anchor,
            position=position,
            new_rows=new_rows,
            history=history,
            block_size=count,
            budget=count,
            sched=sched,
            sampling=SamplingParams(),
            key=key,
            threads=threads,
            display=False,
        )
        anchor, position, new_rows = v.tokens[-1], position + v.accepted + 1, v.new_rows
        history += v.tokens
    return (time.perf_counter() - t0) / n_rounds * 1000


def _fastest_loop_threads(
    target, drafter, prompt: list[int], block_size: int, *, choices: list[int], repeats: int = 3, n_rounds: int = 8
) -> int:
    """The BLAS thread count (of ``choices``) at which whole speculative rounds run fastest:
    ``n_rounds`` rounds (:func:`_round_turn`) from the same prefilled prompt, the counts taking
    turns; median milliseconds per round after a warm-up turn."""
    if len(choices) < 2:
        return choices[0]
    ms: dict[int, list[float]] = {n: [] for n in choices}
    for rep in range(repeats + 1):
        for n in choices:
            took = _round_turn(
                target, drafter, prompt, count=block_size, threads={"draft": n, "verify": n}, n_rounds=n_rounds
            )
            if rep:
                ms[n].append(took)
    return min(choices, key=lambda n: median(ms[n]))


def _stepwise_draft_ms(
    target,
    drafter,
    block_size: int,
    *,
    context: int,
    verify_ms: list[float],
    threads: dict[str, int],
    repeats: int = 3,
    n_rounds: int = 8,
) -> tuple[float, tuple[float, ...]]:
    """An autoregressive drafter's (first token, each further token's) milliseconds, from whole
    rounds drafting each count 1..``block_size`` (taking turns, medians after a warm-up turn) less
    the verify's ``verify_ms`` at that width, made non-decreasing (:func:`monotone`: drafting more
    never costs less), each further step no dearer than the one before it. Timed alone, a draft
    misses what a round's draft pays (the committed pairs it reads first) and what it overlaps (the
    verify graph is built while it computes): the demo EAGLE-3 head's first token priced at 0.6 ms
    cost 4.7 ms in a round. Nor do its steps cost
    alike: the demo assistant's rounds paid 8.9, 12.1, 13.3 and 14.8 ms for 2 to 5 drafts, so a
    price per token drawn through 1 and ``block_size`` drafts made the 4th and 5th look twice their
    cost and ``auto`` stopped at 3 or 4 where 5 paid. The rounds start after ``context`` random
    tokens, as :func:`_at_context`'s phases do."""
    ids = mx.random.randint(5, target.dims.vocab_size, (context + 1,), key=mx.random.key(1234)).astype(mx.int32)
    prompt = ids.tolist()
    ms: dict[int, list[float]] = {count: [] for count in range(1, block_size + 1)}
    for rep in range(repeats + 1):
        for count in ms:
            took = _round_turn(target, drafter, prompt, count=count, threads=threads, n_rounds=n_rounds)
            if rep:
                ms[count].append(took)
    drafts = monotone([max(0.0, median(ms[count]) - verify_ms[count]) for count in ms])
    steps = [later - earlier for earlier, later in zip(drafts, drafts[1:])]
    # a further step is taken to cost no more than the one before it (each is the same forward,
    # and later ones overlap more of the round): a busy moment timed into one count's rounds is
    # spread over its neighbours, at worst back to one price for every step, as before
    return drafts[0], tuple(reversed(monotone(steps[::-1])))


def _interleaved_ms(phases: dict, repeats: int, threads: dict[str, int]) -> dict:
    """Median milliseconds of each function of each phase, each phase at its BLAS thread
    count (0 or absent: as it is). The functions take turns within each repeat, so a change
    of the machine's load touches them all alike; the first turn is a warm-up (kernels
    compiled, allocator caches filled)."""
    times = {phase: [[] for _ in fns] for phase, fns in phases.items()}
    for rep in range(repeats + 1):
        for phase, fns in phases.items():
            if threads.get(phase):
                blas.set_threads(threads[phase])
            for i, fn in enumerate(fns):
                t0 = time.perf_counter()
                fn()
                if rep:
                    times[phase][i].append((time.perf_counter() - t0) * 1000)
    return {phase: [median(t) for t in ts] for phase, ts in times.items()}


__all__ = [
    "Costs",
    "PHASES",
    "cache_dir",
    "describe",
    "for_policy",
    "key_for",
    "load_or_measure",
    "machine",
    "measure",
    "shape_fingerprint",
]

"""The ``auto`` policy on recorded acceptance, without the machine's noise (issue #23): how close
its decisions come to the best a policy could do, per context length.

Greedy output does not depend on the policy, and neither does what the drafter proposes at a
position (its context is the target's tap rows of the same tokens). So for each prompt this
records, once, how many drafts a round from every position would have had accepted
(``A[p]``, the drafter asked at every position of the plain greedy output, and its confidences
there), and then replays the policy on it, pricing each decision with this machine's measured
costs (``dspark costs``) at that position:

- a round verifying w drafts: ``bias * (draft + verify[w])``, committing ``min(w, A[p]) + 1``;
- a plain step: ``step``, and ``RESTART`` more for the first of a stretch (its forward is not
  pipelined with one before it);
- a shadow draft: ``bias * draft``, judged as the engine judges it (greedy: exactly ``A[p]``).

``bias`` is how much dearer a round runs inside the engine than its phases timed alone (measured
1.08-1.16 on the demo pair on a 2-core CPU). Printed per length: the geometric mean over prompts
of the speedup over plain steps for ``fixed`` (every draft), ``auto`` (this code's
:class:`dspark.policy.Scheduler`) and hindsight (at each position the better of a plain step and
the round of exactly the accepted drafts: no policy can beat it). A model, not a benchmark: its
figures rank policies; ``dspark bench --context`` measures them. Not a test (pytest does not
collect it).

    python measure/measure_policy.py [--drafter DIR] [--context 64,1024,3000] [--prompts N] [--bias B]
                                     [--save FILE | --load FILE]

Recording is the slow part (a draft at every position: ~15 minutes for both demo drafters at
three lengths on 2 CPU cores); ``--save`` keeps the recordings, the costs and the priors in a
JSON file and ``--load`` replays them in seconds, so a change to :mod:`dspark.policy` can be
compared with the rule before it on the very same acceptance and costs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESTART = 0.4  # of a plain step: the first step of a plain stretch, as a width-0 round costs


def record(target, drafter, ids: list[int], tokens: int):
    """``(start, A, confidences)`` for one prompt: A[p] for every anchor position p of the output."""
    import mlx.core as mx

    from dspark.config import GenerationConfig, SamplingParams
    from dspark.engine import generate_plain

    out = list(list(generate_plain(target, ids, GenerationConfig(max_tokens=tokens)))[-1].tokens)
    seq = list(ids) + out
    session = drafter.start(target)
    _, taps = target.forward(mx.array([seq[:-1]]), target.make_cache(), session.tap_layers, logits=False)
    accepted, confidences, fed = {}, {}, 0
    for p in range(len(ids) - 1, len(seq) - 1):
        draft = session.propose(
            seq[p],
            p,
            new_rows=taps[:, fed:p] if p > fed else None,
            history=seq[: p + 1],
            block_size=drafter.block_size,
            sampling=SamplingParams(),
            key=mx.random.key(0),
        )
        fed = p
        drafted = draft.tokens[0].tolist()
        a = 0
        while a < len(drafted) and p + 1 + a < len(seq) and drafted[a] == seq[p + 1 + a]:
            a += 1
        accepted[p] = a
        confidences[p] = draft.confidences[0].tolist() if draft.confidences is not None else None
    return len(ids) - 1, accepted, confidences


def replay(trace, costs, block: int, prior, bias: float) -> float:
    """The speedup of ``auto`` on one recorded prompt (see the module docstring)."""
    from dspark.policy import Policy, Scheduler

    start, accepted, confidences = trace
    total_tokens = len(accepted)
    s = Scheduler(Policy("auto"), block, costs, prior=prior)
    pos, made, ms, plain_before = start, 0, 0.0, False
    while made < total_tokens:
        c = costs.at(pos)
        if s.drafts(pos, total_tokens - made - 1):
            w = s.width(block, total_tokens - made - 1, confidences[pos], pos)
            a = min(w, accepted[pos])
            s.observe(w, a)
            ms += bias * (c.draft_ms + c.verify_ms[w])
            pos, made, plain_before = pos + a + 1, made + a + 1, False
            continue
        ms += c.step_ms * (1 if plain_before else 1 + RESTART)
        if s.shadow_due():  # judged at once: the replay knows what the target will commit
            ms += bias * c.draft_ms
            s.observe_shadow(pos, block, accepted[pos])
        pos, made, plain_before = pos + 1, made + 1, True
    return plain_ms(start, total_tokens, costs) / ms


def fixed(trace, costs, block: int, bias: float, hindsight: bool = False) -> float:
    start, accepted, _ = trace
    total_tokens = len(accepted)
    pos, made, ms = start, 0, 0.0
    while made < total_tokens:
        c = costs.at(pos)
        w = min(block, total_tokens - made - 1, accepted[pos] if hindsight else block)
        round_ms = bias * (c.draft_ms + c.verify_ms[w])
        if hindsight and (w == 0 or (1 + w) / round_ms <= 1 / c.step_ms):
            ms, pos, made = ms + c.step_ms, pos + 1, made + 1
            continue
        a = min(w, accepted[pos])
        ms, pos, made = ms + round_ms, pos + a + 1, made + a + 1
    return plain_ms(start, total_tokens, costs) / ms


def plain_ms(start: int, tokens: int, costs) -> float:
    return sum(costs.at(start + i).step_ms for i in range(tokens))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default=str(ROOT / "resources" / "demo" / "target"))
    p.add_argument("--drafter", action="append", help="drafter directory (repeatable; default: both demo drafters)")
    p.add_argument("--context", default="64,1024,3000", help="prompt lengths (default 64,1024,3000)")
    p.add_argument("--prompts", type=int, default=8, help="prompts of the demo set (default 8)")
    p.add_argument("--max-tokens", type=int, default=128, help="greedy tokens per prompt (default 128)")
    p.add_argument("--bias", type=float, default=1.12, help="a round in the engine / its phases alone (default 1.12)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--save", help="also write the recordings, costs and priors to this JSON file")
    g.add_argument("--load", help="replay the recordings of a --save file instead of recording")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    recorded = _load(a.load) if a.load else _record(a)
    if a.save:
        Path(a.save).write_text(json.dumps([{**r, "costs": r["costs"].to_dict()} for r in recorded]))
    geo = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
    for r in recorded:
        costs, prior, b, traces = r["costs"], r["prior"], r["block"], r["traces"]
        print(
            f"{r['drafter']:10s} {r['length']:6d} tokens: "
            f"fixed {geo([fixed(t, costs, b, a.bias) for t in traces]):.3f}x"
            f"  auto {geo([replay(t, costs, b, prior, a.bias) for t in traces]):.3f}x"
            f"  hindsight {geo([fixed(t, costs, b, a.bias, hindsight=True) for t in traces]):.3f}x",
            flush=True,
        )
    return 0


def _record(a) -> list[dict]:
    """One entry per drafter and length: its traces, costs (:class:`dspark.costs.Costs`), prior
    and block size."""
    from dspark.blas import use_fast_blas

    use_fast_blas()  # as the dspark command does, before MLX
    from dspark import costs as costs_mod
    from dspark import prompts
    from dspark.bench import contexts
    from dspark.config import GenerationConfig
    from dspark.engine import measured_acceptance, prompt_ids
    from dspark.loading import load_drafter, load_target

    target = load_target(a.target)
    texts = list(prompts.get("demo").prompts[: a.prompts])
    base = [prompt_ids(target, t, GenerationConfig()) for t in texts]
    out = []
    for path in a.drafter or [str(ROOT / "resources" / "demo" / n) for n in ("dspark", "dflash")]:
        drafter = load_drafter(path, target)
        costs = costs_mod.load_or_measure(target, drafter, drafter.block_size)
        prior = measured_acceptance(drafter, target)
        for length in contexts.parse(a.context):
            traces = [record(target, drafter, ids, a.max_tokens) for ids in contexts.padded(target, base, length)]
            out.append(
                {
                    "drafter": Path(path).name,
                    "length": length,
                    "costs": costs,
                    "prior": prior,
                    "block": drafter.block_size,
                    "traces": traces,
                }
            )
    return out


def _load(path: str) -> list[dict]:
    """``_record``'s entries from a ``--save`` file (JSON turns the traces' position keys into text)."""
    from dspark.costs import Costs

    out = []
    for r in json.loads(Path(path).read_text()):
        traces = [
            (start, {int(p): a for p, a in acc.items()}, {int(p): c for p, c in conf.items()})
            for start, acc, conf in r["traces"]
        ]
        out.append({**r, "costs": Costs.from_dict(r["costs"]), "traces": traces})
    return out


if __name__ == "__main__":
    raise SystemExit(main())

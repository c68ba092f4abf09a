"""What ``dspark make-demo`` measures of the pair it built, and the prompt set the app opens on.

The prompt set (``--only prompts``): openings of held-out files (which no demo model trained on),
kept only where the target's own 256 greedy tokens do not degenerate into a short repeated
pattern (``dspark.metrics.repetition_share`` below 0.2): on a degenerate continuation any drafter,
even a broken one, is right, and a speedup measured there is one no real text gets. Ten of the
passing prompts, spread evenly over them, make the set.

The measurements (``--only measure``, ``results.json``): greedy tau and acceptance by position on
the prompt set, acceptance by context length on the same prompts padded to 64, 1,024 and 3,000
tokens (``dspark.bench.contexts``), and a 600-token output compared with plain decoding token for
token. Speed is measured by ``dspark bench`` (interleaved, with repeats), not here.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

from .. import metrics
from ..bench.contexts import padded
from ..blas import describe as blas
from ..config import GenerationConfig
from ..corpus import heldout_prompts
from ..files import write_text
from ..metrics import repetition_share

#: How many held-out openings are tried, how many make the set, and the filter's threshold.
CANDIDATES, SET_SIZE, MAX_REPETITION = 800, 10, 0.2
CONTEXTS = (64, 1024, 3000)


def passing_openings(target, say) -> tuple[list[str], int]:
    """(the held-out openings on which the target writes 256 tokens of real text, how many were tried)."""
    from ..training.distill import greedy_continuations  # noqa: PLC0415 (slow: mlx, not needed for --help)

    texts = heldout_prompts(CANDIDATES)
    ids = [target.encode(t) for t in texts]
    say(f"prompt set: the target writes 256 tokens after each of {len(texts)} held-out openings")
    seqs = greedy_continuations(
        target, ids, max(map(len, ids)) + 256, new_tokens=256, progress=True, label="prompt filter"
    )
    keep = []
    for text, p, row, n in zip(texts, ids, seqs.tokens, seqs.lengths):
        out = [int(t) for t in row[len(p) : n]][:256]
        if len(out) == 256 and repetition_share(out) < MAX_REPETITION:
            keep.append(text)
    return keep, len(texts)


def write_prompt_set(out_file: Path, target, say) -> dict:
    """``resources/prompts/demo.json`` anew (its description is completed by the measure stage)."""
    passing, tried = passing_openings(target, say)
    if len(passing) < SET_SIZE:
        raise RuntimeError(f"only {len(passing)} of {tried} held-out openings pass the filter")
    step = len(passing) / SET_SIZE
    chosen = [passing[int(i * step)] for i in range(SET_SIZE)]
    doc = {
        "name": "Demo: codecs and stdlib (the demo target)",
        "description": (
            f"Openings from Python standard-library files the demo target never trained on: on each "
            f"the target writes 256 tokens of plausible code (no stretch that repeats a pattern of 12 "
            f"tokens or fewer covers {MAX_REPETITION:.0%} of the output; {len(passing)} of {tried} "
            f"held-out openings pass, the others degenerate into repetition that any drafter "
            f"predicts); these are {SET_SIZE} of them, spread evenly over the passing ones."
        ),
        "prompts": chosen,
        "passing": len(passing),
        "tried": tried,
    }
    write_text(out_file, json.dumps(doc, indent=1) + "\n")
    say(f"prompt set: {len(passing)} of {tried} openings pass; {SET_SIZE} written to {out_file}")
    return doc


def acceptance(target, drafter, prompts: list, tokens: int = 128) -> dict:
    """Greedy tau, acceptance by position and by context length of ``drafter`` over ``prompts``
    (texts or token ids), ``tokens`` each, every draft verified."""
    from ..engine import generate  # noqa: PLC0415 (slow: mlx, not needed for --help)

    config = GenerationConfig(max_tokens=tokens, stop_at_eos=False, policy="fixed")  # acceptance of every draft
    runs = [list(generate(target, drafter, p, config, display=False)) for p in prompts]
    rounds = [ev for run in runs for ev in run[:-1]]
    f = metrics.summarize(rounds)
    return {
        "prompts": len(prompts),
        "tokens_per_prompt": tokens,
        "tau": f.tau,
        "tau_per_prompt": [run[-1].tau for run in runs],
        "acceptance_rate": f.acceptance_rate,
        "per_position_acceptance": list(f.per_position_acceptance),
        "by_context": metrics.by_context(rounds),
    }


def measure(out: Path, drafters: dict, prompt_set: list[str], say, lossless_tokens: int = 600) -> dict:
    """``results.json``: the figures the demo README cites (module docstring)."""
    import mlx.core as mx  # noqa: PLC0415 (slow: mlx, not needed for --help)

    from ..engine import generate, generate_plain, prompt_ids, run_to_summary  # noqa: PLC0415 (slow: mlx)
    from ..loading import load_drafter, load_target  # noqa: PLC0415 (slow: mlx)

    target = load_target(out / "target")
    result = {
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "mlx": mx.__version__,
        "device": str(mx.default_device()),
        "blas": blas(),
        "drafters": {},
    }
    ids = [prompt_ids(target, p) for p in prompt_set]
    for kind in drafters:
        if not (out / kind / "config.json").is_file():
            continue
        drafter = load_drafter(out / kind, target)
        entry = {
            **acceptance(target, drafter, prompt_set, 256),
            "parameters": drafter.num_params(),
            "format": drafter.format,
        }
        entry["by_prompt_length"] = {str(L): acceptance(target, drafter, padded(target, ids, L), 128) for L in CONTEXTS}
        config = GenerationConfig(max_tokens=lossless_tokens, stop_at_eos=False, policy="fixed")
        speculative = run_to_summary(generate(target, drafter, prompt_set[0], config, display=False))
        plain = run_to_summary(generate_plain(target, prompt_set[0], config))
        entry.update(
            lossless_tokens=lossless_tokens, lossless=metrics.first_difference(speculative.tokens, plain.tokens) is None
        )
        result["drafters"][kind] = entry
        say(
            f"{kind}: tau {entry['tau']:.2f}; by prompt length "
            + ", ".join(f"{L}: {v['tau']:.2f}" for L, v in entry["by_prompt_length"].items())
            + f"; identical to plain for {lossless_tokens} tokens: {entry['lossless']}"
        )
    write_text(out / "results.json", json.dumps(result, indent=2) + "\n")
    return result


def say_stderr(text: str) -> None:
    print(f"make-demo: {text}", file=sys.stderr, flush=True)


__all__ = ["CONTEXTS", "acceptance", "measure", "passing_openings", "say_stderr", "write_prompt_set"]

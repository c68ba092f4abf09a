"""What a plain step inside a speculative run costs (issue #23): ``auto`` decodes plainly where no
round pays, and that floor is only as high as its steps are fast. Three arms decode the same greedy
tokens from the same prompts, interleaved in one process (their order alternating each repeat):

- ``mlx-lm``: mlx-lm's own ``generate_step``, the speed the floor must reach;
- ``plain_steps``: :func:`dspark.plain.plain_steps`, pipelined as ``generate_step`` is;
- ``width0``: rounds of width 0 (``verify_forward`` then ``accept``), how plain steps ran before:
  each token is read before the next forward is queued.

Printed: each arm's median milliseconds per token (prefill included, the same in every arm) and
its median ratio to mlx-lm's over the (prompt, repeat) pairs, and the load average. Not a test
(pytest does not collect it): run it by hand, on a machine as quiet as it gets.

    python measure/measure_plain_steps.py [--target DIR] [--prompts N] [--repeats R] [--max-tokens T]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default=str(ROOT / "resources" / "demo" / "target"))
    p.add_argument("--prompts", type=int, default=3, help="prompts of the demo set (default 3)")
    p.add_argument("--repeats", type=int, default=5, help="runs of each arm per prompt (default 5)")
    p.add_argument("--max-tokens", type=int, default=128, help="greedy tokens per run (default 128)")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from dspark.blas import use_fast_blas

    use_fast_blas()  # as the dspark command does, before MLX
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    from dspark import load_target, prompts
    from dspark.config import SamplingParams
    from dspark.engine import _round_keys
    from dspark.plain import plain_steps, prefill
    from dspark.rounds import accept, verify_forward

    target = load_target(a.target)
    taps, n, greedy = [0], a.max_tokens, SamplingParams()
    texts = list(prompts.get(prompts.DEFAULT).prompts)[: a.prompts]

    def mlx_lm(ids):
        return [tok for tok, _ in generate_step(mx.array(ids), target.model, max_tokens=n)]

    def pipelined(ids):
        cache = target.make_cache()
        prefill(target, cache, ids[:-1], taps, step=512)
        end = len(ids) - 1 + n
        steps = plain_steps(
            target,
            cache,
            tap_layers=taps,
            anchor=ids[-1],
            position=len(ids) - 1,
            sampling=greedy,
            keys=_round_keys(0),
            more=lambda pos: pos < end,
            threads={},
            display=False,
        )
        return [v.tokens[0] for v in steps]

    def width0(ids):
        cache = target.make_cache()
        prefill(target, cache, ids[:-1], taps, step=512)
        anchor, out = ids[-1], []
        for _ in range(n):
            logits, t = verify_forward(target, cache, tap_layers=taps, anchor=anchor, draft_tokens=None, width=0)
            _, tokens, _ = accept(
                logits[0], target.projection.softcap, [], None, sampling=greedy, key=None, taps=t, display=False
            )
            anchor = tokens[-1]
            out.append(anchor)
        return out

    arms = {"mlx-lm": mlx_lm, "plain_steps": pipelined, "width0": width0}
    ms = {k: [] for k in arms}
    ratios = {k: [] for k in arms}
    load = os.getloadavg()
    for text in texts:
        ids = target.encode(text)
        for r in range(a.repeats):
            order = list(arms) if r % 2 == 0 else list(arms)[::-1]
            seconds, outputs = {}, {}
            for name in order:
                t0 = time.perf_counter()
                outputs[name] = arms[name](ids)
                seconds[name] = time.perf_counter() - t0
            assert outputs["plain_steps"] == outputs["mlx-lm"] == outputs["width0"], "the arms decoded differently"
            for name in arms:
                ms[name].append(1000 * seconds[name] / n)
                ratios[name].append(seconds[name] / seconds["mlx-lm"])
    print(
        f"{len(texts)} prompts x {a.repeats} repeats, {n} greedy tokens; load average {load[0]:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after"
    )
    for name in arms:
        q = statistics.quantiles(ratios[name], n=4) if len(ratios[name]) > 1 else ratios[name] * 3
        print(
            f"{name:12s} {statistics.median(ms[name]):6.2f} ms/token   x{statistics.median(ratios[name]):.2f} "
            f"of mlx-lm's time (middle half {q[0]:.2f}-{q[2]:.2f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

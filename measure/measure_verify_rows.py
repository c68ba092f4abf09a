"""Where a verify forward's extra rows go (issues #23, #24): a round of 7 drafts verifies 8 rows
and, on a 2-core CPU, costs about two plain steps, which caps the demo pair's speedup near
tau / 2.4. This times the target's pieces at 1 row (a plain step) and at 1 + ``--drafts`` rows (a
round's verify), each piece evaluated alone, at both BLAS thread counts, interleaved:

- each decoder layer (sliding or full attention) over a cache of ``--context`` tokens, and the head;
- one layer's MLP and its products (gate, down) and one attention projection (q).

Printed: the median milliseconds of each piece per arm and the ratio of many rows to one. A piece
whose time grows with the rows is compute (the products), one that does not is MLX's fixed cost
per op. Not a test (pytest does not collect it): run it by hand, on a machine as quiet as it gets.

    python measure/measure_verify_rows.py [--target DIR] [--context N] [--drafts D] [--repeats R]
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
    p.add_argument("--context", type=int, default=1024, help="tokens in the cache (default 1024)")
    p.add_argument("--drafts", type=int, default=7, help="drafts verified with the anchor (default 7)")
    p.add_argument("--repeats", type=int, default=40, help="timings of each piece per arm (default 40)")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from dspark import blas

    blas.use_fast_blas()  # as the dspark command does, before MLX
    import mlx.core as mx

    from dspark.cache import rollback
    from dspark.loading import load_target

    target = load_target(a.target)
    model = target.lm.model
    cache = target.make_cache()
    mx.eval(target.lm(mx.array([[5 + (i * 7) % 3000 for i in range(a.context)]], mx.int32), cache=cache))
    layer = model.layers[0]
    times: dict[tuple, list[float]] = {}

    def timed(key, fn):
        t0 = time.perf_counter()
        mx.eval(fn())
        times.setdefault(key, []).append((time.perf_counter() - t0) * 1e3)

    rows_arms = (1, 1 + a.drafts)
    thread_arms = (1, os.cpu_count() or 1) if blas.threads() else (None,)
    for r in range(a.repeats):
        for threads in thread_arms[:: 1 if r % 2 else -1]:
            if threads:
                blas.set_threads(threads)
            for rows in rows_arms:
                ids = mx.array([[11 + i for i in range(rows)]], mx.int32)
                x = mx.random.normal((1, rows, model.layers[0].mlp.gate_proj.weight.shape[1]))
                xi = mx.random.normal((1, rows, model.layers[0].mlp.down_proj.weight.shape[1]))
                mx.eval(ids, x, xi)
                h = model.embed_tokens(ids) * model.embed_scale
                masks = model._make_masks(h, cache)
                mx.eval(h, [m for m in masks if isinstance(m, mx.array)])
                for i, (lay, c, mask) in enumerate(zip(model.layers, cache, masks)):
                    h = lay(h, mask, c)[0]
                    timed((threads, rows, f"layer {i:2d} {lay.layer_type}"), lambda h=h: h)
                timed((threads, rows, "head"), lambda h=h: target.projection.head(model.norm(h)))
                rollback(cache, rows)
                timed((threads, rows, "mlp"), lambda x=x: layer.mlp(x))
                timed((threads, rows, "mlp gate product"), lambda x=x: layer.mlp.gate_proj(x))
                timed((threads, rows, "mlp down product"), lambda xi=xi: layer.mlp.down_proj(xi))
                timed((threads, rows, "attention q product"), lambda x=x: layer.self_attn.q_proj(x))
    pieces = sorted({k[2] for k in times})
    head = f"{'piece':28s}" + "".join(f"{f'{t or 1} thr, {n} rows':>16s}" for t in thread_arms for n in rows_arms)
    print(f"{a.context}-token cache, median ms of {a.repeats}; the ratio is {rows_arms[1]} rows to 1")
    print(head + "".join(f"{f'ratio {t or 1} thr':>14s}" for t in thread_arms))
    total = {k: 0.0 for k in [(t, n) for t in thread_arms for n in rows_arms]}
    for piece in pieces:
        med = {(t, n): statistics.median(times[(t, n, piece)]) for t in thread_arms for n in rows_arms}
        if piece.startswith(("layer", "head")):
            for k, v in med.items():
                total[k] += v
        print(
            f"{piece:28s}"
            + "".join(f"{med[(t, n)]:16.3f}" for t in thread_arms for n in rows_arms)
            + "".join(f"{med[(t, rows_arms[1])] / med[(t, 1)]:14.2f}" for t in thread_arms)
        )
    print(
        f"{'forward (layers + head)':28s}"
        + "".join(f"{total[(t, n)]:16.3f}" for t in thread_arms for n in rows_arms)
        + "".join(f"{total[(t, rows_arms[1])] / total[(t, 1)]:14.2f}" for t in thread_arms)
    )
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

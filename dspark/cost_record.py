"""What a round costs on this machine, as data: the record ``dspark.costs`` measures and keeps in
its cache (:class:`Costs`), read back whole, priced at the context a round runs at, and said in
one line. No MLX: the policy, the benchmark's report and the app read it."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, replace

from .validate import costs_problem

#: Bumped whenever what is measured changes, so costs cached by an older version are measured again.
VERSION = 12


@dataclass(frozen=True, kw_only=True)
class Costs:
    verify_ms: tuple[float, ...]  # [w]: a verify forward of the anchor and w drafts, with taps
    draft_ms: float  # one drafted block (an autoregressive drafter: its first token)
    step_ms: float  # one token of plain mlx-lm decoding (generate_step)
    # what each further drafted token adds, in order: [j] the cost of token j + 2 (an autoregressive
    # drafter's steps, not alike: later ones overlap more of the round; a count past the last
    # measured pays the last); () a block drafter's block is one forward. Measured at the first
    # context, scaled as draft_ms at the others
    draft_steps_ms: tuple[float, ...] = ()
    threads: dict[str, int] = field(default_factory=dict)  # phase -> BLAS threads (empty: not set)
    context: int = 0  # committed tokens in the cache while measuring
    measured_at: str = ""
    key: str = ""
    # the same at longer contexts, (context, verify_ms, draft_ms, step_ms): a round's phases and
    # a plain step cost more as the cache grows, and not alike (sliding layers do not grow)
    longer: tuple = ()

    def to_dict(self) -> dict:
        return {"version": VERSION, **asdict(self)}

    def points(self) -> list[tuple[int, tuple[float, ...], float, float]]:
        return [(self.context, self.verify_ms, self.draft_ms, self.step_ms), *self.longer]

    def at(self, position: int) -> Costs:
        """These costs at a cache of ``position`` tokens: piecewise linear between the measured
        contexts, so a round at 3,000 tokens is priced at 3,000 tokens, not at the context the
        costs were measured at. Past the last context the last segment's slope continues, but
        never downwards (a longer cache costs no less; a noisy measurement can make the line fall,
        and followed it would price a round at zero); before the first the line continues down to
        half the smaller value at most."""
        pts = sorted(self.points())
        if len(pts) == 1:
            return self
        i = next((j for j in range(1, len(pts) - 1) if position < pts[j][0]), len(pts) - 1)
        (c0, v0, d0, s0), (c1, v1, d1, s1) = pts[i - 1], pts[i]
        f = (position - c0) / (c1 - c0) if c1 != c0 else 0.0

        def lerp(a: float, b: float) -> float:
            if f > 1:
                return b + (f - 1) * max(0.0, b - a)
            return max(a + f * (b - a), 0.5 * min(a, b))

        width = min(len(v0), len(v1))
        draft = lerp(d0, d1)
        return replace(
            self,
            verify_ms=tuple(monotone([lerp(v0[w], v1[w]) for w in range(width)])),
            draft_ms=draft,
            draft_steps_ms=tuple(x * draft / self.draft_ms for x in self.draft_steps_ms)
            if self.draft_ms > 0
            else self.draft_steps_ms,
            step_ms=lerp(s0, s1),
            context=position,
            longer=(),
        )

    @classmethod
    def from_dict(cls, d: dict) -> Costs:
        """Costs from ``to_dict``'s record, checked whole (``dspark.validate.costs_problem``):
        ValueError for a record of another version or with any value out of range, so a damaged
        or crafted cache is measured again, never acted on (10^6 BLAS threads, a negative time)."""
        if not isinstance(d, dict) or d.get("version") != VERSION:
            raise ValueError("another version")
        problem = costs_problem(d, max_threads=min(1024, os.cpu_count() or 1024))
        if problem:
            raise ValueError(problem)
        longer = tuple(_point(p) for p in d.get("longer", ()))
        return cls(
            verify_ms=tuple(float(x) for x in d["verify_ms"]),
            draft_ms=float(d["draft_ms"]),
            step_ms=float(d["step_ms"]),
            draft_steps_ms=tuple(float(x) for x in d.get("draft_steps_ms", ())),
            threads={str(k): int(v) for k, v in d.get("threads", {}).items()},
            context=int(d.get("context", 0)),
            measured_at=str(d.get("measured_at", "")),
            key=str(d.get("key", "")),
            longer=longer,
        )


def _point(p) -> tuple[int, tuple[float, ...], float, float]:
    """One longer-context point of a cached record, checked (ValueError: measured again)."""
    if not isinstance(p, (list, tuple)) or len(p) != 4 or not isinstance(p[1], (list, tuple)) or len(p[1]) > 65:
        raise ValueError("a longer-context point is malformed")
    context, verify, draft, step = int(p[0]), tuple(float(x) for x in p[1]), float(p[2]), float(p[3])
    if not 0 < context <= 10_000_000 or not all(math.isfinite(x) and 0 <= x < 1e7 for x in (*verify, draft, step)):
        raise ValueError("a longer-context point is out of range")
    return context, verify, draft, step


def monotone(values: list[float]) -> list[float]:
    """The closest non-decreasing sequence (pool adjacent violators): verifying more rows never
    costs less, and a noisy measurement that says so would mislead the scheduler."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, n2 = blocks.pop()
            m1, n1 = blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return [m for m, n in blocks for _ in range(n)]


def straight(verify_ms: list[float] | tuple[float, ...]) -> list[float]:
    """A verify's cost at widths 1.. as the least-squares line through the measured ones (never
    falling, never below the anchor alone, ``verify_ms[0]``, which is kept: one row takes another
    path through the products than two). On a CPU the cost grows about linearly with the rows; the
    measured steps and plateaus between two widths are the timings' noise, and an autoregressive
    drafter's count, chosen across every width, follows them: the demo EAGLE-3 head's costs priced
    a 4th draft at 1.3 ms of verify and a 5th at 0.6 (its rounds paid 0.4 and 0.7), so ``auto``
    drafted 3 or 5 a round and never the 4 that paid best."""
    v = list(verify_ms)
    if len(v) < 3:
        return v
    xs, ys = range(1, len(v)), v[1:]
    mx_, my = sum(xs) / len(ys), sum(ys) / len(ys)
    slope = max(0.0, sum((x - mx_) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx_) ** 2 for x in xs))
    return [v[0], *(max(v[0], my + slope * (x - mx_)) for x in xs)]


def describe(costs: Costs) -> str:
    """One line for a terminal or a status bar."""
    v = ", ".join(f"{x:.1f}" for x in costs.verify_ms)
    t = ", ".join(f"{k} {n}" for k, n in costs.threads.items())
    longer = "; ".join(
        f"at {c}: step {st:.1f}, draft {d:.1f}, verify of all {ver[-1]:.1f}" for c, ver, d, st in costs.longer
    )
    return (
        f"at {costs.context} tokens: plain step {costs.step_ms:.1f} ms, draft {costs.draft_ms:.1f} ms, verify of "
        f"0..{len(costs.verify_ms) - 1} drafts [{v}] ms"
        + (
            f"; further draft tokens [{', '.join(f'{x:.1f}' for x in costs.draft_steps_ms)}] ms"
            if costs.draft_steps_ms
            else ""
        )
        + (f"; {longer} ms" if longer else "")
        + (f"; BLAS threads: {t}" if t else "")
    )


__all__ = ["VERSION", "Costs", "describe", "monotone", "straight"]

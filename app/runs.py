"""What the window keeps of a run: the events the worker sent, and the figures derived from
them by ``dspark.metrics`` (plain Python, no Qt, no MLX)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dspark import metrics
from dspark.events import RoundEvent, Summary

BASELINE = "plain decoding"


@dataclass
class RunRecord:
    key: int
    label: str  # the drafter's name, or BASELINE
    method: str  # "speculative" or "baseline"
    prompt: str
    prompt_index: int
    drafter: str | None
    config: dict
    rounds: list[RoundEvent] = field(default_factory=list)
    drafted_text: list[tuple[str, ...]] = field(default_factory=list)  # per round, per draft
    summary: Summary | None = None

    # per-round counts, the inputs of dspark.metrics
    def accepted(self) -> list[int]:
        return [r.accepted for r in self.rounds]

    def widths(self) -> list[int]:
        return [r.verify_width for r in self.rounds]

    def committed(self) -> list[int]:
        return [len(r.committed) for r in self.rounds]

    def tokens(self) -> list[int]:
        return [t.id for r in self.rounds for t in r.committed]

    def block_size(self) -> int:
        return max((len(r.drafted) for r in self.rounds), default=0)

    def tau(self) -> float:
        return metrics.tau(self.committed())

    def acceptance_rate(self) -> float:
        return metrics.acceptance_rate(self.accepted(), self.widths())

    def per_position(self) -> list[float]:
        return metrics.per_position_acceptance(self.accepted(), self.widths())

    def histogram(self) -> list[int]:
        return metrics.accepted_length_histogram(self.accepted(), max_len=self.block_size())

    def tokens_per_sec(self) -> float:
        if self.summary is not None:
            return self.summary.tokens_per_sec
        return self.rounds[-1].tokens_per_sec if self.rounds else 0.0

    def curve(self) -> tuple[list[float], list[float]]:
        """Cumulative decode tokens/sec against seconds since the run started."""
        return [r.elapsed_seconds for r in self.rounds], [r.tokens_per_sec for r in self.rounds]

    @property
    def done(self) -> bool:
        return self.summary is not None

    @property
    def greedy(self) -> bool:
        return float(self.config.get("temperature", 0.0)) == 0.0


def identical(run: RunRecord, baseline: RunRecord | None) -> bool | None:
    """True when a finished greedy run's tokens equal the baseline's, None when it can't tell."""
    if baseline is None or not (run.done and baseline.done) or not run.greedy:
        return None
    if "cancelled" in (run.summary.finish_reason, baseline.summary.finish_reason):
        return None
    return list(run.summary.tokens) == list(baseline.summary.tokens)


def compare_rows(runs: list[RunRecord]) -> list[dict]:
    """One row per label (drafter or BASELINE), pooled over prompts, in order of first run.

    Pooled tokens/sec = all tokens / all decode seconds; speedup against the pooled baseline.
    """
    labels: dict[str, list[RunRecord]] = {}
    for r in runs:
        labels.setdefault(r.label, []).append(r)
    bases = {r.prompt_index: r for r in labels.get(BASELINE, [])}
    base_tps = _pooled_tps(labels.get(BASELINE, []))
    rows = []
    for label, rs in labels.items():
        acc = [a for r in rs for a in r.accepted()]
        wid = [w for r in rs for w in r.widths()]
        com = [c for r in rs for c in r.committed()]
        tps = _pooled_tps(rs)
        same = [identical(r, bases.get(r.prompt_index)) for r in rs] if label != BASELINE else []
        rows.append({
            "label": label,
            "method": rs[0].method,
            "drafter": rs[0].drafter,
            "runs": len(rs),
            "finished": sum(r.done for r in rs),
            "tokens": sum(len(r.tokens()) for r in rs),
            "rounds": len(com),
            "tau": metrics.tau(com),
            "acceptance_rate": metrics.acceptance_rate(acc, wid),
            "per_position_acceptance": metrics.per_position_acceptance(acc, wid),
            "tokens_per_sec": tps,
            "speedup": metrics.speedup(tps, base_tps) if base_tps else None,
            "identical": (all(same) if same and None not in same else None),
        })
    return rows


def _pooled_tps(rs: list[RunRecord]) -> float:
    done = [r for r in rs if r.done and r.summary.tokens_per_sec > 0]
    n = sum(len(r.summary.tokens) for r in done)
    secs = sum(len(r.summary.tokens) / r.summary.tokens_per_sec for r in done)
    return n / secs if secs else 0.0

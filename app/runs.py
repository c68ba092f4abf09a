"""What the app keeps of a run: the events the worker sent, and the figures derived from them
by ``dspark.metrics`` (plain Python, no Qt, no MLX)."""

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

    def figures(self) -> metrics.Figures:
        return metrics.summarize(self.rounds)

    def tokens(self) -> list[int]:
        return [t.id for r in self.rounds for t in r.committed]

    def block_size(self) -> int:
        return max((len(r.drafted) for r in self.rounds), default=0)

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
    return metrics.first_difference(run.summary.tokens, baseline.summary.tokens) is None


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
        f = metrics.summarize(e for r in rs for e in r.rounds)
        tps = _pooled_tps(rs)
        same = [identical(r, bases.get(r.prompt_index)) for r in rs] if label != BASELINE else []
        rows.append({
            "label": label,
            "method": rs[0].method,
            "drafter": rs[0].drafter,
            "runs": len(rs),
            "finished": sum(r.done for r in rs),
            "tokens": f.tokens,
            "rounds": f.rounds,
            "tau": f.tau,
            "acceptance_rate": f.acceptance_rate,
            "per_position_acceptance": list(f.per_position_acceptance),
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

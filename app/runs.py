"""What the app keeps of a run: the events the worker sent, and the figures derived from them
by ``dspark.metrics`` (plain Python, no Qt, no MLX)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dspark import metrics
from dspark.events import RoundEvent, Summary
from dspark.lossless import Verdict

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
    verdict: Verdict | None = None  # a greedy speculative run against plain decoding (app.messages.Checked)

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


def same_as_plain(verdicts: list[Verdict | None]) -> str | None:
    """One mark for one or more greedy runs checked against plain decoding: ✓ all identical,
    "≈ N ties" when every difference is a numerical tie, ✗ when any is a mismatch, None when
    some run was not checked (sampled, cancelled, or still running)."""
    if not verdicts or None in verdicts:
        return None
    if not all(v.lossless for v in verdicts):
        return "✗"
    ties = sum(not v.identical for v in verdicts)
    if not ties:
        return "✓"
    return verdicts[0].label() if len(verdicts) == 1 else f"≈ {ties} tie{'s' * (ties > 1)}"


def compare_rows(runs: list[RunRecord]) -> list[dict]:
    """One row per label (drafter or BASELINE), pooled over prompts, in order of first run.

    Pooled tokens/sec = all tokens / all decode seconds; speedup against the pooled baseline.
    """
    labels: dict[str, list[RunRecord]] = {}
    for r in runs:
        labels.setdefault(r.label, []).append(r)
    base_tps = _pooled_tps(labels.get(BASELINE, []))
    rows = []
    for label, rs in labels.items():
        f = metrics.summarize(e for r in rs for e in r.rounds)
        tps = _pooled_tps(rs)
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
            "identical": same_as_plain([r.verdict for r in rs]) if label != BASELINE else None,
        })
    return rows


def _pooled_tps(rs: list[RunRecord]) -> float:
    done = [r for r in rs if r.done and r.summary.tokens_per_sec > 0]
    n = sum(len(r.summary.tokens) for r in done)
    secs = sum(len(r.summary.tokens) / r.summary.tokens_per_sec for r in done)
    return n / secs if secs else 0.0

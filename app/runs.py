"""What the app keeps of a run: the events the worker sent, and the figures derived from them
by ``dspark.metrics`` (plain Python, no Qt, no MLX)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dspark import metrics
from dspark.events import RoundEvent, Summary
from dspark.lossless import Verdict

BASELINE = "plain decoding"
#: Fewer tokens in common than this and a speedup measures noise (a round or two): not shown.
MIN_COMPARED = 8


@dataclass
class Run:
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

    def curve(self, offset: float = 0.0) -> tuple[list[float], list[float]]:
        """Decode tokens/sec over a moving window of committed tokens, against decode seconds
        (+ ``offset``): ``dspark.metrics.rate_curve``."""
        return metrics.rate_curve(self.rounds, offset=offset)

    def decode_seconds(self) -> float:
        return metrics.decode_seconds(self.rounds[-1]) if self.rounds else 0.0

    @property
    def stopped(self) -> bool:
        return self.summary is not None and self.summary.finish_reason == "cancelled"

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


def speedup(spec: Run | None, base: Run | None) -> tuple[float, int]:
    """A finished speculative run against plain decoding of its prompt, over comparable work
    (``dspark.metrics.comparable_speedup``): (speedup, tokens compared); (0.0, 0) when either
    is missing or unfinished, (0.0, n) when n < MIN_COMPARED tokens could be compared."""
    if spec is None or base is None or not (spec.done and base.done):
        return 0.0, 0
    ratio, compared = metrics.comparable_speedup([(spec.rounds, base.rounds)])
    return (ratio if compared >= MIN_COMPARED else 0.0), compared


def compared_rates(spec: Run, base: Run) -> tuple[float, float]:
    """The two tokens/sec ``speedup`` divides (``dspark.metrics.comparable_rates``)."""
    s, b, _n = metrics.comparable_rates([(spec.rounds, base.rounds)])
    return s, b


def compare_rows(runs: list[Run], planned: int | None = None) -> list[dict]:
    """One row per label (drafter or BASELINE), pooled over prompts, in order of first run.

    Pooled tokens/sec = all tokens / all decode seconds. Speedup: each prompt's speculative
    run against plain decoding of that prompt over the tokens both made
    (``dspark.metrics.comparable_speedup``), pooled. ``planned``: prompts the job asked for.
    """
    labels: dict[str, list[Run]] = {}
    for r in runs:
        labels.setdefault(r.label, []).append(r)
    bases = {r.prompt_index: r for r in labels.get(BASELINE, []) if r.done}
    rows = []
    for label, rs in labels.items():
        f = metrics.summarize(e for r in rs for e in r.rounds)
        spec_rate = base_rate = 0.0
        same_length = True
        if label == BASELINE:
            speed, compared = (1.0, f.tokens) if bases else (0.0, 0)
        else:
            paired = [(r, bases[r.prompt_index]) for r in rs if r.done and r.prompt_index in bases]
            spec_rate, base_rate, compared = metrics.comparable_rates([(r.rounds, b.rounds) for r, b in paired])
            speed = metrics.speedup(spec_rate, base_rate) if compared >= MIN_COMPARED else 0.0
            same_length = all(len(r.summary.tokens) == len(b.summary.tokens) for r, b in paired)
        rows.append({
            "label": label,
            "method": rs[0].method,
            "drafter": rs[0].drafter,
            "runs": len(rs),
            "planned": planned or len(rs),
            "finished": sum(r.done and not r.stopped for r in rs),
            "stopped": sum(r.stopped for r in rs),
            "tokens": f.tokens,
            "rounds": f.rounds,
            "tau": f.tau,
            "acceptance_rate": f.acceptance_rate,
            "per_position_acceptance": list(f.per_position_acceptance),
            "tokens_per_sec": _pooled_tps(rs),
            "speedup": speed or None,
            "compared_tokens": compared,
            # the rates the speedup divides; they differ from tokens_per_sec when some prompt's
            # two runs made different numbers of tokens (sampling, EOS): then same_length is False
            "compared_rates": [spec_rate, base_rate],
            "same_length": same_length,
            "identical": same_as_plain([r.verdict for r in rs]) if label != BASELINE else None,
            "ttft_seconds": _mean([r.summary.ttft_seconds for r in rs if r.done]),
            "peak_memory_bytes": max((r.summary.peak_memory_bytes for r in rs if r.done), default=0),
        })
    return rows


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _pooled_tps(rs: list[Run]) -> float:
    done = [r for r in rs if r.done and r.summary.tokens_per_sec > 0]
    n = sum(len(r.summary.tokens) for r in done)
    secs = sum(len(r.summary.tokens) / r.summary.tokens_per_sec for r in done)
    return n / secs if secs else 0.0

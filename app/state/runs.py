"""What the app keeps of a run: the events the worker sent, and the figures derived from them
by ``dspark.metrics`` (plain Python, no Qt, no MLX)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from dspark import metrics
from dspark.bench import report
from dspark.events import RoundEvent, Summary
from dspark.lossless import Verdict

#: Plain decoding's arm as the user reads it (a saved run's ``label``; its ``method`` is "plain").
PLAIN_LABEL = "plain decoding"
#: Fewer tokens in common than this and a speedup measures noise (a round or two): not shown.
MIN_COMPARED = 8
#: Other programs' load per core from which figures are said to vary, and the plain decoding
#: rate's spread (p10 to p90 of its 32-token windows, over their median) from which they are.
BUSY_LOAD_PER_CORE = 0.5
VARIED_SPREAD = 0.2
_serials = itertools.count(1)


@dataclass(kw_only=True)
class Run:
    key: int
    label: str  # the drafter's name, or PLAIN_LABEL
    method: str  # "speculative" or "plain"
    prompt: str
    prompt_index: int
    drafter: str | None
    config: dict
    drafter_kind: str | None = None  # "EAGLE-3", "Gemma-4 assistant", ... (None: plain, or a file saved before kinds)
    rounds: list[RoundEvent] = field(default_factory=list)
    drafted_text: list[tuple[str, ...]] = field(default_factory=list)  # per round, per draft
    # per round, per verified draft: the text of the target's best tokens (RoundEvent.target_top)
    top_text: list[tuple[tuple[str, ...], ...]] = field(default_factory=list)
    summary: Summary | None = None
    verdict: Verdict | None = None  # a greedy speculative run against plain decoding (app.state.messages.Checked)
    machine: dict | None = None  # {"load", "own", "cores"} while it ran (app.state.messages.RunDone)
    # which run this is, for as long as the app runs: the worker's keys start again in every
    # replay, and a pane that kept a key would take a new run for the one it showed
    serial: int = field(default_factory=lambda: next(_serials))
    _figures: tuple = field(default=(-1, None), repr=False, compare=False)

    def figures(self) -> metrics.Figures:
        """``dspark.metrics.summarize`` of the rounds, computed once per number of rounds."""
        if self._figures[0] != len(self.rounds):
            self._figures = (len(self.rounds), metrics.summarize(self.rounds))
        return self._figures[1]

    def snapshot(self) -> Run:
        """This run as it is now, for one redraw: every pane of it draws the same rounds (the
        live run grows as the worker's messages arrive)."""
        return replace(
            self,
            rounds=tuple(self.rounds),
            drafted_text=tuple(self.drafted_text),
            top_text=tuple(self.top_text),
            serial=self.serial,
        )

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


def machine(runs: list[Run]) -> dict | None:
    """What else the machine did while these runs ran: the highest load average, the most of it
    that was not this app (load less the cores this process kept busy), the cores; and how much
    plain decoding's own rate varied. None when nothing was recorded."""
    recorded = [r.machine for r in runs if r.machine]
    spread = plain_spread([r for r in runs if r.method == "plain"])
    if not recorded and spread is None:
        return None
    out = {"plain_spread": spread}
    if recorded:
        out.update(
            load=max(m["load"] for m in recorded),
            cores=max(m["cores"] for m in recorded),
            others=max(max(0.0, m["load"] - m["own"]) for m in recorded),
        )
    return out


def recorded_machine(value) -> dict:
    """A saved run's "machine" as ``Run.machine`` takes it, or {} when it is not one (an older
    file, or a stranger's): three finite numbers in range, nothing else read."""
    if not isinstance(value, dict):
        return {}
    out = {}
    for key, hi in (("load", 1e4), ("own", 1e4), ("cores", 1e5)):
        v = value.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= hi:
            return {}
        out[key] = int(v) if key == "cores" else float(v)
    return out if out["cores"] >= 1 else {}


def bench_machine(doc: dict) -> dict | None:
    """A benchmark's machine, as ``machine`` gives a comparison's: the app's own record when it
    saved the benchmark, else ``dspark bench``'s load average at its start (everything then was
    other programs) and the spread of its plain trials' rates."""
    if isinstance(doc.get("machine"), dict):
        return doc["machine"]
    env = doc.get("environment") or {}
    load, cores = (env.get("load_average") or [None])[0], env.get("cpus")
    plain = next((a for a in doc.get("arms", []) if a.get("arm") == "plain"), {})
    spread = plain.get("tokens_per_sec_spread") or {}
    out = {
        "plain_spread": (spread["max"] - spread["min"]) / plain["tokens_per_sec"]
        if {"max", "min"} <= set(spread) and plain.get("tokens_per_sec")
        else None
    }
    if isinstance(load, (int, float)) and isinstance(cores, int) and cores > 0:
        out.update(load=float(load), others=float(load), cores=cores)
    return out if len(out) > 1 or out["plain_spread"] is not None else None


def plain_spread(plain: list[Run]) -> float | None:
    """How much plain decoding's rate moved: p10 to p90 of its moving-window tokens/sec (the
    curve of the Run tab) over their median; a machine left alone decodes at a steady rate."""
    rates = sorted(y for r in plain for y in r.curve()[1])
    if len(rates) < 5:
        return None
    at = lambda q: rates[min(len(rates) - 1, int(q * len(rates)))]
    return (at(0.9) - at(0.1)) / at(0.5) if at(0.5) > 0 else None


def busy_note(m: dict | None) -> str:
    """ "machine busy: 3.2 load on 2 cores, figures vary", or "" when the machine was quiet
    enough and plain decoding steady (``machine``'s figures)."""
    if not m:
        return ""
    busy = "load" in m and m["others"] >= BUSY_LOAD_PER_CORE * m["cores"]
    varied = m.get("plain_spread") is not None and m["plain_spread"] > VARIED_SPREAD
    parts = []
    if busy:
        parts.append(f"machine busy: {m['load']:.1f} load on {m['cores']} cores")
    if varied:
        parts.append(f"plain decoding varied ±{m['plain_spread'] * 50:.0f}%")
    return ", ".join(parts) + ": figures vary" if parts else ""


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


def speedup(speculative: Run | None, plain: Run | None) -> tuple[float, int]:
    """A finished speculative run against plain decoding of its prompt, over comparable work
    (``dspark.metrics.comparable_speedup``): (speedup, tokens compared); (0.0, 0) when either
    is missing or unfinished, (0.0, n) when n < MIN_COMPARED tokens could be compared."""
    if speculative is None or plain is None or not (speculative.done and plain.done):
        return 0.0, 0
    ratio, compared = metrics.comparable_speedup([(speculative.rounds, plain.rounds)])
    return (ratio if compared >= MIN_COMPARED else 0.0), compared


def pause_note(*runs: Run | None) -> str:
    """What a pause of the machine took from these runs (``dspark.metrics.pauses``), said where
    the speedup is: it is left out of both rates the speedup divides."""
    said = []
    for r in runs:
        if r is None or not r.rounds:
            continue
        for _i, seconds in metrics.pauses(r.rounds):
            who = "plain decoding" if r.method == "plain" else r.label
            said.append(f"a {seconds:.1f} s pause of the machine in {who}, left out")
    return "; ".join(said)


def compared_rates(speculative: Run, plain: Run) -> tuple[float, float]:
    """The two tokens/sec ``speedup`` divides (``dspark.metrics.comparable_rates``)."""
    s, b, _n = metrics.comparable_rates([(speculative.rounds, plain.rounds)])
    return s, b


def complete_prompts(runs: list[Run]) -> list[int]:
    """The prompts a comparison finished: plain decoding of the prompt (the last arm the worker
    runs on it) and every other arm's run ended, none of them stopped. Every figure of a
    comparison pools exactly these runs, so the table, the header and a saved benchmark agree
    while it runs and after a Stop."""
    labels = list(dict.fromkeys(r.label for r in runs))
    ended = {(r.label, r.prompt_index) for r in runs if r.done and not r.stopped}
    prompts = sorted({r.prompt_index for r in runs})
    return [p for p in prompts if (PLAIN_LABEL, p) in ended and all((label, p) in ended for label in labels)]


def compare_rows(runs: list[Run], planned: int | None = None) -> list[dict]:
    """One row per label (drafter or PLAIN_LABEL), pooled over the complete prompts
    (``complete_prompts``), in order of first run; before any prompt is complete, over every
    run so far, and the rows say so (``partial``).

    Pooled tokens/sec = all tokens / all decode seconds. Speedup: each prompt's speculative
    run against plain decoding of that prompt over the tokens both made
    (``dspark.metrics.comparable_speedup``), pooled. ``planned``: prompts the job asked for.
    """
    complete = set(complete_prompts(runs))
    pooled = [r for r in runs if r.prompt_index in complete] if complete else list(runs)
    labels: dict[str, list[Run]] = {}
    for r in pooled:
        labels.setdefault(r.label, []).append(r)
    coverage = {
        "planned": planned or len({r.prompt_index for r in runs}),
        "finished": len(complete),
        "stopped": sum(r.stopped for r in runs),
        "partial": not complete,
        "machine": machine(pooled),
    }
    plain_by_prompt = {r.prompt_index: r for r in labels.get(PLAIN_LABEL, []) if r.done}
    return [_row(label, rs, plain_by_prompt, coverage) for label, rs in labels.items()]


def _row(label: str, rs: list[Run], plain_by_prompt: dict[int, Run], coverage: dict) -> dict:
    f = metrics.summarize(e for r in rs for e in r.rounds)
    speculative_rate = plain_rate = 0.0
    same_length = True
    if label == PLAIN_LABEL:
        speed, compared = (1.0, f.tokens) if plain_by_prompt else (0.0, 0)
    else:
        paired = [(r, plain_by_prompt[r.prompt_index]) for r in rs if r.done and r.prompt_index in plain_by_prompt]
        speculative_rate, plain_rate, compared = metrics.comparable_rates([(r.rounds, b.rounds) for r, b in paired])
        speed = metrics.speedup(speculative_rate, plain_rate) if compared >= MIN_COMPARED else 0.0
        same_length = all(len(r.summary.tokens) == len(b.summary.tokens) for r, b in paired)
    return {
        "label": label,
        "method": rs[0].method,
        "drafter": rs[0].drafter,
        "kind": rs[0].drafter_kind,
        "policy": None if label == PLAIN_LABEL else str(rs[0].config.get("policy", "fixed")),
        "runs": len(rs),
        **coverage,
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
        "compared_rates": [speculative_rate, plain_rate],
        "same_length": same_length,
        "identical": same_as_plain([r.verdict for r in rs]) if label != PLAIN_LABEL else None,
        "ttft_seconds": _mean([r.summary.ttft_seconds for r in rs if r.done]),
        "peak_memory_bytes": max((r.summary.peak_memory_bytes for r in rs if r.done), default=0),
    }


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _pooled_tps(rs: list[Run]) -> float:
    done = [r for r in rs if r.done and r.summary.tokens_per_sec > 0]
    n = sum(len(r.summary.tokens) for r in done)
    secs = sum(len(r.summary.tokens) / r.summary.tokens_per_sec for r in done)
    return n / secs if secs else 0.0


def bench_costs(doc: dict) -> dict:
    """The costs a benchmark's limits were computed from: the last repeat's (measured at the
    trials' context and load), else those measured at its start."""
    last = (doc.get("costs_by_repeat") or [None])[-1]
    return last or doc.get("costs") or {}


def _same_mark(arm: dict) -> str | None:
    if "compared" not in arm:
        return None
    n, same, lossless = int(arm["compared"]), int(arm["identical"]), int(arm.get("lossless", arm["identical"]))
    if lossless < n:
        return "✗"
    ties = lossless - same
    return "✓" if not ties else f"≈ {ties} tie{'s' * (ties > 1)}"


def bench_rows(doc: dict) -> list[dict]:
    """The Compare table's rows (``app.state.runs.compare_rows``' keys) for a benchmark's arms;
    plain decoding is the row every speedup is over. Figures are the benchmark's: medians over trials."""
    rows = []
    trials_per_arm = f"{doc['prompts']['count']}×{doc['settings']['repeats']}"
    measured_on = bench_machine(doc)  # the header's "machine busy" note reads it
    for arm in doc["arms"]:
        plain = arm["arm"] == report.PLAIN
        n = int(arm.get("trials", 0))
        speed = float(arm["speedup"]) if arm.get("speedup") is not None else (1.0 if plain else None)
        rows.append(
            {
                "label": PLAIN_LABEL if plain else str(arm["arm"]),
                "method": "plain" if plain else "speculative",
                "drafter": arm.get("drafter"),
                "policy": arm.get("policy"),
                "machine": measured_on,
                "runs": n,
                "planned": n,
                "finished": n,
                "stopped": 0,
                "runs_text": trials_per_arm,
                "tokens": 0,
                "rounds": int(arm.get("rounds", 0)),
                "tau": float(arm.get("tau", 0.0)),
                "acceptance_rate": float(arm.get("acceptance_rate", 0.0)),
                "per_position_acceptance": [float(x) for x in arm.get("per_position_acceptance", [])],
                "tokens_per_sec": float(arm["tokens_per_sec"]),
                "speedup": speed,
                "speedup_spread": arm.get("speedup_spread"),
                "limit": arm.get("limit"),
                "efficiency": arm.get("efficiency"),
                "compared_tokens": 0,
                "compared_rates": [0.0, 0.0],
                "same_length": True,
                "identical": None if plain else _same_mark(arm),
                "ttft_seconds": arm.get("ttft_seconds"),
                "peak_memory_bytes": int(arm.get("peak_memory_bytes") or 0),
            }
        )
    return rows

"""What ``dspark bench`` writes: one record per trial, the figures derived from it, the
per-arm summary, and the environment record. Pure functions (no MLX) except
:func:`environment`, which asks MLX what it runs on.

Definitions (each trial generates exactly ``max_tokens`` tokens, EOS ignored, so every arm
does the same amount of work):

- ``tokens_per_sec``: tokens / decode seconds, decode seconds counted from the moment the
  prompt (all but its last token) is processed to the last token;
- ``speedup``: an arm's tokens_per_sec over plain mlx-lm decoding's on the same prompt in the
  same repeat (the two trials ran seconds apart); the arm's figure is the median over trials.
  Each plain trial runs at one BLAS thread and at all of them in turn and keeps the faster
  (``blas_threads`` in the trial; ``environment.plain_blas_threads`` is the count that won
  most trials), so plain decoding is the strongest mlx-lm here at that moment;
- ``tau``: committed tokens per round, the target's own token included;
- ``draft_ms`` / ``verify_ms`` / ``overhead_ms``: per round that drafted; overhead is everything
  else in the rounds' share of the decode time (events, text, the loop),
  ``(decode - plain steps) / rounds - draft - verify``;
- ``drafted``: tokens drafted per round that drafted (a block drafter: its block, whatever the
  policy verifies of it; an autoregressive drafter, a step each: as many as the policy asked for);
  ``draft_token_ms``: ``draft_seconds / drafted tokens``, what a drafted token cost in the loop
  (for an autoregressive drafter the price of one more step, its first step included);
- ``step_ms``: plain decoding's milliseconds per token in the paired trial;
- ``limit``: ``tau * step_ms / (t_draft + t_verify)``, the speedup this drafter and policy would
  reach with nothing but the two forwards in a round (with ``auto``'s plain steps, each at
  ``step_ms``: ``tokens * step_ms / (rounds * (t_draft + t_verify) + plain_steps * step_ms)``),
  where ``t_draft + t_verify`` is the mean over the trial's rounds of the draft cost of the tokens
  the round drafted (a block: ``draft_ms``, one forward; an autoregressive drafter: ``draft_ms``
  for its first token and ``draft_steps_ms`` for the further ones, :func:`dspark.policy.draft_cost`)
  plus the verify cost at the round's width, this machine's isolated costs (:mod:`dspark.costs`),
  measured again at the
  start of every repeat so that they share the trials' load, on a cache as long as the trials' mean
  context (the prompt and half the output: ``costs_context``); a model of the round, so a trial can
  beat it a little; ``efficiency`` = speedup / limit: how much of that the loop delivers;
- ``in_loop``: (draft_ms + verify_ms) / round time, the share of a round spent in the phases.
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import subprocess
from collections.abc import Iterable
from pathlib import Path
from statistics import median

from .. import __version__, blas, metrics
from ..policy import draft_cost
from ..reading import parse_json, read_text
from .busy import running as busy_running

PLAIN = "plain"  # plain decoding's arm
CSV_FIELDS = [
    "arm",
    "kind",
    "drafter",
    "policy",
    "repeat",
    "prompt_index",
    "tokens",
    "tokens_per_sec",
    "speedup",
    "tau",
    "acceptance_rate",
    "draft_ms",
    "verify_ms",
    "overhead_ms",
    "in_loop",
    "drafted",
    "draft_token_ms",
    "step_ms",
    "limit",
    "efficiency",
    "ttft_seconds",
    "peak_memory_bytes",
    "identical",
    "lossless",
    "per_position_acceptance",
    "blas_threads",
    "context",
    "plain_steps",
]


def committed_per_round(accepted: list[int], tokens: int) -> list[int]:
    """Tokens each round committed: a + 1, the last round cut to the output's length."""
    out, total = [], 0
    for a in accepted:
        n = min(a + 1, tokens - total)
        out.append(n)
        total += n
    return out


def derive(trial: dict, plain: dict | None, costs=None) -> dict:
    """The figures of one trial, against the plain-decoding trial it is paired with and the
    isolated costs (a :class:`dspark.costs.Costs`) of its drafter."""
    t = dict(trial)
    rounds = t.get("rounds") or 0
    decode_ms = t["decode_seconds"] * 1000
    t["tokens_per_sec"] = t["tokens"] / t["decode_seconds"] if t["decode_seconds"] > 0 else 0.0
    if rounds:
        f = metrics.figures(
            t["accepted"], t["widths"], committed_per_round(t["accepted"], t["tokens"] - t.get("plain_steps", 0))
        )
        t.update(
            tau=f.tau,
            acceptance_rate=f.acceptance_rate,
            per_position_acceptance=list(f.per_position_acceptance),
            accepted_histogram=list(f.accepted_histogram),
        )
        drafted = _drafted(t)
        t["drafted"] = sum(drafted) / rounds
        if t.get("draft_seconds") or t.get("verify_seconds"):
            rounds_ms = decode_ms - t.get("plain_seconds", 0.0) * 1000  # a trial before plain_seconds: all of it
            t["draft_ms"] = t["draft_seconds"] * 1000 / rounds
            t["verify_ms"] = t["verify_seconds"] * 1000 / rounds
            t["overhead_ms"] = rounds_ms / rounds - t["draft_ms"] - t["verify_ms"]
            t["in_loop"] = (t["draft_ms"] + t["verify_ms"]) / (rounds_ms / rounds)
            if sum(drafted):
                t["draft_token_ms"] = t["draft_seconds"] * 1000 / sum(drafted)
    if plain is not None and plain["tokens"]:
        step = plain["decode_seconds"] * 1000 / plain["tokens"]
        t["step_ms"] = step
        t["speedup"] = metrics.speedup(t["tokens_per_sec"], plain["tokens"] / plain["decode_seconds"])
        plain_steps = t.get("plain_steps", 0)
        if costs is not None and ((rounds and t.get("tau")) or plain_steps):  # auto may draft no round at all
            v, step_ms = costs.verify_ms, getattr(costs, "draft_steps_ms", ())
            ideal = (
                sum(
                    draft_cost(costs.draft_ms, step_ms, d) + v[min(w, len(v) - 1)]
                    for d, w in zip(_drafted(t), t["widths"])
                )
                / rounds
                if rounds
                else 0.0
            )
            t["limit"] = (
                t["tokens"] * step / (rounds * ideal + plain_steps * step) if plain_steps else t["tau"] * step / ideal
            )
            t["efficiency"] = t["speedup"] / t["limit"]
    return t


def _drafted(trial: dict) -> list[int]:
    """Tokens each round drafted: the trial's ``drafted_per_round`` (this engine's arms), else its
    widths (a peer, or a trial written before it was kept: every drafted token verified)."""
    drafted = trial.get("drafted_per_round")
    return list(drafted) if drafted and len(drafted) == len(trial["widths"]) else list(trial["widths"])


def plain_threads(trials: list[dict], default=None) -> dict:
    """How plain decoding's trials ran: ``plain_blas_threads``, the BLAS thread count most of
    them were judged at (each ran at every count and was judged at the one its earlier trials
    found faster: :class:`dspark.bench.arms.Plain`), and ``plain_tokens_per_sec_by_threads``,
    the median tokens/sec at each count."""
    plain = [t for t in trials if t.get("arm") == PLAIN]
    judged: dict = {}
    rates: dict[str, list[float]] = {}
    for t in plain:
        if "blas_threads" in t:
            judged[t["blas_threads"]] = judged.get(t["blas_threads"], 0) + 1
        for k, v in (t.get("tokens_per_sec_by_threads") or {}).items():
            rates.setdefault(k, []).append(v)
    return {
        "plain_blas_threads": max(judged, key=judged.get) if judged else default,
        "plain_tokens_per_sec_by_threads": {k: median(v) for k, v in rates.items()},
        "plain_trials_judged_by_threads": {str(k): n for k, n in judged.items()},
    }


#: The per-trial figures an arm's summary gives as a median with its spread (``KEY_spread``).
SPREAD_FIGURES = (
    "tokens_per_sec",
    "speedup",
    "draft_ms",
    "verify_ms",
    "overhead_ms",
    "in_loop",
    "draft_token_ms",
    "step_ms",
    "limit",
    "efficiency",
    "ttft_seconds",
)


def _spread(values: list[float]) -> dict:
    v = sorted(values)
    if not v:
        return {}
    q = lambda p: v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]  # nearest rank
    return {"median": median(v), "p25": q(0.25), "p75": q(0.75), "min": v[0], "max": v[-1], "n": len(v)}


def summarize_arm(trials: list[dict]) -> dict:
    """One arm's figures over its trials: medians (with spread) of the per-trial figures, and
    the acceptance figures pooled over every round of every trial."""
    first = trials[0]
    out = {"arm": first["arm"], "drafter": first.get("drafter"), "policy": first.get("policy"), "trials": len(trials)}
    if first.get("kind"):
        out["kind"] = first["kind"]
    if first.get("context"):
        out["context"] = first["context"]
    for key in SPREAD_FIGURES:
        values = [t[key] for t in trials if t.get(key) is not None]
        if values:
            out[key] = median(values)
            out[key + "_spread"] = _spread(values)
    out["peak_memory_bytes"] = max(t.get("peak_memory_bytes") or 0 for t in trials)
    accepted = [a for t in trials for a in t.get("accepted", [])]
    if accepted:
        widths = [w for t in trials for w in t["widths"]]
        committed = [
            c for t in trials for c in committed_per_round(t["accepted"], t["tokens"] - t.get("plain_steps", 0))
        ]
        f = metrics.figures(accepted, widths, committed)
        out.update(
            tau=f.tau,
            acceptance_rate=f.acceptance_rate,
            per_position_acceptance=list(f.per_position_acceptance),
            accepted_histogram=list(f.accepted_histogram),
            rounds=f.rounds,
            plain_steps=sum(t.get("plain_steps", 0) for t in trials),
            drafted=sum(sum(_drafted(t)) for t in trials if t.get("rounds")) / f.rounds if f.rounds else 0.0,
        )
    verdicts = [t["identical"] for t in trials if t.get("identical") is not None]
    if verdicts:
        out["identical"] = sum(verdicts)
        out["compared"] = len(verdicts)
        out["lossless"] = sum(bool(t.get("lossless")) for t in trials if t.get("identical") is not None)
    return out


def summarize(trials: Iterable[dict]) -> list[dict]:
    """Per-arm summaries (per arm and prompt length, with ``--context``), in the order the arms
    first appear. A peer's arm also says how this project's loop compares with it on the same
    work (:func:`versus_peer`)."""
    by_arm: dict[tuple, list[dict]] = {}
    for t in trials:
        by_arm.setdefault((t.get("context"), t["arm"]), []).append(t)
    out = [summarize_arm(ts) for ts in by_arm.values()]
    for (context, _), ts, s in zip(by_arm.keys(), by_arm.values(), out):
        if s.get("policy") == PEER_POLICY:
            ours = by_arm.get((context, f"{s['drafter']} fixed"))
            if ours:
                s.update(versus_peer(ours, ts))
    return out


#: A peer's arms run its own loop: every drafted token verified, as this project's ``fixed``.
PEER_POLICY = "peer"


def versus_peer(ours: list[dict], peer: list[dict]) -> dict:
    """This project's ``fixed`` arm against a peer's arm with the same drafter: tokens per second
    of the two trials of one prompt in one repeat (seconds apart, the same work: every drafted
    token verified), divided, paired trial by trial (``vs_project``: ours / the peer's, median and
    spread). Not the two arms' speedups divided: each environment's plain decoding differs."""
    theirs = {(t.get("prompt_index"), t.get("repeat")): t["tokens_per_sec"] for t in peer if t.get("tokens_per_sec")}
    ratios = [
        t["tokens_per_sec"] / theirs[(t.get("prompt_index"), t.get("repeat"))]
        for t in ours
        if t.get("tokens_per_sec") and theirs.get((t.get("prompt_index"), t.get("repeat")))
    ]
    if not ratios:
        return {}
    return {"vs_project": median(ratios), "vs_project_spread": _spread(ratios), "vs_project_arm": ours[0]["arm"]}


def environment(repo: Path | None = None) -> dict:
    """OS, CPU, MLX and its device, the BLAS and its threads, and the git revision."""
    import mlx.core as mx  # noqa: PLC0415 (slow: mlx, not needed for --help)

    from .. import device  # noqa: PLC0415 (not needed for --help)
    from ..machine import machine  # noqa: PLC0415 (slow: mlx, not needed for --help)

    env = {
        **machine(),
        "python": platform.python_version(),
        "dspark": __version__,
        "blas_threads": blas.threads(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "busy_processes": busy_running(),  # --load: the load the benchmark added itself
    }
    try:
        import mlx_lm  # noqa: PLC0415 (slow: mlx-lm, not needed for --help)

        env["mlx_lm"] = mlx_lm.__version__
    except (ImportError, AttributeError):
        pass
    env["metal"] = bool(getattr(mx, "metal", None) and mx.metal.is_available())
    if checked := device.describe_current():  # the app's first-launch GPU check: what it found, what it chose
        env["device_check"] = checked
    root = repo or Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        if rev.returncode == 0:
            env["git"] = rev.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return env


class TrialLog:
    """``trials.jsonl`` and ``trials.csv`` in the output folder, appended and flushed after
    every trial, so an interrupted benchmark keeps everything that finished. A trial is written
    whole or not at all: a write that fails (a full disk) cuts each file back to where it was, so
    no half line is left for a reader to trip on, and raises the OSError."""

    def __init__(self, folder: Path):
        self.jsonl, self.csv = folder / "trials.jsonl", folder / "trials.csv"
        if not self.csv.exists() or self.csv.stat().st_size == 0:
            self._append(self.csv, self._csv_line(dict(zip(CSV_FIELDS, CSV_FIELDS))))

    @staticmethod
    def _csv_line(row: dict) -> str:
        text = io.StringIO()
        csv.DictWriter(text, fieldnames=CSV_FIELDS, extrasaction="ignore").writerow(row)
        return text.getvalue()

    @staticmethod
    def _append(path: Path, text: str) -> None:
        with path.open("a", newline="") as f:
            start = f.tell()
            try:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            except OSError:
                try:
                    f.truncate(start)
                except OSError:
                    pass
                raise

    def add(self, trial: dict) -> None:
        row = {k: trial.get(k, "") for k in CSV_FIELDS}
        row["per_position_acceptance"] = " ".join(f"{x:.4f}" for x in trial.get("per_position_acceptance") or [])
        before = self.jsonl.stat().st_size if self.jsonl.exists() else 0
        self._append(self.jsonl, json.dumps(trial) + "\n")
        try:
            self._append(self.csv, self._csv_line(row))
        except OSError:
            with self.jsonl.open("r+") as f:  # the trial is in both files or in neither
                f.truncate(before)
            raise

    def close(self) -> None:
        """Nothing stays open between trials; kept so callers can say when they are done."""


#: A trials file larger than this was not written by dspark bench.
MAX_TRIALS_BYTES = 256 * 2**20


def read_trials(folder: Path) -> list[dict]:
    """The trials of a benchmark folder (none when it has no trials.jsonl), read as every file is
    (``dspark.reading``: a regular file, bounded; each line bounded JSON)."""
    path = folder / "trials.jsonl"
    if not path.exists():
        return []
    lines = read_text(path, MAX_TRIALS_BYTES, "trials file").splitlines()
    return [parse_json(line, f"{path}, line {i + 1}") for i, line in enumerate(lines) if line.strip()]


__all__ = [
    "CSV_FIELDS",
    "PLAIN",
    "TrialLog",
    "committed_per_round",
    "derive",
    "environment",
    "plain_threads",
    "read_trials",
    "summarize",
    "summarize_arm",
]

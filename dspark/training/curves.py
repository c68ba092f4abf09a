"""A training run's curves, kept in its folder as ``train_log.jsonl``: one JSON line per step (the
loss and its terms, anchors per second, the training seconds so far) and one per held-out
measurement (tau and acceptance by position on held-out prompts, with the seconds it cost), so
whatever draws them (the app, a notebook) reads the run's folder, during the run or after it.

``--resume`` keeps the lines up to the checkpoint it resumes from and drops the rest (steps a
killed run took after its last checkpoint are taken again), and the training seconds go on from
where they stopped: the curves of a resumed run are those of one run straight through.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..errors import DsparkError
from ..files import reason, write_text
from ..metrics import summarize

LOG_FILE = "train_log.jsonl"
#: The largest log read back: about 30 million steps' lines.
MAX_LOG_BYTES = 4 * 2**30


def read_log(out: str | Path) -> list[dict]:
    """The lines of ``out``'s log that are whole JSON objects with a step (a line cut short by a
    killed run is left out), in order; none when there is no log."""
    path = Path(out) / LOG_FILE
    if not path.is_file() or path.stat().st_size > MAX_LOG_BYTES:
        return []
    with path.open(encoding="utf-8", errors="replace") as f:
        return step_entries(f)


def step_entries(lines) -> list[dict]:
    """Of a log's ``lines`` (text or bytes), those that are whole JSON objects with a step, in
    order: what the run itself and the app's reader of a growing log both keep."""
    entries = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("step"), int):
            entries.append(entry)
    return entries


class TrainLog:
    """The log of the run in ``out`` from step ``step`` on (0: a new run, whose log starts empty);
    only the process that writes the run (``main``) writes it."""

    def __init__(self, out: Path, *, step: int, main: bool):
        self.path, self.main, self.first = Path(out) / LOG_FILE, main, step
        kept = [e for e in read_log(out) if e["step"] <= step] if step else []
        self.seconds = max((float(e.get("seconds", 0.0)) for e in kept), default=0.0)
        if main:
            write_text(self.path, "".join(json.dumps(e) + "\n" for e in kept))

    def add(self, entry: dict) -> None:
        if not self.main:
            return
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(entry, allow_nan=False) + "\n")
        except OSError as e:  # the last checkpoint stays whole: the run stops with a sentence
            raise DsparkError(f"could not write {self.path}: {reason(e, self.path)}") from None

    def step(
        self,
        step: int,
        *,
        seconds: float,
        losses: tuple[float, ...],
        anchors_per_sec: float,
        steps: int,
        block_size: int,
    ) -> None:
        """Step ``step`` of the run's ``steps``, ``seconds`` of training into this stretch of the run;
        ``anchors_per_sec`` its rate, each anchor a block of ``block_size`` trained tokens."""
        loss, ce, tv, conf = (round(x, 5) if math.isfinite(x) else None for x in losses)
        stretch = max(step - self.first, 0)
        self.add(
            {
                "step": step,
                "steps": steps,
                "seconds": round(self.seconds + seconds, 3),
                "loss": loss,
                "ce": ce,
                "tv": tv,
                "conf": conf,
                "anchors_per_sec": round(anchors_per_sec, 2),
                "steps_per_sec": round(stretch / seconds, 4) if seconds > 0 else 0.0,
                "tokens_per_sec": round(anchors_per_sec * block_size, 1),
            }
        )

    def heldout(self, step: int, *, seconds: float, figures: dict, cost: float, best: bool = False) -> None:
        """A held-out measurement after step ``step``: ``figures`` (tau, acceptance by position, how
        many prompts and tokens) and the ``cost`` in seconds it took, not counted as training;
        ``best``: the best of the run so far, whose weights are kept (:mod:`.best`)."""
        entry = {"step": step, "seconds": round(self.seconds + seconds, 3), "heldout": figures, "eval_seconds": cost}
        self.add({**entry, "best": True} if best else entry)


def heldout_figures(target, drafter, prompts, tokens: int) -> dict:
    """Tau and acceptance by position of ``drafter`` on ``prompts`` (``tokens`` each, greedy, every
    draft verified): the real loop, as the final evaluation runs it."""
    from .calibrate import collect_rounds  # noqa: PLC0415 (slow: the engine, only to measure)

    _, per_prompt = collect_rounds(target, drafter, prompts, max_tokens=tokens)
    f = summarize(e for events, _ in per_prompt for e in events)
    return {
        "tau": f.tau,
        "per_position_acceptance": list(f.per_position_acceptance),
        "prompts": len(prompts),
        "tokens": tokens,
    }


__all__ = ["LOG_FILE", "TrainLog", "heldout_figures", "read_log", "step_entries"]

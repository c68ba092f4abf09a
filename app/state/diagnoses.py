"""Run ▸ Diagnose without Qt: what a diagnosis takes from the person's choices, and what the list
beside the plots says of each drafter's result.

A diagnosis takes every ticked drafter, one after another (the list then has one group per
drafter, as the Compare table has one row each); with none ticked, the selected one. It runs on
what Compare runs on (the prompt, or every prompt of the set with "Compare on every prompt of the
set"), with the settings as the form has them (temperature, block size, chat template, ...);
``dspark.diagnose`` verifies every draft whatever the verify policy. The findings are
``dspark.diagnose``'s, most severe first, each sentence naming the app's controls where the
command line's flags stood (``in_app``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from dspark.diagnose.findings import Diagnosis, Finding, ordered, refused

from .choices import Choices, drafter_label
from .wording import in_app

KIND = "diagnose"  # the session's job kind for Run ▸ Diagnose
#: Each severity's mark, shown with its word (never colour alone): ✖ error, ▲ warn, ● info.
MARKS = {"error": "✖", "warn": "▲", "info": "●"}
HEALTHY = "no finding: nothing in these measurements explains lower acceptance"
BUSY_RUN = "a run is in progress: diagnose after it"
BUSY_DIAGNOSING = "a diagnosis is running: wait for it to end, or press Stop"
RUN_REFUSED = "a diagnosis is running: press Run again once it has ended, or Stop it first"
NO_DRAFTER = "no drafter to diagnose: tick one under Drafters (File ▸ Add drafter… adds one)"

#: The sentences' command-line advice, as what to do in the app (before ``in_app`` names the rest).
PHRASES = {
    "drop --ignore-chat-template": "tick the Chat template setting",
    "(--ignore-chat-template)": "(the Chat template setting off)",
}
VALUED = re.compile(r"--block-size (\d+)")


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One drafter of a diagnosis: what it ran on, then its result (or why there is none)."""

    label: str
    drafter: str  # the drafter directory
    target: str
    what: str  # the prompts and settings, in words
    diagnosis: Diagnosis | None = None
    ended: str = ""  # no diagnosis and the job is over: "stopped" or "not diagnosed"
    prompts: tuple[str, ...] = ()  # what it ran on (none for a refused drafter: nothing ran)

    def findings(self) -> tuple[Finding, ...]:
        """Most severe first (``dspark.diagnose.findings.ordered``), whatever order they came in."""
        return ordered(self.diagnosis.findings) if self.diagnosis is not None else ()


def drafters(c: Choices) -> list[str]:
    """Every ticked drafter that can run, else the selected one (if it can)."""
    ticked = c.checked()
    if ticked:
        return ticked
    one = c.run_drafter()
    return [one] if one and not c.error(one) else []


def described(config: dict, prompts: int) -> str:
    """ "1 prompt · 96 tokens · greedy · block size 7": what a diagnosis ran with."""
    t = float(config.get("temperature", 0.0))
    block = config.get("block_size")
    parts = [
        f"{prompts} prompt{'s' * (prompts != 1)}",
        f"{config.get('max_tokens', 256)} tokens",
        "greedy" if t <= 0 else f"temperature {t:g}",
        f"block size {block}" if block else "its own block size",
    ]
    if config.get("chat_template") is False:
        parts.append("no chat template")
    return " · ".join(parts)


def plan(c: Choices) -> list[Entry]:
    """An entry per drafter to diagnose, then one per drafter the loader refused for this target
    (an assistant made for another Gemma-4 size): its finding is that refusal, nothing is run."""
    what, prompts = described(c.config, len(c.compare_prompts())), tuple(c.compare_prompts())
    out = [Entry(label=drafter_label(p), drafter=p, target=c.target, what=what, prompts=prompts) for p in drafters(c)]
    return out + [
        Entry(label=d.label, drafter=d.path, target=c.target, what="not run", diagnosis=refused(d.refused))
        for d in c.drafters
        if d.refused
    ]


def of_other_prompts(entries, shown: set[str]) -> bool:
    """Whether the runs beside the list (``shown``: their prompts) ran on a prompt the diagnosis did
    not: its τ and acceptance are then not theirs (3.79 beside a run's 3.71), and the list says so."""
    ran = next((set(e.prompts) for e in entries if e.prompts), None)
    return ran is not None and bool(shown) and not shown <= ran


def with_result(entries: list[Entry], drafter: str, diagnosis: Diagnosis) -> list[Entry]:
    return [replace(e, diagnosis=diagnosis) if e.drafter == drafter else e for e in entries]


def ended(entries: list[Entry], cancelled: bool) -> list[Entry]:
    """The job is over: a drafter without a result was stopped, or not diagnosed (said in the
    message bar: it did not load, or the settings do not fit the target)."""
    why = "stopped" if cancelled else "not diagnosed"
    return [e if e.diagnosis is not None else replace(e, ended=why) for e in entries]


def sentence(f: Finding) -> str:
    """The finding's sentence as the app says it: its controls, not the command line's flags."""
    text = f.sentence
    for phrase, words in PHRASES.items():
        text = text.replace(phrase, words)
    return in_app(VALUED.sub(r"the Block size setting at \1", text))


def figures(d: Diagnosis) -> str:
    """ "τ 2.29 over 42 rounds · first draft accepted in 52% (its profile: 88%)": the figures the
    findings weigh, short (acceptance at every position is the plot beside it)."""
    if any(f.code == "target_refused" for f in d.findings):
        return "not run: it does not load for this target"
    out = f"τ {d.tau:.2f} over {d.rounds} rounds"
    if d.per_position_acceptance:
        out += f" · first draft accepted in {d.per_position_acceptance[0]:.0%}"
        if d.expected_per_position:
            out += f" (its profile: {d.expected_per_position[0]:.0%})"
    return out


__all__ = [
    "BUSY_DIAGNOSING",
    "BUSY_RUN",
    "Entry",
    "HEALTHY",
    "KIND",
    "MARKS",
    "NO_DRAFTER",
    "RUN_REFUSED",
    "described",
    "drafters",
    "ended",
    "figures",
    "of_other_prompts",
    "plan",
    "sentence",
    "with_result",
]

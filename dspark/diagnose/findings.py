"""What a diagnosis says, as plain data (no MLX: the app's GUI thread reads it).

A :class:`Finding` is one cause the diagnosis found: a stable machine-readable ``code`` (the
table in docs/diagnosis.md), a ``severity``, one sentence with the figures and what to do, and the
``evidence`` (the figures themselves, JSON-ready). A :class:`Diagnosis` is every finding, most
severe first, with the acceptance it measured and the acceptance the drafter's profile says it
should reach.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Severities, most severe first: ``error`` (a cause that ruins acceptance), ``warn`` (one that
#: costs a visible share of it), ``info`` (worth knowing, nothing to fix).
SEVERITIES = ("error", "warn", "info")

#: Every code a diagnosis can give, in the order the checks run (ties in severity keep it).
CODES = (
    "target_refused",
    "target_mismatch",
    "convention",
    "chat_template_off",
    "thinking_mode",
    "block_beyond_trained",
    "context_length",
    "sampling",
    "low_acceptance",
)


@dataclass(frozen=True)
class Finding:
    code: str  # one of CODES
    severity: str  # one of SEVERITIES
    sentence: str  # the cause with its figures, then what to do
    evidence: dict = field(default_factory=dict)  # the figures, JSON-ready

    def to_dict(self) -> dict:
        return {
            "code": self.code,
            "severity": self.severity,
            "sentence": self.sentence,
            "evidence": dict(self.evidence),
        }


@dataclass(frozen=True, kw_only=True)
class Diagnosis:
    findings: tuple[Finding, ...]  # most severe first
    per_position_acceptance: tuple[float, ...]  # measured (dspark.metrics.per_position_acceptance)
    expected_per_position: tuple[float, ...] | None  # the profile's, None without one
    tau: float  # measured tokens per round (dspark.metrics.tau)
    rounds: int = 0  # rounds measured in the main pass
    prompts: int = 0
    profile_source: str | None = None  # where the expected figures come from (None: no profile)

    def to_dict(self) -> dict:
        """The ``dspark diagnose --json`` object."""
        return {
            "findings": [f.to_dict() for f in self.findings],
            "per_position_acceptance": list(self.per_position_acceptance),
            "expected_per_position": None if self.expected_per_position is None else list(self.expected_per_position),
            "tau": self.tau,
            "rounds": self.rounds,
            "prompts": self.prompts,
            "profile": self.profile_source,
        }

    def worst(self) -> str | None:
        """The most severe severity found, None when nothing was."""
        return self.findings[0].severity if self.findings else None


def refused(sentence: str) -> Diagnosis:
    """The diagnosis of a drafter the loader refuses for this target (an assistant made for another
    Gemma-4 size, a head of another hidden size or vocabulary): nothing could be measured, and the
    refusal, one sentence naming the value, is the finding."""
    return Diagnosis(
        findings=(Finding("target_refused", "error", sentence, {}),),
        per_position_acceptance=(),
        expected_per_position=None,
        tau=0.0,
    )


def ordered(findings) -> tuple[Finding, ...]:
    """Most severe first; findings of one severity in the order of CODES."""
    found = [f for f in findings if f is not None]
    return tuple(sorted(found, key=lambda f: (SEVERITIES.index(f.severity), CODES.index(f.code))))


def describe(d: Diagnosis) -> str:
    """The diagnosis as lines of text (what ``dspark diagnose`` prints)."""
    if any(f.code == "target_refused" for f in d.findings):  # nothing ran: no figures to print
        return "\n".join(["nothing measured: the drafter does not load for this target"] + _lines(d.findings))
    pos = " ".join(f"{x:.2f}" for x in d.per_position_acceptance)
    lines = [
        f"measured {d.rounds} rounds on {d.prompts} prompt{'s' * (d.prompts != 1)}: tau {d.tau:.2f}, "
        f"acceptance by position {pos or '(none)'}"
    ]
    if d.expected_per_position is not None:
        lines.append(
            f"expected (profile: {d.profile_source}): " + " ".join(f"{x:.2f}" for x in d.expected_per_position)
        )
    else:
        lines.append("no profile of this drafter: nothing to compare with (dspark diagnose --record measures one)")
    if not d.findings:
        lines.append("no finding: nothing in these measurements explains lower acceptance")
    return "\n".join(lines + _lines(d.findings))


def _lines(findings) -> list[str]:
    return [f"{f.severity:5}  {f.code}: {f.sentence}" for f in findings]


__all__ = ["CODES", "SEVERITIES", "Diagnosis", "Finding", "describe", "ordered", "refused"]

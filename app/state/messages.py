"""What the window and the model-owner thread say to each other: frozen dataclasses of plain
data (the engine's own ``dspark.events`` inside), so nothing that crosses the thread boundary
is an MLX object or a mutable structure both sides could touch."""

from __future__ import annotations

from dataclasses import dataclass, field

from dspark.diagnose.findings import Diagnosis
from dspark.events import RoundEvent, Summary
from dspark.lossless import Verdict


# --- GUI -> worker --------------------------------------------------------------------------
@dataclass(frozen=True)
class Arm:
    label: str  # the drafter's name, or "plain decoding"
    drafter: str | None  # drafter directory; None for plain decoding


@dataclass(frozen=True, kw_only=True)
class Job:
    """Every (prompt, arm) pair in turn, on one loaded target."""

    id: int
    kind: str  # "run", "compare" or "diagnose" (Run ▸ Diagnose: each arm's drafter diagnosed in turn)
    target: str
    prompts: tuple[str, ...]
    arms: tuple[Arm, ...]
    config: dict = field(default_factory=dict)  # GenerationConfig fields


@dataclass(frozen=True)
class LoadRequest:
    target: str
    drafters: tuple[str, ...] = ()


@dataclass(frozen=True)
class CostsRequest:
    """This machine's verify and draft costs for each drafter on the target (``dspark.costs``):
    the cached ones, or measured again when ``remeasure``."""

    target: str
    drafters: tuple[str, ...]
    remeasure: bool = False


@dataclass(frozen=True, kw_only=True)
class ExportRequest:
    """File ▸ Export drafter…: ``dspark export`` of ``drafter`` as ``format`` into ``out``; with a
    ``target``, the acceptance left without the heads is measured on ``prompts``."""

    drafter: str
    format: str  # speculators, deepspec or zlab
    out: str
    verifier: str = ""
    drop_heads: bool = False
    force: bool = False
    target: str = ""
    prompts: tuple[str, ...] = ()
    tokens: int = 128


# --- worker -> GUI --------------------------------------------------------------------------
@dataclass(frozen=True)
class Status:
    text: str


@dataclass(frozen=True)
class Failed:
    text: str  # one line for the person at the screen


@dataclass(frozen=True, kw_only=True)
class DrafterInfo:
    block_size: int
    confidence: bool
    params: int
    note: str | None = None  # e.g. trained against other weights of this target
    format: str = "dspark-drafter"  # the checkpoint format (dspark.formats)
    kind: str = ""  # its kind in words (dspark.loading.drafter_kind): "DSpark", "EAGLE-3", "Gemma-4 assistant", ...
    autoregressive: bool = False  # drafts a token a step: block_size is its default tokens a round, not a trained block


@dataclass(frozen=True, kw_only=True)
class Loaded:
    target: str
    target_id: str
    drafters: dict  # path -> DrafterInfo, for the drafters that loaded
    errors: dict  # path -> one-line reason, for those that did not
    environment: dict = field(default_factory=dict)  # dspark.bench.report.environment(), asked of MLX here
    notes: tuple = ()  # warnings of the target's load (memory), as the CLI prints them
    refused: dict = field(default_factory=dict)  # path -> the loader's refusal for this target (made for another one)


@dataclass(frozen=True)
class Progress:
    """A long task's progress (Run ▸ Measure costs): ``done`` of ``total`` steps, what is being
    done now, and about how many seconds are left (None: not known yet); done == total ends it."""

    task: str
    done: int
    total: int
    now: str = ""
    seconds_left: float | None = None


@dataclass(frozen=True)
class CostsMeasured:
    """A drafter's measured costs on the loaded target (``dspark.costs.Costs.to_dict()``)."""

    drafter: str  # the drafter directory
    costs: dict


@dataclass(frozen=True, kw_only=True)
class RunStarted:
    job: int
    key: int  # identifies the run in RoundDone / RunDone
    label: str
    method: str  # "speculative" or "plain"
    drafter: str | None
    prompt: str
    prompt_index: int
    config: dict
    drafter_kind: str | None = None  # the drafter's kind in words (DrafterInfo.kind); None: plain, or an older file


@dataclass(frozen=True)
class RoundDone:
    key: int
    event: RoundEvent
    drafted_text: tuple[str, ...]  # each drafted token's text, for the draft grid
    # the rejection inspector: per verified position, the text of each of the target's best tokens
    # (RoundEvent.target_top), for the cell's story; () when the round was not inspected
    top_text: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class RunDone:
    key: int
    summary: Summary
    # the machine while it ran: {"load": 1-minute load average at its end, "own": cores this
    # process kept busy (its CPU seconds over the run's seconds), "cores"}; {} when unknown
    machine: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Checked:
    """A greedy speculative run (``key``) checked against plain decoding of its prompt."""

    key: int
    verdict: Verdict


@dataclass(frozen=True)
class JobDone:
    job: int
    ok: bool
    cancelled: bool


@dataclass(frozen=True)
class Exported:
    """An export written whole: where, and what it says (``dspark.export.summary``)."""

    out: str
    text: str


@dataclass(frozen=True)
class Diagnosed:
    """One drafter's diagnosis (Run ▸ Diagnose), as ``dspark.diagnose`` gave it: plain data,
    findings most severe first."""

    job: int
    drafter: str  # the drafter directory
    diagnosis: Diagnosis

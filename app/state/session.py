"""The app's state without Qt (napari's split): the current job, its runs, the last
comparison, and what the panes show. The window feeds it the worker's (or a replay's)
messages and hands ``view()`` to every pane; tests drive it with plain messages, no window and
no models.

Two results live side by side: the runs of the last job (the Run tab) and the runs of the last
comparison (the Compare tab). A single run after a comparison replaces the first, never the
second, so what each tab shows is what it exports. The header describes the tab on screen.
A ``dspark bench`` result opened from a file takes the Compare tab's place until the next
comparison starts. ``costs_request`` is Run ▸ Measure costs asked of the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import diagnoses
from .choices import Choices, drafter_label
from .messages import (
    Arm,
    Checked,
    CostsMeasured,
    CostsRequest,
    Diagnosed,
    Job,
    JobDone,
    Loaded,
    Progress,
    RoundDone,
    RunDone,
    RunStarted,
)
from .runs import PLAIN_LABEL, Run, bench_costs, bench_rows, compare_rows

RUN_TAB, COMPARE_TAB = "run", "compare"
REJECTIONS_TAB = "rejections"  # the rejection inspector's views of the last job (its run, or every drafter of it)


@dataclass(frozen=True, kw_only=True)
class View:
    """What the panes draw, derived from the session at one moment."""

    kind: str  # the kind of the job whose runs the Run tab shows: "run" or "compare" ("" before any)
    tab: str  # the tab on screen (RUN_TAB, COMPARE_TAB or REJECTIONS_TAB): the header describes it
    speculative: Run | None  # the speculative run the Run tab shows
    plain: Run | None  # plain decoding of the same prompt
    runs: tuple[Run, ...]  # every run of the last job, in order
    prompts: int  # prompts of the last job
    comparison: tuple[Run, ...]  # every run of the last comparison
    rows: tuple[dict, ...]  # its table
    compare_prompts: int  # prompts of the last comparison
    focus: str | None  # the drafter (a row label) the header and the Run tab describe after a comparison
    busy: bool
    replay: str = ""  # "" for live runs; else what is being replayed, for the header
    bench: dict | None = None  # a dspark bench summary the Compare tab shows instead of a comparison
    costs: dict | None = None  # drafter name -> measured costs (Costs.to_dict()) the Compare tab draws
    message: str = ""  # the red message bar: what went wrong last ("" hides it)
    caption: str = ""  # the prompt line: what the last job ran on, or the benchmark shown
    compare_replay: str = ""  # what the Compare tab's comparison replays ("" when it ran here)
    progress: Progress | None = None  # a long task under way (measuring costs, a diagnosis)
    diagnoses: tuple[diagnoses.Entry, ...] = ()  # the last Run ▸ Diagnose, one entry per drafter
    # every drafter's name in the order this session first met it: its colour's place in the
    # theme's series (app.panes.theme.drafter_colours), kept when another drafter is unticked
    colour_order: tuple[str, ...] = ()

    def row(self, label: str | None) -> dict | None:
        return next((r for r in self.rows if r["label"] == label), None)


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def drafter_detail(d) -> str:
    """A loaded drafter in words (the drafter list's tooltip): its kind and format, how it drafts,
    its size. An autoregressive drafter's tokens a round are a default the policy may change."""
    how = (
        f"drafts a token a step, {d.block_size} a round by default"
        if d.autoregressive
        else f"{d.block_size} drafts per round"
    )
    return f"{d.kind or d.format} drafter ({d.format}), {how}, {d.params:,} parameters" + (
        ", confidence head" if d.confidence else ""
    )


class Session:
    def __init__(self, prompt_sets: dict[str, list[str]] | None = None):
        self.choices = Choices(prompt_sets)  # what the person chose (the left-hand panel shows it)
        self.job: Job | None = None
        self.runs: list[Run] = []
        self.by_key: dict[int, Run] = {}
        self.busy = False
        self.shown_kind = ""  # the kind of the job whose runs are shown
        self.prompt_count = 0
        self.comparison: list[Run] = []
        self.compare_prompts = 0
        self.focus: str | None = None
        self.tab = RUN_TAB
        self.replay = ""  # what the shown runs replay ("" when they ran here)
        self.compare_replay = ""  # what the comparison replays
        self.progress: Progress | None = None
        self.version = 0  # bumped on every change; the window redraws when it moves
        self._next_id = 0
        self._fresh = False  # the current job has not started a run yet
        self._job_focus: str | None = None
        self._job_replay = ""
        self.bench: dict | None = None  # an opened dspark bench summary (app.files.benchmark.read_bench)
        self.costs: dict[str, dict] = {}  # drafter directory -> this machine's measured costs
        self.message = ""
        self.caption = ""
        self.loaded_target: str | None = None  # the target the worker holds
        self.environment: dict = {}  # the worker's record of the machine, for saved benchmarks
        self.diagnoses: list[diagnoses.Entry] = []  # the last diagnosis (app.state.diagnoses), kept until the next
        self.colour_order: list[str] = []  # View.colour_order

    # --- what went wrong, what the models are --------------------------------------------
    def fail(self, text: str) -> None:
        """One sentence for the message bar (it stays until something works)."""
        self.message = text
        self.version += 1

    def clear_message(self) -> None:
        if self.message:
            self.message = ""
            self.version += 1

    def loaded(self, info: Loaded) -> None:
        """The worker's load result: each drafter marked in the choices; costs measured on
        another target are dropped."""
        if info.target != self.loaded_target:
            self.clear_costs()
            self.diagnoses = [e for e in self.diagnoses if e.target == info.target]  # of that target only
        self.loaded_target, self.environment = info.target, info.environment
        for path in self.choices.paths():
            d = info.drafters.get(path)
            if d is None and path not in info.errors:
                continue
            self.choices.mark(
                path,
                info.errors.get(path),
                drafter_detail(d) if d else None,
                d.block_size if d and not d.autoregressive else None,
                kind=d.kind if d else None,
                refused=info.refused.get(path),
            )
        if not info.errors and not self.busy:
            self.clear_message()

    def clear_costs(self) -> None:
        if self.costs:
            self.costs = {}
            self.version += 1

    # --- jobs -----------------------------------------------------------------------------
    def run_job(self) -> Job | None:
        """Run: a speculative run with the selected drafter, then plain decoding of the prompt;
        None (said in the message bar when it is a mistake) when it cannot start."""
        c = self.choices
        drafter = c.run_drafter()
        if drafter and c.error(drafter):
            self.fail(f"cannot run with {c.error(drafter)}: select another drafter")
            return None  # nothing started, nothing shown is lost
        arms = [Arm(drafter_label(drafter), drafter)] if drafter else []
        return self._submit("run", arms + [Arm(PLAIN_LABEL, None)], [c.prompt], focus=None, caption=c.caption())

    def compare_job(self) -> Job | None:
        """Compare: every ticked drafter that can run (known bad ones are skipped), then plain
        decoding, on the prompt or on every prompt of the set."""
        c = self.choices
        paths, prompts = c.checked(), c.compare_prompts()
        selected = c.run_drafter()
        focus = drafter_label(selected) if selected in paths else None
        caption = c.caption() if len(prompts) == 1 else f"{len(prompts)} prompts of {c.set_name}"
        arms = [Arm(drafter_label(p), p) for p in paths] + [Arm(PLAIN_LABEL, None)]
        return self._submit("compare", arms, prompts, focus=focus, caption=caption)

    def diagnose_job(self) -> Job | None:
        """Run ▸ Diagnose: each drafter ``app.state.diagnoses.drafters`` takes, in turn, on what Compare
        would run; None, said in one sentence, when it cannot start. The runs shown stay."""
        c = self.choices
        entries = diagnoses.plan(c)
        runs = [e for e in entries if e.diagnosis is None]  # a refused drafter's finding is known already
        if self.busy:
            self.fail(diagnoses.BUSY_DIAGNOSING if self.job.kind == diagnoses.KIND else diagnoses.BUSY_RUN)
        elif not c.target:
            self.fail("no target model chosen: choose one with File ▸ Open target…")
        elif not entries:
            self.fail(diagnoses.NO_DRAFTER)
        elif not runs:  # every drafter is refused for this target: the findings, with nothing to run
            self.diagnoses = entries
            self.version += 1
        else:
            job = self.new_job(
                diagnoses.KIND,
                c.target,
                c.compare_prompts(),
                [Arm(e.label, e.drafter) for e in runs],
                config=c.config,
                caption=self.caption,
            )
            self.diagnoses = entries
            self.clear_message()
            if self.tab == REJECTIONS_TAB:  # the list is beside the Run and the Compare tabs' plots
                self.show_tab(RUN_TAB)
            return job
        return None

    def _submit(self, kind: str, arms: list[Arm], prompts: list[str], *, focus: str | None, caption: str) -> Job | None:
        if self.busy and self.job.kind == diagnoses.KIND:  # Run never waits unseen behind a diagnosis
            self.fail(diagnoses.RUN_REFUSED)
            return None
        if not self.choices.target:
            self.fail("no target model chosen: choose one with File ▸ Open target…")
            return None
        job = self.new_job(
            kind, self.choices.target, prompts, arms, config=self.choices.config, focus=focus, caption=caption
        )
        if job is not None:
            self.clear_message()
            self.show_tab(COMPARE_TAB if kind == "compare" else RUN_TAB)  # never an old comparison beside a run
        return job

    def new_job(
        self,
        kind: str,
        target: str,
        prompts,
        arms,
        *,
        config: dict,
        focus: str | None = None,
        replay: str = "",
        caption: str = "",
    ) -> Job | None:
        """A job for the worker (or a replay), or None while one is running: ``arms`` on
        ``prompts`` with the generation ``config``. Its runs replace the shown ones when they
        start (``RunStarted``), so a job that fails to start leaves them in place. ``focus``: the
        drafter the header describes after a comparison; ``replay``: what it replays ("": a live
        job); ``caption``: the prompt line (what the job runs on)."""
        if self.busy:
            return None
        self._next_id += 1
        self.job = Job(
            id=self._next_id, kind=kind, target=target, prompts=tuple(prompts), arms=tuple(arms), config=dict(config)
        )
        self.busy = True
        self._fresh = True
        self._job_focus, self._job_replay = focus, replay
        self.caption = caption
        self.version += 1
        return self.job

    def apply(self, msg) -> bool:
        """Take one worker message; True when it belonged to the current job."""
        job = self.job.id if self.job is not None else None
        if isinstance(msg, RunStarted):
            if msg.job != job:
                return False
            if self._fresh:
                self._start_showing()
            rec = Run(
                key=msg.key,
                label=msg.label,
                method=msg.method,
                prompt=msg.prompt,
                prompt_index=msg.prompt_index,
                drafter=msg.drafter,
                config=msg.config,
                drafter_kind=msg.drafter_kind,
            )
            self.runs.append(rec)
            self.by_key[rec.key] = rec
            if self.job.kind == "compare" and len(self.job.prompts) > 1 and not self._job_replay:
                self._follow_prompt(msg)
        elif isinstance(msg, RoundDone):
            rec = self.by_key.get(msg.key)
            if rec is None:
                return False
            rec.rounds.append(msg.event)
            rec.drafted_text.append(msg.drafted_text)
            rec.top_text.append(msg.top_text)
        elif isinstance(msg, RunDone):
            rec = self.by_key.get(msg.key)
            if rec is None:
                return False
            rec.summary = msg.summary
            rec.machine = dict(msg.machine) or None
        elif isinstance(msg, Checked):
            rec = self.by_key.get(msg.key)
            if rec is None:
                return False
            rec.verdict = msg.verdict
        elif isinstance(msg, CostsMeasured):
            self.costs[msg.drafter] = msg.costs
        elif isinstance(msg, Progress):
            self.progress = msg if msg.done < msg.total else None
        elif isinstance(msg, Diagnosed):
            if msg.job != job:
                return False
            self.diagnoses = diagnoses.with_result(self.diagnoses, msg.drafter, msg.diagnosis)
        elif isinstance(msg, JobDone):
            if msg.job != job:
                return False
            self.busy = False
            self.progress = None  # a run that failed while its prompt was processed leaves no bar behind
            if self.job.kind == diagnoses.KIND:
                self.diagnoses = diagnoses.ended(self.diagnoses, msg.cancelled)
        else:
            return False
        self.version += 1
        return True

    def _follow_prompt(self, msg: RunStarted) -> None:
        """A comparison on every prompt of the set moves ◀ k / N ▶ to the prompt it runs, as the
        Run tab does: it said "prompt 10 of 10" beside a box at 1 / 10, whose Run then ran another
        prompt than the one on screen. A prompt typed in the box stays."""
        c = self.choices
        ps = c.prompts()
        if not c.is_typed() and 0 <= msg.prompt_index < len(ps) and ps[msg.prompt_index] == msg.prompt:
            c.select_prompt(msg.prompt_index)

    def _start_showing(self) -> None:
        """The current job's first run started: its runs now replace the shown ones."""
        self.runs, self.by_key, self._fresh = [], {}, False
        self.shown_kind = self.job.kind
        self.prompt_count = len(self.job.prompts)
        self.replay = self._job_replay
        if self.job.kind == "compare":
            self.comparison = self.runs  # the same list: the Compare tab grows with the job
            self.compare_prompts = self.prompt_count
            self.focus = self._job_focus
            self.bench = None
            self.compare_replay = self._job_replay

    def measuring_costs(self) -> None:
        """Run ▸ Measure costs: the Compare tab shows this machine's costs, so a comparison
        replayed there or a benchmark opened there (measured on some machine at some time)
        leaves it, and its badge with it."""
        if self.bench is not None or self.compare_replay:
            self.bench, self.comparison, self.compare_prompts, self.compare_replay = None, [], 0, ""
        self.tab = COMPARE_TAB
        self.version += 1

    def show_bench(self, doc: dict) -> bool:
        """Show a benchmark result on the Compare tab (False while a job runs)."""
        if self.busy:
            return False
        self.bench, self.comparison, self.compare_prompts = doc, [], int(doc["prompts"]["count"])
        self.focus = next((r["label"] for r in bench_rows(doc) if r["label"] != PLAIN_LABEL), None)
        s = doc["settings"]
        self.caption = (
            f"dspark bench · {plural(doc['prompts']['count'], 'prompt')} × {plural(s['repeats'], 'repeat')} · "
            f"{s['max_tokens']} tokens · {Path(doc['_path']).parent.name} · "
            f"{doc.get('started', '')[:16].replace('T', ' ')}"
        )
        self.message = ""
        self.tab = COMPARE_TAB
        self.version += 1
        return True

    # --- what is shown ----------------------------------------------------------------------
    def show_tab(self, tab: str) -> None:
        if tab != self.tab:
            self.tab = tab
            self.version += 1

    def set_focus(self, label: str | None) -> None:
        """The comparison's drafter the header and the Run tab describe (a row of the table)."""
        if label != self.focus:
            self.focus = label
            self.version += 1

    def focused_label(self) -> str | None:
        """The focus when the comparison has it, else the comparison's first drafter."""
        if self.bench is not None:
            labels = [r["label"] for r in bench_rows(self.bench) if r["label"] != PLAIN_LABEL]
        else:
            labels = [r.label for r in self.comparison if r.label != PLAIN_LABEL]
        if self.focus in labels:
            return self.focus
        return labels[0] if labels else None

    def shown_runs(self) -> tuple[Run | None, Run | None]:
        """The speculative run the Run tab shows, and plain decoding of its prompt: the latest
        run of the last job; after a comparison, the latest run of its focused drafter."""
        speculative_runs = [r for r in self.runs if r.method == "speculative"]
        if self.shown_kind == "compare":
            label = self.focused_label()
            speculative_runs = [r for r in speculative_runs if r.label == label] or speculative_runs
        speculative = speculative_runs[-1] if speculative_runs else None
        plain_runs = [r for r in self.runs if r.method == "plain"]
        if speculative is not None:
            plain = next((r for r in plain_runs if r.prompt_index == speculative.prompt_index), None)
        else:
            plain = plain_runs[-1] if plain_runs else None
        return speculative, plain

    def view(self) -> View:
        """One snapshot of everything shown: every pane of one redraw draws the same rounds,
        however many of the worker's messages arrive while it draws."""
        shot = {id(r): r.snapshot() for r in self.runs + self.comparison}
        speculative, plain = (shot[id(r)] if r is not None else None for r in self.shown_runs())
        comparison = tuple(shot[id(r)] for r in self.comparison)
        self._meet_drafters(comparison)
        if self.bench is not None:
            rows, costs = tuple(bench_rows(self.bench)), bench_costs(self.bench)
        else:
            rows = tuple(compare_rows(list(comparison), self.compare_prompts)) if comparison else ()
            # this machine's costs, measured now: a replayed comparison ran elsewhere and its file
            # keeps none, so it draws none (it drew those of whichever of its drafters ran here since)
            costs = {} if self.compare_replay else {Path(p).name: c for p, c in self.costs.items()}
        return View(
            kind=self.shown_kind,
            tab=self.tab,
            speculative=speculative,
            plain=plain,
            runs=tuple(shot[id(r)] for r in self.runs),
            prompts=self.prompt_count,
            comparison=comparison,
            rows=rows,
            compare_prompts=self.compare_prompts,
            focus=self.focused_label(),
            busy=self.busy,
            replay=self.replay,
            bench=self.bench,
            costs=costs,
            message=self.message,
            caption=self.caption,
            compare_replay=self.compare_replay,
            progress=self.progress,
            diagnoses=tuple(self.diagnoses),
            colour_order=tuple(self.colour_order),
        )

    def _meet_drafters(self, comparison) -> None:
        """Each drafter listed, compared, benchmarked or diagnosed joins ``colour_order`` the
        first time it is seen (by its directory's name, as every pane names it)."""
        arms = bench_rows(self.bench) if self.bench is not None else []
        for name in (
            [d.label for d in self.choices.drafters]
            + [Path(r.drafter).name for r in comparison if r.drafter]
            + [Path(a["drafter"]).name if a.get("drafter") else a["label"] for a in arms if a["label"] != PLAIN_LABEL]
            + [e.label for e in self.diagnoses]
        ):
            if name not in self.colour_order:
                self.colour_order.append(name)


def costs_request(session: Session, remeasure: bool = True) -> CostsRequest | None:
    """Measure (or read the cached) costs of every ticked drafter that can run, on the chosen
    target; None, said in one sentence, when there is nothing to measure."""
    target, drafters = session.choices.target, tuple(session.choices.checked())
    if session.busy:
        session.fail("a run is in progress: measure the costs after it")
        return None
    if not target or not drafters:
        session.fail("choose a target and tick at least one drafter to measure their costs")
        return None
    return CostsRequest(target, drafters, remeasure)

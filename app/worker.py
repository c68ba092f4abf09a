"""The model-owner thread: the one app module that touches MLX.

A single ``Worker`` lives in one long-lived QThread. It loads, warms up, runs and frees every
MLX object there (MLX streams belong to the thread that made them). The GUI calls its slots
through queued signals and gets back the frozen dataclasses of ``app.state.messages`` on one signal.
Stop is a ``threading.Event`` the GUI sets directly (``Worker.cancel``), checked by the engine
before every round.
"""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

import mlx.core as mx
from PySide6.QtCore import QObject, QThread, Signal, Slot

from dspark import DsparkError, GenerationConfig, Summary, generate, generate_plain, load_drafter, load_target, lossless
from dspark import drafter_profile as profile
from dspark.bench.report import environment
from dspark.costs import Costs, for_policy, load_or_measure
from dspark.diagnose.acceptance import Stopped
from dspark.engine import prompt_ids, run_to_summary
from dspark.errors import DrafterMismatchError, report_bug
from dspark.export import export_drafter, summary
from dspark.loading import AUTOREGRESSIVE, drafter_kind, read_drafter_config

from .state import progress
from .state.messages import (
    Arm,
    Checked,
    CostsMeasured,
    CostsRequest,
    Diagnosed,
    DrafterInfo,
    Exported,
    ExportRequest,
    Failed,
    Job,
    JobDone,
    Loaded,
    LoadRequest,
    Progress,
    RoundDone,
    RunDone,
    RunStarted,
    Status,
)
from .state.progress import cpu_seconds, machine_during

WARMUP_IDS = [2, 3, 4, 5]
COSTS_ROUNDS_PER_SLOT = 105  # measuring a drafter's costs takes ~105 x (block size + 3) rounds' time


class Worker(QObject):
    message = Signal(object)  # one of app.state.messages' worker -> GUI dataclasses

    def __init__(self):
        super().__init__()
        self.cancel_event = threading.Event()
        self._target = None
        self._target_path: str | None = None
        self._drafters: dict = {}  # path -> a drafter of any format (dspark.loading.load_drafter)
        self._notes: dict[str, list[str]] = {}  # path -> what loading it warned about
        self._target_notes: list[str] = []
        self._pieces: dict[int, str] = {}
        self._key = 0
        self._environment: dict = {}

    # --- called from the GUI thread directly (thread-safe) --------------------------------
    def cancel(self) -> None:
        self.cancel_event.set()

    # --- slots, run on the worker thread --------------------------------------------------
    @Slot(object)
    def load(self, req: LoadRequest) -> None:
        """Load the target and drafters of ``req``; report each error."""
        try:
            for msg in self._ensure(req.target, list(req.drafters)).values():
                self.message.emit(Failed(msg))
        except DsparkError as e:
            self.message.emit(Failed(str(e)))
        except Exception as e:  # never let a load take the app down
            self._unexpected(e)

    @Slot(object)
    def measure_costs(self, req: CostsRequest) -> None:
        """Each drafter's costs on the target: cached, or measured now (seconds each), with the
        progress and the time left said as it goes (``_costs_estimates``)."""
        try:
            for msg in self._ensure(req.target, list(req.drafters)).values():
                self.message.emit(Failed(msg))
            paths = [p for p in req.drafters if p in self._drafters]
            estimates = self._costs_estimates(paths) if req.remeasure else [0.0] * len(paths)
            scale = 1.0  # measured / estimated, from the drafters done so far
            for i, p in enumerate(paths):
                left = scale * sum(estimates[i:])
                self.message.emit(
                    Progress(
                        "measuring this machine's costs",
                        i,
                        len(paths),
                        now=Path(p).name,
                        seconds_left=left if req.remeasure else None,
                    )
                )
                clock = time.monotonic()
                self._costs_for(p, self._drafters[p].block_size, remeasure=req.remeasure)
                if estimates[i] > 0:
                    scale = (time.monotonic() - clock) / estimates[i]
            self.message.emit(Progress("measuring this machine's costs", len(paths), len(paths)))
            self.message.emit(Status("ready"))
        except DsparkError as e:
            self.message.emit(Failed(str(e)))
        except Exception as e:
            self._unexpected(e)

    @Slot(object)
    def run_job(self, job: Job) -> None:
        """Run every (prompt, run) pair of ``job`` in turn on the loaded target. Speculative
        runs and plain decoding share the target; a stop ends the current run within one round
        and skips the rest."""
        ok, cancelled = True, False
        try:
            errors = self._ensure(job.target, [a.drafter for a in job.arms if a.drafter])
            if errors and job.kind != "compare":
                raise DsparkError(next(iter(errors.values())))
            for text in errors.values():  # a comparison goes on with the drafters that loaded
                self.message.emit(Failed(f"Compare skips {text}"))
            arms = tuple(a for a in job.arms if a.drafter not in errors)
            config = GenerationConfig(**job.config)
            config.check(self._target.dims.vocab_size)
            for pi, prompt in enumerate(job.prompts):
                done = []
                for arm in arms:
                    if self.cancel_event.is_set():
                        cancelled = True
                        break
                    done.append((arm, *self._run_one(job, arm, prompt_index=pi, prompt=prompt, config=config)))
                self._check(done, config)
            cancelled = cancelled or self.cancel_event.is_set()
        except DsparkError as e:
            ok = False
            self.message.emit(Failed(str(e)))
        except Exception as e:
            ok = False
            self._unexpected(e)
        finally:
            self.message.emit(Status("stopped" if cancelled else ("done" if ok else "failed")))
            self.message.emit(JobDone(job.id, ok, cancelled))

    @Slot(object)
    def export_drafter(self, req: ExportRequest) -> None:
        """File ▸ Export drafter…: ``dspark.export`` here, where MLX lives (it loads the drafter, and
        measures acceptance on the target when asked); what it wrote, or its one-sentence refusal."""
        try:
            target = None
            if req.target:  # measure on the target the window has, loaded here if it is not yet
                for msg in self._ensure(req.target, []).values():
                    self.message.emit(Failed(msg))
                target = self._target
            say = lambda text: self.message.emit(Status(text))
            r = export_drafter(
                req.drafter,
                req.format,
                req.out,
                verifier=req.verifier or None,
                drop_heads=req.drop_heads,
                force=req.force,
                target=target,
                prompts=list(req.prompts),
                tokens=req.tokens,
                say=say,
            )
            self.message.emit(Exported(r["out"], summary(r, req.drop_heads)))
        except DsparkError as e:
            self.message.emit(Failed(str(e)))
        except Exception as e:
            self._unexpected(e)

    @Slot(object)
    def diagnose(self, job: Job) -> None:
        """Run ▸ Diagnose: ``dspark.diagnose`` of each drafter of ``job`` in turn, here where the
        models live, on the job's prompts and settings, compared with the drafter's profile; its
        progress after every generation, each result as a ``Diagnosed``. Stop ends it within one
        round (the drafters diagnosed by then keep their results)."""
        from dspark.diagnose import diagnose  # noqa: PLC0415 (late-bound: a test spies on dspark.diagnose.run)

        ok, cancelled = True, False
        try:
            errors = self._ensure(job.target, [a.drafter for a in job.arms])
            for text in errors.values():
                self.message.emit(Failed(f"Diagnose skips {text}"))
            config = GenerationConfig(**job.config)
            for arm in (a for a in job.arms if a.drafter not in errors):
                task, drafter = f"diagnosing {arm.label}", self._drafters[arm.drafter]
                self.message.emit(Progress(task, 0, len(job.prompts)))
                self.message.emit(Status(f"{task} …"))
                step = lambda done, total, what, task=task: self.message.emit(Progress(task, done, total, what))
                found = diagnose(
                    self._target,
                    drafter,
                    list(job.prompts),
                    config,
                    progress=step,
                    profile=profile.find(read_drafter_config(arm.drafter)[0], drafter),
                    cancel=self.cancel_event.is_set,
                )
                self.message.emit(Diagnosed(job.id, arm.drafter, found))
            ok = len(errors) < len(job.arms)  # some drafter was diagnosed
        except Stopped:
            cancelled = True
        except DsparkError as e:
            ok = False
            self.message.emit(Failed(str(e)))
        except Exception as e:
            ok = False
            self._unexpected(e)
        finally:
            self.message.emit(Status("stopped" if cancelled else ("diagnosed" if ok else "failed")))
            self.message.emit(JobDone(job.id, ok, cancelled))

    @Slot()
    def shutdown(self) -> None:
        """Free every MLX object on this thread, then end the thread's event loop."""
        self._free_all()
        QThread.currentThread().quit()

    # --- internals ------------------------------------------------------------------------
    def _run_one(self, job: Job, arm: Arm, *, prompt_index: int, prompt: str, config: GenerationConfig):
        self._key += 1
        key = self._key
        method = "speculative" if arm.drafter else "plain"
        self.message.emit(
            RunStarted(
                job=job.id,
                key=key,
                label=arm.label,
                method=method,
                drafter=arm.drafter,
                prompt=prompt,
                prompt_index=prompt_index,
                config=dict(job.config),
                drafter_kind=drafter_kind(self._drafters[arm.drafter]) if arm.drafter else None,
            )
        )
        cancel = self.cancel_event.is_set
        prefill = self._prefill_said(arm.label, prompt, config)
        if arm.drafter:
            drafter = self._drafters[arm.drafter]
            costs = for_policy(
                config.policy,
                self._target,
                drafter,
                config.block_size or drafter.block_size,
                say=lambda text: self.message.emit(Status(text)),
            )
            if costs is not None:  # the scheduler reads them: show which
                self.message.emit(CostsMeasured(arm.drafter, costs.to_dict()))
            # inspect: every run keeps what the target thought of each verified draft (the cell's
            # story, the rejection views; saved and replayed with the run)
            events = generate(
                self._target,
                drafter,
                prompt,
                config,
                cancel=cancel,
                costs=costs,
                inspect=True,
                prompt_progress=prefill.processed,
            )
        else:
            events = generate_plain(self._target, prompt, config, cancel=cancel, prompt_progress=prefill.processed)
        summary, clock, cpu = None, time.monotonic(), cpu_seconds()
        for ev in events:
            prefill.ended()
            if isinstance(ev, Summary):
                summary = ev
                self.message.emit(RunDone(key, ev, machine_during(time.monotonic() - clock, cpu_seconds() - cpu)))
            else:
                top = tuple(tuple(self._piece(t) for t, _p in row) for row in ev.target_top or ())
                self.message.emit(RoundDone(key, ev, tuple(self._piece(t) for t in ev.drafted), top))
        return key, summary

    def _prefill_said(self, label: str, prompt: str, config: GenerationConfig) -> progress.Prefill:
        """What the run says while the target processes its prompt (before its first token)."""
        tokens = len(prompt_ids(self._target, prompt, config))  # the tokenizer's work, no model's
        return progress.Prefill(self.message.emit, label, tokens if tokens >= progress.PREFILL_SHOWN else 0)

    def _check(self, done: list, config: GenerationConfig) -> None:
        """Check each greedy speculative run of one prompt ((arm, key, summary) of each run)
        against plain decoding of it."""
        plain = next((s for arm, _, s in done if not arm.drafter), None)
        if plain is None or not config.sampling.greedy or plain.finish_reason == "cancelled":
            return
        for arm, key, s in done:
            if arm.drafter and s is not None and s.finish_reason != "cancelled":
                self.message.emit(Checked(key, lossless.compare(self._target, s, plain)))

    def _costs_estimates(self, paths: list[str]) -> list[float]:
        """Seconds measuring each drafter's costs will take, about: timing every phase at three
        cache lengths and both BLAS thread counts, with its repeats, costs what some 105 x
        (block size + 3) rounds of generation do (the demo pair at block size 7: 1,008 and 1,127
        rounds); one short generation of each times a round on this machine now. The rest of the
        estimate is scaled by how the first drafters' measured against theirs."""
        out = []
        for p in paths:
            d = self._drafters[p]
            summary = run_to_summary(
                generate(
                    self._target,
                    d,
                    self._warm_ids(),
                    GenerationConfig(max_tokens=4 * d.block_size, stop_at_eos=False, policy="fixed"),
                )
            )
            per_round = summary.total_seconds / max(summary.rounds, 1)
            out.append(per_round * COSTS_ROUNDS_PER_SLOT * (d.block_size + 3))
        return out

    def _costs_for(self, path: str, block_size: int, remeasure: bool = False) -> Costs:
        """The drafter's costs at this block size (cached per machine and model by
        ``dspark.costs``), sent to the window so it can draw the curve the scheduler reads."""
        say = lambda text: self.message.emit(Status(text))
        costs = load_or_measure(self._target, self._drafters[path], block_size, remeasure=remeasure, say=say)
        self.message.emit(CostsMeasured(path, costs.to_dict()))
        return costs

    def _piece(self, token: int) -> str:
        """A drafted (or the target's top) token's text, for the draft grid (tokenizer lookup, no model work)."""
        s = self._pieces.get(token)
        if s is None:
            tok = self._target.tokenizer
            s = tok.decode([token]) if tok is not None else f"#{token}"
            self._pieces[token] = s
        return s

    def _ensure(self, target_path: str | None, drafter_paths: list[str]) -> dict[str, str]:
        """Have this target and these drafters loaded; returns {drafter path: error message}."""
        if not target_path:
            raise DsparkError("no target model chosen: pick a target directory")
        target_path = str(Path(target_path).expanduser())
        if target_path != self._target_path or self._target is None:
            self._free_all()
            self.message.emit(Status(f"loading target {Path(target_path).name} ..."))
            self._target_notes = []
            self._target = load_target(target_path, say=self._target_notes.append)
            self._target_path = target_path
            self.message.emit(Status("warming up ..."))
            run_to_summary(generate_plain(self._target, self._warm_ids(), self._warm_config()))
        errors, infos, refused = {}, {}, {}
        for p in drafter_paths:
            if p not in self._drafters:
                try:
                    self.message.emit(Status(f"loading drafter {Path(p).name} ..."))
                    self._notes[p] = []
                    d = load_drafter(p, self._target, say=self._notes[p].append)  # the CLI's loader and warnings
                    run_to_summary(generate(self._target, d, self._warm_ids(), self._warm_config()))
                    self._drafters[p] = d
                except DsparkError as e:
                    errors[p] = f"drafter {Path(p).name}: {e}"
                    if isinstance(e, DrafterMismatchError):  # made for another target: Diagnose names it
                        refused[p] = str(e)
                    continue
            d = self._drafters[p]
            note = "; ".join(self._notes.get(p, []) + [n for n in [d.weights_note(self._target)] if n]) or None
            infos[p] = DrafterInfo(
                block_size=d.block_size,
                confidence=d.has_confidence,
                params=d.num_params(),
                note=note,
                format=d.format,
                kind=drafter_kind(d),
                autoregressive=d.format in AUTOREGRESSIVE,
            )
        if not self._environment:  # the machine, MLX and BLAS a saved benchmark names (MLX asked here)
            self._environment = environment()
        self.message.emit(
            Loaded(
                target=target_path,
                target_id=self._target.target_id,
                drafters=infos,
                errors=errors,
                environment=dict(self._environment),
                notes=tuple(self._target_notes),
                refused=refused,
            )
        )
        self.message.emit(Status("ready"))
        return errors

    def _warm_ids(self) -> list[int]:
        return [t % self._target.dims.vocab_size for t in WARMUP_IDS]

    @staticmethod
    def _warm_config() -> GenerationConfig:
        return GenerationConfig(max_tokens=3, stop_at_eos=False, policy="fixed")  # warms without measuring costs

    def _free_all(self) -> None:
        for d in self._drafters.values():
            d.dispose()
        self._drafters.clear()
        self._pieces.clear()
        self._target = None
        self._target_path = None
        gc.collect()
        mx.clear_cache()

    def _unexpected(self, e: Exception) -> None:
        self.message.emit(Failed(report_bug(e, "dspark-studio")))


class WorkerThread(QObject):
    """The GUI's handle on the model-owner thread: it starts the thread with one ``Worker`` on
    it, asks it for work through queued signals (the worker's slots run on its own thread),
    hands every message it sends to ``deliver`` (a bound method of a GUI-thread object, so it
    runs on the GUI thread), and on ``shutdown`` has it free the models and waits for it."""

    _load = Signal(object)
    _run = Signal(object)
    _costs = Signal(object)
    _export = Signal(object)
    _diagnose = Signal(object)
    _shutdown = Signal()

    def __init__(self, deliver, parent=None):
        super().__init__(parent)
        self.thread = QThread(self)
        self.thread.setObjectName("dspark-model-owner")
        self.worker = Worker()
        self.worker.moveToThread(self.thread)
        self._load.connect(self.worker.load)
        self._run.connect(self.worker.run_job)
        self._costs.connect(self.worker.measure_costs)
        self._export.connect(self.worker.export_drafter)
        self._diagnose.connect(self.worker.diagnose)
        self._shutdown.connect(self.worker.shutdown)
        self.worker.message.connect(deliver)
        self.thread.start()

    def load(self, request: LoadRequest) -> None:
        self._load.emit(request)

    def run(self, job: Job) -> None:
        self.worker.cancel_event.clear()
        self._run.emit(job)

    def measure_costs(self, request: CostsRequest) -> None:
        self._costs.emit(request)

    def export_drafter(self, request: ExportRequest) -> None:
        self._export.emit(request)

    def diagnose(self, job: Job) -> None:
        self.worker.cancel_event.clear()
        self._diagnose.emit(job)

    def cancel(self) -> None:
        self.worker.cancel()

    def shutdown(self) -> None:
        """Stop any run, free the models on their own thread, and wait for it to end."""
        if self.thread.isRunning():
            self.worker.cancel()
            self._shutdown.emit()
            if not self.thread.wait(120_000):
                self.thread.quit()
                self.thread.wait(5_000)

"""A whole drafter training run: data, the training loop, checkpoints, the final evaluation.

Data. Texts are tokenized and cut into sequences of ``seq_len`` tokens. With self-distillation
(the recommended mode: a drafter should learn what the *target* writes) each sequence keeps
only its first ``prompt_len`` tokens as a prompt and the target writes the rest greedily;
anchors then start at the last prompt token, so every label is target output.

The output directory holds the drafter (in its format) and, in ``.train/``, the checkpoint
``train_state.safetensors`` (see :mod:`dspark.training.trainer`) and the sequences,
``train_data.safetensors``, so
``--resume`` continues exactly where the run stopped, the best held-out weights in ``best/``
(:mod:`.best`) and the run's phase in ``status.json`` (:mod:`.status`). A run may start from an
existing drafter (``--from``, :mod:`.start`). At the end the drafter is evaluated with the real
generation loop on held-out prompts, its confidence head calibrated (STS), and the figures
written to ``train_report.json``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..config import DflashConfig
from ..convert import new_drafter
from ..drafter import DflashDrafter
from ..drafting import BlockDrafter
from ..errors import DsparkError
from ..files import output_dir, remove_stale, write_text
from ..formats.base import EXTENSION
from ..loading import load_drafter
from ..target import Target
from .best import Best, keep, refuse_finish
from .budget import check_training_shapes
from .curves import TrainLog, heldout_figures
from .data import Sequences, encode_all, held_out_prompts
from .distill import PARTIAL_GLOB, build_training_data, forget_unfinished
from .distributed import World
from .inputs import check_anchors, check_bytes
from .loop import Progress, train_loop
from .report import REPORT_FILE, evaluate, training_report, write_profile
from .resume import DATA_FILE, check_resume
from .start import FROM_KEY, Start, copy_companions
from .status import RunStatus
from .texts import texts_digest
from .trainer import STATE_FILE, TRAIN_DIR, DrafterTrainer, TrainSettings


def train_drafter(
    target: Target,
    texts: Sequence[str | Sequence[int]],
    out_dir: str | Path,
    cfg: DflashConfig,
    *,
    settings: TrainSettings = TrainSettings(),
    heldout_texts: Sequence[str | Sequence[int]] | None = None,
    data_file: str | Path | None = None,
    resume: bool = False,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    world: World | None = None,
    read_from: Path | None = None,
    start: Start | None = None,
    finish: bool = False,
    status: RunStatus | None = None,
) -> BlockDrafter:
    """Train a drafter of ``cfg``'s shape for ``target`` on ``texts`` (strings, or token-id
    lists) into ``out_dir``, as ``settings`` say; see the module docstring. ``heldout_texts``
    are the evaluation prompts (by default some of the data is held out); ``data_file`` reuses
    the sequences another run saved (its ``.train/train_data.safetensors``); ``resume``
    continues the run saved in ``out_dir``; ``progress`` shows bars, ``log`` hears each step
    (None: standard error). ``world``: the processes of a distributed
    run (``mlx.launch``; :mod:`dspark.training.distributed`), of which this is one; only rank 0
    writes ``out_dir``, and a resumed run reads rank 0's files from ``read_from`` (a copy of
    them on the other ranks). ``start``: the drafter a fine-tune starts from (:mod:`.start`;
    ``cfg`` is then its shape); ``finish``: end the paused run saved in ``out_dir`` now, keeping
    its best held-out weights (:mod:`.best`), without training further; ``status``: what the run
    says of itself in ``.train/status.json`` (:mod:`.status`). Returns the trained drafter."""
    s, world = settings, world or World()
    status = status or RunStatus(out_dir, main=world.main)
    check_training_shapes(
        target, block_size=cfg.block_size, layers=cfg.num_layers, tap_layers=cfg.tap_layers, settings=s
    )  # before anything is allocated
    out = _output(out_dir, world)
    src = Path(read_from) if read_from is not None else out
    say = log or (lambda m: print(m, file=sys.stderr))
    drafter, resuming = _drafter(target, cfg, s, out=out, src=src, resume=resume, say=say, start=start)
    refuse_finish(finish, resuming, out)
    status.set("preparing", steps=s.steps, message="finishing the paused run" if finish else "preparing the data")
    trained_as = trained_settings(drafter)
    seqs, held, distill_seconds, new = _training_data(
        target,
        texts,
        heldout_texts,
        s,
        data_file=data_file,
        resuming=resuming,
        progress=progress and world.main,
        say=say,
        src=src,
        world=world,
        run=[target.target_id, trained_as, asdict(s)],
    )
    if new and world.main:  # kept for a later --resume, with what it was made from
        seqs.save(out / DATA_FILE, held, texts=None if data_file else texts_digest(texts))
        forget_unfinished(out / TRAIN_DIR)
    trainer = DrafterTrainer(target, drafter, seqs, s, trained_as=trained_as, world=world)
    if resuming:
        _resume(trainer, src, out, say)
    elif start is not None:
        trainer.run_meta[FROM_KEY] = start.record()
        if world.main:
            copy_companions(start, out)
    if FROM_KEY in trainer.run_meta:
        say(f"fine-tuning the drafter in {trainer.run_meta[FROM_KEY]['path']}")
    say(
        f"drafter: {trained_as['format']} format, {drafter.num_params():,} parameters, "
        f"taps {list(drafter.tap_layers)}, "
        f"block {drafter.block_size}, markov {drafter.has_markov}, confidence {drafter.has_confidence}, context window "
        f"{trained_as['context_window'] or 'none'}; {len(seqs)} sequences of {seqs.tokens.shape[1]}"
        + (f"; {world.size} processes, {s.batch_anchors // world.size} anchors each a step" if world.size > 1 else "")
    )

    finish_run(
        trainer,
        out=out,
        held=held,
        trained_as=trained_as,
        distill_seconds=distill_seconds,
        progress=progress,
        save=drafter.save,
        say=say,
        finish=finish,
        status=status,
    )
    return drafter


def finish_run(
    trainer: DrafterTrainer,
    *,
    out: Path,
    held,
    trained_as: dict,
    distill_seconds: float,
    progress: bool,
    save: Callable[[Path], None],
    say,
    finish: bool = False,
    status: RunStatus,
) -> None:
    """Every kind's run from its first step on: the loop (:func:`_train_loop`), then on rank 0
    the drafter written by ``save(folder)`` with the trainer's state, the report, the evaluation on
    the ``held`` prompts and the profile; the curves in ``train_log.jsonl`` throughout
    (:mod:`dspark.training.curves`), the best held-out weights in ``.train/best/``
    (:mod:`.best`). A run asked to finish (SIGUSR1, or ``finish`` for a paused one) writes
    those best weights as the drafter, if any were measured; the checkpoint keeps the last ones."""
    if trainer.s.eval_every and trainer.world.size > 1:
        raise DsparkError("--eval-every measures on one process: under mlx.launch the others would wait for it")
    target, drafter, s = trainer.target, trainer.drafter, trainer.s
    log = TrainLog(out, step=trainer.step, main=trainer.world.main)
    best = Best(out, save, recorded=trainer.run_meta.get("best") if trainer.step else None, main=trainer.world.main)
    first_step, loop_start = trainer.step, time.perf_counter()
    status.set("training", step=trainer.step, steps=s.steps, message="")
    stopped, recent, measuring = _train_loop(
        trainer, out, progress, say=say, save=save, log=log, held=held, best=best, finish=finish, status=status
    )
    train_seconds = time.perf_counter() - loop_start - measuring
    if not trainer.world.main:
        return  # rank 0 writes the drafter, evaluates it and reports
    trainer.save_state(out)  # the last weights: what a --resume with more --steps goes on from
    kept = keep(trainer, best, stopped)
    save(out)
    say(f"the drafter written holds the weights of step {kept['step']}: {kept['why']}")
    done = trainer.step - first_step
    report = training_report(
        target,
        drafter,
        trained_as=trained_as,
        s=s,
        sequences=len(trainer.seqs),
        trainer=trainer,
        stopped=stopped,
        recent=recent,
        done=done,
        train_seconds=train_seconds,
        distill_seconds=distill_seconds,
    )
    say(
        f"trained {done} steps in {train_seconds:.0f}s ({report['steps_per_sec']:.2f} steps/s, "
        f"{report['anchors_per_sec']:.1f} anchors/s, {report['block_tokens_per_sec']:.0f} block tokens/s; "
        f"target forwards {trainer.features.seconds:.0f}s of it)"
    )
    report.update(kept=kept, best=best.record(), target_weights=target.weights_fingerprint)
    if FROM_KEY in trainer.run_meta:
        report[FROM_KEY] = trainer.run_meta[FROM_KEY]
    status.set("measuring", step=trainer.step, message="the final evaluation")
    evaluate(target, drafter, held, s, report=report, out=out, say=say)
    if h := report.get("heldout"):
        figures = {k: h[k] for k in ("tau", "per_position_acceptance", "prompts")}
        log.heldout(
            trainer.step, seconds=train_seconds, figures={**figures, "tokens": s.eval_tokens}, cost=h["seconds"]
        )
    write_text(out / REPORT_FILE, json.dumps(report, indent=2) + "\n")
    write_profile(target, drafter, trainer.seqs, s, report=report, out=out)
    status.set("finished", step=trainer.step, message=f"kept the weights of step {kept['step']}: {kept['why']}")


def _drafter(
    target: Target, cfg: DflashConfig, s: TrainSettings, *, out: Path, src: Path, resume: bool, say, start=None
) -> tuple[BlockDrafter, bool]:
    """(the drafter to train, whether it continues the run saved in ``src``): with ``resume``, the
    one saved there (checked against ``cfg`` and ``s``), else the ``start`` of a fine-tune or a new
    one of ``cfg``'s shape, what an unfinished run left in ``out`` forgotten; ``say`` hears when
    there is nothing to resume."""
    resuming = resume and (src / STATE_FILE).is_file()
    if not resume:
        forget_unfinished(out / TRAIN_DIR)
    elif not resuming and not any((out / TRAIN_DIR).glob(PARTIAL_GLOB)):
        say(f"nothing to resume in {out}: starting a new run")
    if resuming:
        check_resume(src, cfg, s, target.dims.num_layers)
    if resuming:
        return _resumed(src, target, cfg), True
    return (start.drafter if start is not None else new_drafter(target, cfg, seed=s.seed)), False


def _resume(trainer: DrafterTrainer, src: Path, out: Path, say) -> None:
    """The trainer where the checkpoint in ``src`` left it."""
    meta = trainer.load_state(src)
    say(f"resumed at step {trainer.step} of {trainer.s.steps}")
    trainer.world.after_stop = intact(trainer.step, out)
    if meta["settings"]["steps"] != trainer.s.steps:
        say(f"note: the first run planned {meta['settings']['steps']} steps; the schedule now spans {trainer.s.steps}")


def intact(step: int, out: Path) -> str:
    """What a distributed run stopped by a lost rank says it leaves behind."""
    return f"the checkpoint of step {step} in {out} is intact; continue with --resume"


def _output(out_dir: str | Path, world: World) -> Path:
    """The output folder, cleared of what a killed run was writing when it died (by rank 0:
    the others write nothing there but their own log)."""
    out = output_dir(out_dir, allow_existing=True)
    (out / TRAIN_DIR).mkdir(exist_ok=True)
    if world.main:
        remove_stale(out)
        remove_stale(out / TRAIN_DIR)
    return out


def trained_settings(drafter: BlockDrafter) -> dict:
    """The drafter settings a drafter was made with (``DflashConfig`` fields): a native one's own
    config, or what dspark wrote into a published format's config.json when it made it."""
    if isinstance(drafter, DflashDrafter):
        return asdict(drafter.cfg)
    made = (getattr(drafter, "config", {}).get(EXTENSION) or {}).get("trained_as")
    if not isinstance(made, dict):
        raise DsparkError(
            f"this {drafter.format} drafter was not made by dspark train: it has no training settings to continue from"
        )
    return dict(made)


def _resumed(out: Path, target: Target, cfg: DflashConfig) -> BlockDrafter:
    return DflashDrafter.load(out, target) if cfg.format == "native" else load_drafter(out, target)


def _training_data(
    target,
    texts,
    heldout_texts,
    s: TrainSettings,
    *,
    data_file,
    resuming: bool,
    progress,
    say,
    src: Path,
    world: World,
    run: list,
):
    """(sequences, held-out prompts, self-distillation seconds, whether they are new to this
    run's folder): the first run's data on ``--resume`` (read from ``src``), another run's with
    ``data_file`` (to compare drafters on identical data, as the demo does), else built now (the
    ranks of ``world`` sharing the target's writing). Ranks whose data or ``run`` (what else
    makes the run) differ from rank 0's are refused before the data is built: they would not
    even exchange the same arrays."""
    held = held_out_prompts(target, heldout_texts, s.seq_len) if heldout_texts is not None else None
    source = Path(data_file) if data_file else (src / DATA_FILE if resuming else None)
    if source is not None and source.is_file():
        seqs, saved_held = Sequences.load(source, target.dims.vocab_size)
        world.check_same(SAME, [seqs.tokens, seqs.lengths, seqs.first_anchor, run])
        held = held if held is not None else saved_held
        return seqs, held, 0.0, bool(data_file)
    t0 = time.perf_counter()
    docs = encode_all(target, texts, prompts=s.self_distill)  # a chat's answer is the target's to write
    if any(isinstance(t, str) for t in texts):
        check_bytes(target, docs)
    world.check_same(
        SAME, [np.array([len(d) for d in docs]), np.concatenate([np.asarray(d, np.int64) for d in docs]), [held, run]]
    )
    seqs, auto_held = build_training_data(
        target,
        docs,
        seq_len=s.seq_len,
        prompt_len=s.prompt_len,
        self_distill=s.self_distill,
        max_sequences=s.sequences_cap(),
        heldout=s.eval_prompts if held is None else 0,
        rng=np.random.default_rng(s.seed),
        progress=progress,
        say=say,
        long_share=s.long_prompts,
        long_len=s.long_prompt_len,
        world=world,
        keep_in=src / TRAIN_DIR,
    )
    check_anchors(seqs, s.batch_anchors)
    held = held if held is not None else auto_held
    return seqs, held, time.perf_counter() - t0, True


#: What a rank whose training differs from rank 0's is told differs.
SAME = "training data, target or settings"


def _train_loop(
    trainer: DrafterTrainer,
    out: Path,
    progress: bool,
    *,
    say,
    save=None,
    log: TrainLog,
    held=None,
    best: Best,
    finish: bool,
    status: RunStatus,
) -> tuple[str, list, float]:
    """Train to ``settings.steps`` (or the time budget, counted from the first step: a budget
    that also counted the data's self-distillation could be spent before any step), checkpointing
    as it goes (``dspark.training.loop``) and writing each step to ``log``, with a held-out
    measurement on ``held`` every ``eval_every`` steps, whose best weights ``best`` keeps;
    returns (what stopped it: "steps", "time budget" or "finish", the last losses, the seconds
    those measurements took). SIGUSR1 ends it as "finish" (``finish``: at once). An interrupt
    saves a checkpoint, says so in ``status`` and re-raises.
    ``save(out)`` writes the drafter (default: its own ``save``; an autoregressive head's writer
    in its layout)."""
    s = trainer.s
    write = save or trainer.drafter.save
    pending = [trainer.sample_batch() if trainer.step < s.steps else None]
    recent: list = []
    last_save, loop_start, first_step = [time.perf_counter()], time.perf_counter(), trainer.step
    measuring = [0.0]  # seconds of held-out measurements: not training time
    saved = [first_step]  # the step of the checkpoint a --resume would continue from now
    saved_note = lambda: f"the last checkpoint is of step {saved[0]}" if saved[0] else ""

    def one_step() -> dict[str, str]:
        outs = trainer.train_step(pending[0])
        pending[0] = trainer.sample_batch() if trainer.step < s.steps else None  # overlaps the update
        loss, ce, tv, conf, norm = (float(x) for x in outs)
        if not math.isfinite(loss):
            raise DsparkError(f"the loss became {loss} at step {trainer.step}; try a lower --lr")
        recent.append((loss, ce, tv, conf))
        del recent[:-50]
        seconds = time.perf_counter() - loop_start - measuring[0]
        rate = (trainer.step - first_step) * s.batch_anchors / max(seconds, 1e-9)
        log.step(
            trainer.step,
            seconds=seconds,
            losses=(loss, ce, tv, conf),
            anchors_per_sec=rate,
            steps=s.steps,
            block_size=trainer.block_size,
        )
        if s.eval_every and held and s.eval_prompts and trainer.step % s.eval_every == 0 and trainer.step < s.steps:
            t0 = time.perf_counter()  # one process (finish_run refuses it under mlx.launch)
            status.set("measuring", step=trainer.step, message="held-out tau (--eval-every)")
            figures = heldout_figures(trainer.target, trainer.drafter, held[: s.eval_prompts], s.eval_tokens)
            kept = best.offer(trainer.step, figures["tau"])
            trainer.run_meta["best"] = best.record()
            measuring[0] += time.perf_counter() - t0
            cost = round(time.perf_counter() - t0, 3)
            log.heldout(trainer.step, seconds=seconds, figures=figures, cost=cost, best=kept)
            status.set("training", step=trainer.step, message=saved_note())
        return {"loss": f"{loss:.3f}", "tv": f"{tv:.3f}", "anchors/s": f"{rate:.0f}"}

    def save() -> None:
        if world.main:  # every rank holds the same weights; one writes them
            write(out)
            trainer.save_state(out)  # with the RNG state that draws the waiting batch again
            world.after_stop = intact(trainer.step, out)  # whole on disk: a rank lost at the barrier leaves it
            saved[0] = trainer.step
            status.set("training", step=trainer.step, message=saved_note())
        # the others wait for it: a rank that ends (a stop) before rank 0 has written would have
        # mlx.launch stop rank 0 in the middle of the checkpoint
        world.barrier(f"the checkpoint of step {trainer.step}")
        last_save[0] = time.perf_counter()
        world.after_stop = intact(trainer.step, out)

    world = trainer.world
    budget = s.time_budget_minutes * 60 if s.time_budget_minutes else None
    try:
        stopped = train_loop(
            lambda: trainer.step,
            s.steps,
            one_step,
            checkpoint=save,
            checkpoint_due=lambda: time.perf_counter() - last_save[0] > s.checkpoint_minutes * 60,
            progress=Progress(total=s.steps, desc="train", enabled=progress, bar=world.main, say=say),
            budget_s=budget,
            agree=world.agree if world.size > 1 else None,
            finish=True,
            finish_now=finish,
        )
    except KeyboardInterrupt:
        say(f"\ninterrupted: checkpoint saved at step {trainer.step}; continue with --resume")
        status.set(
            "paused", step=trainer.step, message=f"checkpoint saved at step {trainer.step}; continue with --resume"
        )
        raise
    if finish:
        stopped = "finish"  # a paused run whose schedule had ended is finished all the same
    return stopped, recent, measuring[0]

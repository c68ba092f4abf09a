"""The Train tab's model, without Qt: the ``dspark train`` command its choices make, the
child process that runs it (the very command a terminal would run, so the same run can be
paused, resumed or finished from either), and what a run's folder says of it: the curves of
``train_log.jsonl`` (read a piece at a time as it grows), ``.train/status.json`` and the
checkpoint, and ``train_report.json`` once it finished.

No model math here: every figure is the log's own or a difference of its lines.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dspark.errors import DsparkError
from dspark.training.curves import LOG_FILE
from dspark.training.texts import read_texts

#: First on the app's command line: the rest is a ``dspark`` command (``dspark-studio --dspark train
#: ...``). A frozen bundle ships no console scripts, so the Train tab starts ``dspark train`` as the
#: app's own executable with it (:func:`dspark_program`; ``dspark_studio.main`` runs it).
DSPARK = "--dspark"
TRAIN_TAB = "train"
KINDS = ("block", "eagle3", "assistant")
FORMATS = ("native", "speculators", "zlab", "deepspec")
#: What ``dspark train`` keeps in the folder (``dspark.training``'s names; those modules import MLX).
STATUS_FILE = ".train/status.json"
STATE_FILE = ".train/train_state.safetensors"
REPORT_FILE = "train_report.json"
#: Held-out measurements a run makes when the tab chooses --eval-every: often enough to see the
#: curve bend, seldom enough that their cost (the log's eval_seconds) stays a small share.
MEASUREMENTS = 20
#: How much lower than the app a run it starts is scheduled (Unix ``nice``).
NICE = 5
LIVE = {"preparing": "preparing the data", "training": "training", "measuring": "measuring on held-out prompts"}


@dataclass(kw_only=True)
class TrainPlan:
    """The tab's choices, one field per control."""

    target: str = ""
    start_from: str = ""  # a drafter to go on training (--from); "" makes a new one of ``kind``
    kind: str = "block"
    fmt: str = "native"
    markov: bool = True  # DSpark; False: DFlash-style (--no-markov)
    data: tuple[str, ...] = ()
    self_distill: bool = False
    heldout: tuple[str, ...] = ()
    steps: int = 2000
    minutes: float = 0.0  # a time budget; 0: none
    eval_every: int = 100
    eval_prompts: int = 8
    eval_tokens: int = 128
    out: str = ""
    force: bool = False  # replace what --out holds
    extra: str = ""  # any other options, as typed


def eval_every_for(steps: int) -> int:
    """A held-out measurement ``MEASUREMENTS`` times a run, never every step of a long one."""
    return max(1, round(steps / MEASUREMENTS))


def default_out(folder: Path, target: str, plan: TrainPlan, *, now: float | None = None, taken: str = "") -> str:
    """A new folder under the app's data folder: the target's name, what is made, the time (and
    a number when that is ``taken``, the run just started in the same second, or exists)."""
    what = "from-" + Path(plan.start_from).name if plan.start_from else plan.kind if plan.kind != "block" else plan.fmt
    base = str(folder / f"{Path(target).name or 'target'}-{what}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}")
    names = (base if n == 1 else f"{base}-{n}" for n in range(1, 10_000))
    return next(out for out in names if out != taken and not Path(out).exists())


def dspark_program() -> list[str] | None:
    """The ``dspark`` command of this installation: the frozen app itself (``--dspark``: a bundle
    has no console scripts), else beside this Python, else on the PATH."""
    if getattr(sys, "frozen", False):
        return [sys.executable, DSPARK]
    beside = Path(sys.executable).parent / ("dspark.exe" if os.name == "nt" else "dspark")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("dspark")
    return [found] if found else None


def command(plan: TrainPlan, program: list[str]) -> list[str]:
    """The ``dspark train`` command for ``plan`` (checked first by :func:`refusal`)."""
    argv = [*program, "train", "--target", plan.target]
    if plan.start_from:
        argv += ["--from", plan.start_from]
    else:
        argv += ["--kind", plan.kind]
        if plan.kind == "block":  # the other kinds refuse a block drafter's settings
            argv += ["--format", plan.fmt] + ([] if plan.markov else ["--no-markov"])
    argv += ["--data", *plan.data] + (["--self-distill"] if plan.self_distill else [])
    if plan.heldout:
        argv += ["--heldout", *plan.heldout]
    argv += ["--out", plan.out, "--steps", str(plan.steps)]
    if plan.minutes > 0:
        argv += ["--time-budget-minutes", f"{plan.minutes:g}"]
    argv += ["--eval-every", str(plan.eval_every), "--eval-prompts", str(plan.eval_prompts)]
    argv += ["--eval-tokens", str(plan.eval_tokens)] + (["--force"] if plan.force else [])
    return argv + shlex.split(plan.extra)


def resume_command(argv: list[str], finish: bool = False) -> list[str]:
    """The run's own command with ``--resume`` (and ``--finish``: end now keeping the best
    held-out checkpoint), never ``--force``, which would start it over."""
    kept = [a for a in argv if a not in ("--force", "--resume", "--finish")]
    return kept + ["--resume"] + (["--finish"] if finish else [])


def shell_line(argv: list[str]) -> str:
    return shlex.join(argv)


def refusal(plan: TrainPlan, program: list[str] | None) -> str | None:
    """Why ``plan`` cannot start, in one sentence, or None."""
    if not plan.target.strip():
        return "no target to train against: choose one above (the app's target is the default)"
    if not Path(plan.target).expanduser().is_dir():
        return f"the target {plan.target} is not a folder"
    if plan.start_from and not Path(plan.start_from).expanduser().is_dir():
        return f"the drafter to start from, {plan.start_from}, is not a folder"
    if not plan.data:
        what = "prompts for the target to continue" if plan.self_distill else "texts"
        return f"no data: add files, a folder or JSONL files with the {what}"
    missing = next((p for p in plan.data + plan.heldout if not Path(p).expanduser().exists()), None)
    if missing:
        return f"{missing} does not exist"
    out = Path(plan.out).expanduser()
    if not plan.out.strip():
        return "no output folder: choose where the drafter is written"
    if out.exists() and not out.is_dir():
        return f"the output folder {plan.out} is a file"
    if out.is_dir() and any(out.iterdir()) and not plan.force:
        if (out / STATE_FILE).is_file() or (out / LOG_FILE).is_file():
            return f"{plan.out} holds a training run: Resume it, or choose a new output folder"
        return f"{plan.out} holds something else: choose a new or empty folder, or tick Replace what it holds"
    try:
        shlex.split(plan.extra)
    except ValueError as e:
        return f"the other options cannot be read ({e})"
    if program is None:
        return "the dspark command is not installed beside this app's Python, nor on the PATH"
    return None


# --- the child process ---------------------------------------------------------------------
class Child:
    """``dspark train`` in a process of its own session (it outlives the app, which pauses it
    when quitting), its output in ``output``. Nothing here waits for it."""

    def __init__(self, argv: list[str], output: Path):
        output.parent.mkdir(parents=True, exist_ok=True)
        self.argv, self.output = argv, output
        with output.open("ab") as sink:
            sink.write(f"$ {shell_line(argv)}\n".encode())
            sink.flush()
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.pid = self.proc.pid
        yield_to_the_app(self.pid)

    def running(self) -> bool:
        return self.proc.poll() is None

    def send(self, sig: int) -> bool:
        return self.running() and send(self.pid, sig)


def yield_to_the_app(pid: int, nice: int | None = None) -> None:
    """Lower the run's priority by ``nice`` (default :data:`NICE`): a run holding every core
    then waits for the window's moments of work instead of stretching them (the tab's polls and
    paints took 9-33 ms of CPU, and at an equal share with a run's two threads a 33 ms one took
    over 100 ms). On an otherwise idle machine the run loses only what the window uses. Set just
    after the start, before the child's Python has made a thread (threads inherit it). POSIX
    (Linux, macOS); elsewhere the run keeps its priority."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, pid) + (NICE if nice is None else nice))
    except (AttributeError, OSError):
        pass


def alive(pid) -> bool:
    """Whether process ``pid`` is there (a run started from a terminal, or before a restart)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's: there all the same
    return True


def send(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
    except OSError:
        return False
    return True


PAUSE, FINISH = signal.SIGTERM, getattr(signal, "SIGUSR1", None)


def last_line(path: Path | None, limit: int = 8192) -> str:
    """The output's last non-empty line (a progress bar's last state, after its carriage returns)."""
    if path is None or not path.is_file():
        return ""
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - limit))
        tail = f.read().decode("utf-8", errors="replace")
    lines = [s.strip() for s in tail.replace("\r", "\n").splitlines() if s.strip() and not s.startswith("$ ")]
    return lines[-1] if lines else ""


# --- the folder ----------------------------------------------------------------------------
def read_json(path: Path) -> dict | None:
    try:
        if path.is_file() and path.stat().st_size < 2**24:
            doc = json.loads(path.read_text(encoding="utf-8"))
            return doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        pass
    return None


def checkpoint(out: Path) -> dict | None:
    """The checkpoint's own record (its step, settings and drafter), read from the safetensors
    header without loading an array; None when there is none."""
    path = Path(out) / STATE_FILE
    try:
        with path.open("rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > 2**26:
                return None
            meta = json.loads(f.read(n)).get("__metadata__", {}).get("meta")
        meta = json.loads(meta) if isinstance(meta, str) else None
    except (OSError, ValueError, struct.error, AttributeError):
        return None
    return meta if isinstance(meta, dict) else None


def status_command(out: str | Path, program: list[str]) -> list[str]:
    """The command that last ran the run in ``out``, as its status recorded it (``dspark train``'s
    own arguments, after this installation's ``program``); [] when it recorded none."""
    said = (read_json(Path(out) / STATUS_FILE) or {}).get("command")
    if not isinstance(said, list) or not said or said[0] != "train" or not all(isinstance(a, str) for a in said):
        return []
    return [*program, *said]


@dataclass(kw_only=True)
class RunState:
    state: str  # "" (no run), preparing, training, measuring, paused, finished, failed, crashed
    sentence: str  # what the tab says of it
    step: int | None = None
    steps: int | None = None
    resumable: bool = False  # a checkpoint to go on from
    live: bool = False  # a process is running it
    pid: int | None = None
    reported: bool = False  # the running process wrote the status itself (its signal handlers are in place)


def run_state(out: str | Path, *, child: Child | None = None, last_step: int | None = None) -> RunState:
    """What the run in ``out`` is doing: ``.train/status.json`` when the run wrote one (a live
    state whose process is gone is a crash), else inferred from the process, the report and the
    checkpoint. ``child``: the process this tab started; ``last_step``: the log's last step."""
    out = Path(out)
    status = read_json(out / STATUS_FILE) or {}
    point = checkpoint(out)
    at = point.get("step") if point else None
    resumable = isinstance(at, int)
    # the status is written at each change of phase, the log at each step: the later of the two
    step = max((x for x in (status.get("step"), last_step) if isinstance(x, int)), default=None)
    steps = status.get("steps") if isinstance(status.get("steps"), int) else None
    if steps is None and point and isinstance(point.get("settings"), dict):
        steps = point["settings"].get("steps")
    said = str(status.get("message") or "")
    pid = child.pid if child is not None else status.get("pid") if isinstance(status.get("pid"), int) else None
    running = child.running() if child is not None else alive(pid) and status.get("state") in LIVE
    where = f" at step {step:,}" if isinstance(step, int) else ""
    said_too = f" · {said}" if said else ""

    def made(state: str, sentence: str, *, resumable: bool = resumable, live: bool = False) -> RunState:
        mine = bool(status) and status.get("pid") == pid
        return RunState(
            state=state,
            sentence=sentence,
            step=step,
            steps=steps,
            resumable=resumable,
            live=live,
            pid=pid,
            reported=mine,
        )

    if running:
        state = status.get("state") if status.get("state") in LIVE else ("training" if step else "preparing")
        return made(state, f"{LIVE[state]}{where}{said_too}", live=True)
    state = status.get("state")
    if state == "finished" or (state is None and (out / REPORT_FILE).is_file()):
        return made("finished", f"finished{where}{said_too}", resumable=False)
    if state == "failed" or (child is not None and child.proc.poll() not in (0, None) and not resumable):
        output, code = (child.output, child.proc.poll()) if child else (None, None)
        why = said or last_line(output) or f"ended with status {code} (below 0: the signal that ended it)"
        return made("failed", f"failed{where}: {why}")
    if state in LIVE:  # it said it was working and its process is gone
        back = f"; Resume goes on from the checkpoint at step {at:,}" if resumable else ""
        return made("crashed", f"ended without a word{where} (killed?){back}")
    if state == "paused" or resumable:  # a self-distillation paused before any step resumes too
        return made(
            "paused", f"paused at step {at:,}" if resumable else "paused while preparing its data", resumable=True
        )
    if step is not None or (out / LOG_FILE).is_file():
        return made("failed", "stopped before its first checkpoint: Start it again", resumable=False)
    return made("", "", resumable=False)


def heldout_files(argv: list[str]) -> list[str]:
    """The ``--heldout`` files of a ``dspark train`` command."""
    if "--heldout" not in argv:
        return []
    rest = argv[argv.index("--heldout") + 1 :]
    return [a for a in rest[: next((i for i, a in enumerate(rest) if a.startswith("--")), len(rest))]]


def compare_set(new: str, heldout: list[str]) -> tuple[str | None, list[str] | str]:
    """The prompts a finished run's drafter is compared on: (a prompt set's name, its prompts)
    from the run's ``--heldout`` files, read as ``dspark train`` reads them; ("", []) without
    them (the app's prompt set); (None, why) when they cannot be read."""
    if not heldout:
        return "", []
    try:
        prompts = read_texts(heldout)
    except DsparkError as e:
        return None, f"the run's held-out prompts cannot be read: {e}"
    return f"held out · {Path(new).name}", prompts


def option(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else None


def block_size(out: str | Path, argv: list[str]) -> int | None:
    """The run's block size (its checkpoint's, its drafter config's, else the command's)."""
    point = checkpoint(Path(out)) or {}
    drafter = point.get("drafter") if isinstance(point.get("drafter"), dict) else {}
    for value in (drafter.get("block_size"), (read_json(Path(out) / "config.json") or {}).get("block_size")):
        if isinstance(value, int) and value > 0:
            return value
    given = option(argv, "--block-size")
    return int(given) if given and given.isdigit() else None

"""Which device MLX computes on, and whether this machine's GPU can be trusted with it.

MLX computes on its own default device (Metal's GPU on a Mac; the CPU on Linux, or the GPU with
``mlx[cuda]``) unless ``DSPARK_DEVICE`` says ``cpu`` or ``gpu``. A model load applies it
(:func:`dspark.loading.load_target`), and so does the test suite at its start. It must be chosen
before mlx-lm is imported: ``mlx_lm.generate`` makes its generation stream on the default device
of that moment.

**The GPU check** (:mod:`dspark.gpu_check`): a GPU that MLX *can* use proves nothing
(``mx.metal.is_available()`` is true wherever Metal is compiled in), and a GPU that returns
garbage still agrees with itself: a virtual Mac's paravirtual GPU has been seen returning zeros
from compute kernels, and crashing on them. So the demo target decodes a few greedy tokens on the
GPU and again on the CPU, and the two must agree: the same tokens, with log-probabilities within
:data:`dspark.gpu_check.TOLERANCE`; a first difference where both devices' log-probabilities are
still within it is a numerical tie (the two best candidates were closer than the devices'
rounding) and is said as one. Anything else, or a GPU that fails, means the app computes on the
CPU and says why in one sentence.

The check runs in a child process (``python -m dspark.gpu_check --check``, or the app's
``--check-device``), because a broken GPU may take the process down with it, and because the
parent must still be free to choose the CPU before it imports mlx-lm. :func:`startup_check` asks
the child once per machine and software (the answer is kept in a small JSON file keyed by the
versions of dspark, MLX and the OS and the machine's name) and :func:`apply` makes the answer the
process's device; :func:`current` is what the app's About box and every saved run's environment
report.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from .errors import DsparkError, printable
from .files import write_text
from .version import __version__

ENV = "DSPARK_DEVICE"
#: How long the child may take before the GPU counts as hung (a first Metal run compiles its
#: kernels: seconds, not minutes).
CHILD_TIMEOUT = 120.0
#: What the check's outcome says about the GPU; "cpu" when there was no GPU to check, "asked"
#: when ``DSPARK_DEVICE`` (or the app's ``--device``) chose the device and nothing was checked.
OUTCOMES = ("agrees", "tie", "wrong", "failed", "cpu", "asked")


@dataclass(frozen=True)
class DeviceCheck:
    """What the GPU check found, and the device the process computes on because of it."""

    outcome: str  # one of OUTCOMES
    device: str  # "gpu" or "cpu": what MLX computes on after the check
    sentence: str  # one sentence for a person: the status bar, About, a saved run
    gpu: str = ""  # the GPU's name, as MLX gives it ("" when there is none)
    key: dict = field(default_factory=dict)  # the software and machine the answer holds for

    @property
    def fell_back(self) -> bool:
        """True when a GPU was there but the check sent the work to the CPU."""
        return self.outcome in ("wrong", "failed")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d) -> DeviceCheck:
        """A check read back from JSON (the child's line, the kept answer); DsparkError when the
        record is not one."""
        if (
            not isinstance(d, dict)
            or d.get("outcome") not in OUTCOMES
            or d.get("device") not in ("gpu", "cpu")
            or not isinstance(d.get("sentence"), str)
            or not isinstance(d.get("gpu", ""), str)
            or not isinstance(d.get("key", {}), dict)
        ):
            raise DsparkError("not a GPU check record")
        return cls(
            outcome=d["outcome"],
            device=d["device"],
            sentence=d["sentence"][:2000],
            gpu=d.get("gpu", ""),
            key=dict(d.get("key", {})),
        )


_current: dict = {"check": None}


def failed(why: str) -> DeviceCheck:
    """A GPU that failed the check, ``why`` said first: the work goes to the CPU."""
    return DeviceCheck(outcome="failed", device="cpu", sentence=f"{why}, so DSpark Studio computes on the CPU")


def no_gpu() -> DeviceCheck:
    """Nothing to check: MLX has no GPU here."""
    return DeviceCheck(outcome="cpu", device="cpu", sentence="MLX computes on the CPU here (no GPU to check)")


def use_env_device() -> str | None:
    """Make ``DSPARK_DEVICE`` (``cpu`` or ``gpu``) MLX's default device; returns it, or None when unset."""
    name = os.environ.get(ENV, "").strip().lower()
    if not name:
        return None
    if name not in ("cpu", "gpu"):
        raise DsparkError(f"{ENV} is {name[:20]!r}: it must be cpu or gpu (or unset: MLX's own default)")
    import mlx.core as mx  # noqa: PLC0415 (ordered: after the BLAS is loaded)

    if name == "gpu" and not mx.is_available(mx.gpu):
        raise DsparkError(f"{ENV} is gpu, but this MLX has no GPU backend here: unset it, or set it to cpu")
    mx.set_default_device(mx.cpu if name == "cpu" else mx.gpu)
    return name


#: The variables C++'s ``std::filesystem::temp_directory_path`` reads, in its order: the first one
#: set is the temporary folder, with no fallback when it is not one.
TEMP_VARIABLES = ("TMPDIR", "TMP", "TEMP", "TEMPDIR")


def temp_dir_problem(environ=os.environ) -> str | None:
    """Why MLX cannot compute in this environment, in one sentence, or None. MLX's CPU backend
    writes the kernels it compiles into the temporary folder C++ names, and a ``TMPDIR`` that is
    no folder raised "filesystem error: temp_directory_path" from the first computation (an
    internal error), where Python's ``tempfile`` would quietly have taken another folder."""
    for name in TEMP_VARIABLES:
        value = environ.get(name)
        if value is None:
            continue
        if value and Path(value).is_dir():  # C++ takes an empty one as a path, which is no folder
            return None
        shown = printable(value)[:200]
        return (
            f"{name} is {shown!r}, which is not a folder: MLX compiles its kernels in the temporary "
            f"folder it names; point it at a folder, or unset it"
        )
    return None


def gpu_name() -> str:
    """The name MLX gives the GPU ("" when it has none or cannot say)."""
    import mlx.core as mx  # noqa: PLC0415 (ordered: after the BLAS is loaded)

    if not mx.is_available(mx.gpu):
        return ""
    try:
        info = mx.device_info(mx.Device(mx.gpu))
    except (AttributeError, RuntimeError, ValueError):  # an mlx without device_info
        return "GPU"
    return str(info.get("device_name") or info.get("architecture") or "GPU").strip()


def check_key() -> dict:
    """What a kept answer holds for: a new dspark, MLX or OS, or another machine, asks again. The
    GPU itself is not asked (that would start Metal in the app's own process, which is what the
    child is for)."""
    import mlx.core as mx  # noqa: PLC0415 (ordered: after the BLAS is loaded)

    return {
        "dspark": __version__,
        "mlx": mx.__version__,
        "os": platform.platform(),
        "machine": platform.machine(),
        "node": platform.node(),
    }


# --- asking the child, keeping the answer, applying it (in the parent) ----------------------------


def child_command() -> list[str]:
    """How to start the check in a child: the app's own executable in a frozen bundle (where
    ``-m`` is no option), else this Python."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "--check-device"]
    return [sys.executable, "-m", "dspark.gpu_check", "--check"]


def read_child(returncode: int | None, stdout: str, stderr: str, *, timeout: float = CHILD_TIMEOUT) -> DeviceCheck:
    """The child's answer; a child that crashed, hung (``returncode`` None) or printed no answer
    is a GPU that failed, said with what happened."""
    if returncode is None:
        return failed(f"the GPU check did not finish in {timeout:g} s (a hung GPU)")
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                return DeviceCheck.from_dict(json.loads(line))
            except (ValueError, DsparkError):
                break
    if returncode < 0:
        try:
            how = f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"signal {-returncode}"
    else:
        how = f"exit {returncode}"
    last = (stderr.strip().splitlines() or [""])[-1][:200]
    return failed(f"the GPU check crashed ({how}{': ' + last if last else ''})")


def ask_child(command: Sequence[str] | None = None, *, timeout: float = CHILD_TIMEOUT) -> DeviceCheck:
    """Run the check in a child process and read its answer (blocking; the app waits with a
    window of its own, :mod:`dspark_studio.startup`)."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    try:
        r = subprocess.run(
            list(command or child_command()),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return read_child(None, "", "", timeout=timeout)
    except OSError as e:
        return failed(f"the GPU check could not start ({e.strerror or e})")
    return read_child(r.returncode, r.stdout, r.stderr, timeout=timeout)


def kept(path: Path, key: dict) -> DeviceCheck | None:
    """The answer kept at ``path`` for ``key``, or None (none, another key, or unreadable)."""
    try:
        if not path.is_file() or path.stat().st_size > 100_000:
            return None
        check = DeviceCheck.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, DsparkError):
        return None
    return check if check.key == key else None


def keep(path: Path, check: DeviceCheck) -> None:
    """Keep ``check`` at ``path`` (whole or not at all); a folder that cannot be written only
    means the check runs again next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(check.to_dict(), indent=1))
    except OSError:
        pass


def needs_check() -> bool:
    """True when MLX would compute on a GPU that nobody chose explicitly."""
    import mlx.core as mx  # noqa: PLC0415 (ordered: after the BLAS is loaded)

    return not os.environ.get(ENV, "").strip() and mx.is_available(mx.gpu)


def startup_check(
    cache: Path, *, ask: Callable[[], DeviceCheck] | None = None, gpu: bool | None = None, again: bool = False
) -> DeviceCheck:
    """The device this process should compute on, decided once per machine and software: the
    kept answer for this key at ``cache``, else the child's (``ask``, by default
    :func:`ask_child`), kept. ``gpu`` overrides whether there is a GPU to check (tests);
    ``again`` asks even when an answer is kept."""
    if os.environ.get(ENV, "").strip():
        name = os.environ[ENV].strip().lower()
        return DeviceCheck(
            outcome="asked",
            device=name if name in ("cpu", "gpu") else "cpu",
            sentence=f"the {name.upper()} was asked for ({ENV}={name}); the GPU was not checked",
        )
    if not (needs_check() if gpu is None else gpu):
        return no_gpu()
    key = check_key()
    found = None if again else kept(cache, key)
    if found is not None:
        return found
    answer = replace((ask or ask_child)(), key=key)
    keep(cache, answer)
    return answer


def apply(check: DeviceCheck) -> None:
    """Make ``check``'s device the process's (before mlx-lm is imported: ``ENV`` is set too, so
    that :mod:`dspark` picks it where it is imported again) and remember it for :func:`current`."""
    if check.fell_back:
        os.environ[ENV] = "cpu"
        import mlx.core as mx  # noqa: PLC0415 (ordered: after the BLAS is loaded)

        mx.set_default_device(mx.cpu)
    _current["check"] = check


def current() -> DeviceCheck | None:
    """The check this process applied (None: none ran, as in the library used on its own)."""
    return _current["check"]


def describe_current() -> dict:
    """The applied check as a flat record for a saved run's or benchmark's environment."""
    check = current()
    if check is None:
        return {}
    return {"outcome": check.outcome, "device": check.device, "gpu": check.gpu, "sentence": check.sentence}

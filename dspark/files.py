"""Writing the user's work safely: a file is written under a temporary name and renamed into
place, so an interrupted or failed write never leaves a half-written file where a good one was,
and a failed write cleans up after itself and says why in one sentence (a full disk, a
read-only folder)."""

from __future__ import annotations

import errno
import glob
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import DsparkError


def output_dir(path: str | Path, allow_existing: bool) -> Path:
    """``path`` as a directory to write into: created if needed; refused when it is a file,
    when it is not writable, or (unless ``allow_existing``) when it already holds files."""
    p = Path(path).expanduser()
    try:  # a path past PATH_MAX, or through a file, fails already here
        if p.exists() and not p.is_dir():
            raise DsparkError(f"{p} is a file, not a directory")
        if p.is_dir() and not allow_existing and any(p.iterdir()):
            raise DsparkError(f"{p} exists and is not empty (use --force to overwrite)")
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DsparkError(f"cannot create {short(p)} ({reason(e)})") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise DsparkError(f"{p} is not writable")
    return p


def short(path: str | Path) -> str:
    """A path as a sentence quotes it: one past 300 characters with its middle left out, so what
    the sentence says about it is still there (a message is cut at 2,000 characters)."""
    text = str(path)
    return text if len(text) <= 300 else f"{text[:120]}…{text[-120:]}"


def reason(e: OSError, path: Path | None = None) -> str:
    """What went wrong with a write, in words; ``path``: where it wrote, for an error that does not
    say ENOSPC (MLX's writer raises EIO, "[write] Unable to write N bytes"): a disk with under a
    MiB free then is the cause."""
    if e.errno == errno.ENOSPC or (e.errno in (None, errno.EIO) and path is not None and _nearly_full(path)):
        return "the disk is full"
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "the folder is not writable"
    if e.errno == errno.ENAMETOOLONG:
        return "the path is too long for this system"
    return e.strerror or str(e)


def _nearly_full(path: Path) -> bool:
    try:
        return shutil.disk_usage(Path(path).parent).free < 2**20
    except OSError:
        return False


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` for a temporary file beside ``path``, then rename it to ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp{path.suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise DsparkError(f"could not write {path}: {reason(e, path)}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def staged_dir(path: str | Path) -> Iterator[Path]:
    """A whole output directory, written or not at all: the caller fills a hidden temporary
    folder beside ``path`` (``.<name>.<pid>.tmp``), which becomes ``path`` by one rename when the
    block ends without an error, and is deleted otherwise. ``path`` must not hold anything yet:
    a killed or failed write leaves no half-written directory that a rerun would refuse."""
    p = Path(path).expanduser()
    if p.exists() and (not p.is_dir() or any(p.iterdir())):
        raise DsparkError(f"{p} exists and is not an empty directory")
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        for stale in p.parent.glob(f".{glob.escape(p.name)}.*.tmp"):  # what a killed write of this folder left
            pid = stale.name[len(p.name) + 2 : -len(".tmp")]
            if pid.isdigit() and (int(pid) == os.getpid() or not _alive(int(pid))):
                shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir()
    except OSError as e:
        raise DsparkError(f"cannot create {short(p)} ({reason(e)})") from None
    try:
        yield tmp
        if p.is_dir():
            p.rmdir()  # empty (checked above): the rename puts the new one in its place
        os.rename(tmp, p)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise DsparkError(f"could not write {short(p)}: {reason(e)}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def exchange(a: Path, b: Path) -> bool:
    """Swap two existing folders in one step, where the system offers it (Linux's ``renameat2``
    with ``RENAME_EXCHANGE``, macOS's ``renamex_np`` with ``RENAME_SWAP``): a process killed at
    any moment leaves each name holding a whole folder. False, with nothing moved, where it does
    not (an older C library, a file system without it); another failure is the OSError."""
    import ctypes  # noqa: PLC0415 (only when an output folder is replaced)

    libc = ctypes.CDLL(None, use_errno=True)
    if sys.platform == "darwin" and hasattr(libc, "renamex_np"):
        call = lambda: libc.renamex_np(os.fsencode(a), os.fsencode(b), 0x2)  # RENAME_SWAP
    elif sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        at_cwd = -100  # AT_FDCWD: relative paths are the process's own
        call = lambda: libc.renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), 0x2)  # RENAME_EXCHANGE
    else:
        return False
    if call() == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(code, os.strerror(code), str(b))


def remove_stale(folder: Path) -> int:
    """Delete temporary files an earlier process left when it was killed mid-write (this
    module's ``.<name>.<pid>.tmp`` files whose process is gone); returns how many."""
    removed = 0
    for f in folder.glob(".*.tmp*"):
        parts = f.name.split(".")
        pid = next((int(x) for x in parts if x.isdigit()), None)
        if pid is None or pid == os.getpid() or _alive(pid):
            continue
        f.unlink(missing_ok=True)
        removed += 1
    return removed


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


alive = _alive


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def save_safetensors(path: Path, arrays: dict, metadata: dict | None = None) -> None:
    import mlx.core as mx  # noqa: PLC0415 (slow: mlx, not needed for --help)

    def write(tmp: Path) -> None:
        try:
            mx.save_safetensors(str(tmp), arrays, metadata=metadata or {})
        except RuntimeError as e:  # mlx reports I/O failures as RuntimeError
            raise OSError(errno.ENOSPC if "space" in str(e).lower() else errno.EIO, str(e)) from None
        _fsync(tmp)

    atomic_write(path, write)


def _fsync(path: Path) -> None:
    """The bytes reach the disk before the rename makes them the real file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

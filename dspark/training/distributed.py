"""Data-parallel training over ``mlx.distributed``: the processes ``mlx.launch`` starts (the ring
backend over Ethernet or Thunderbolt, jaccl where MLX offers it) train one drafter together.

As in mlx-lm's tuner (``mlx_lm/tuner/trainer.py``): every rank joins with
``mx.distributed.init()``, holds the (small) token data and the same random state, and takes its
own part of every step's batch; gradients meet in ``mx.distributed.all_sum``; rank 0 alone writes
files and shows progress. Unlike it, ``--batch`` stays the global batch and a rank's share of the
loss is already divided by the *whole* batch's weight, so the all_sum of the shares is the gradient
one process computes on the whole batch: N ranks train the same weights as one, to float rounding
(mlx-lm's mean of per-rank means is that only when every rank's part weighs the same).

Every wait on the other ranks is bounded. MLX's ring raises when a peer's connection closes (a
rank died): that is :class:`RankLost`, one sentence. A peer that stops answering without closing
(a machine asleep, a cable pulled) would block ``all_sum`` forever, so a watchdog thread ends this
process with one sentence after ``timeout`` seconds of waiting (MLX releases the GIL while it
waits, so the thread runs).

Without ``mlx.launch`` the world is one process and nothing here does anything.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import mlx.core as mx
import numpy as np

from ..blas import default_threads, set_threads
from ..errors import DsparkError

DEFAULT_TIMEOUT = 600.0


class RankLost(DsparkError):
    """Another rank went away in the middle of a collective (its connection closed)."""


class Refused(DsparkError):
    """This rank refused to start, and says so for all of them."""


class OtherRankStopped(DsparkError):
    """Another rank refused to start and said why; this one stops without a word."""


class World:
    """The ranks of one training run: this process's ``rank`` of ``size``. ``World()`` is the
    single process (every method is then the identity or free)."""

    def __init__(self, group=None, timeout: float = DEFAULT_TIMEOUT):
        self.group = group
        self.rank, self.size = (group.rank(), group.size()) if group is not None else (0, 1)
        self.timeout = timeout
        self.after_stop = ""  # what a stop leaves behind (the last checkpoint), said with it
        self._deadline: float | None = None
        self._waiting_at = ""
        self._watchdog: threading.Thread | None = None
        self._log = None
        self._stderr = sys.stderr
        self._neighbours: tuple[int, ...] = ()  # pids of the other ranks one mlx.launch started on this machine

    @classmethod
    def join(cls, timeout: float = DEFAULT_TIMEOUT) -> World:
        """The processes ``mlx.launch`` started (any backend MLX has), or this one alone."""
        group = mx.distributed.init()
        world = cls(group if group.size() > 1 else None, timeout)
        if world.size > 1:
            world._share_cores()
        return world

    def _share_cores(self) -> None:
        """Ranks on one machine split its cores between their OpenBLAS and tokenizer threads,
        which spin while they wait: two ranks that each used both cores of this 2-core machine
        trained the demo drafter at 0.27 steps/s, with one thread each at 0.64-0.71. The same
        exchange names the ranks one launch runs here (same machine, same parent), which a rank
        that stops waiting continues (:meth:`_wake_neighbours`)."""
        name = int.from_bytes(hashlib.sha256(socket.gethostname().encode()).digest()[:6], "little")
        names, pids, parents = (np.zeros(self.size, np.int64) for _ in range(3))
        names[self.rank], pids[self.rank], parents[self.rank] = name, os.getpid(), os.getppid()
        names, pids, parents = (
            np.array(a) for a in self.sum([mx.array(names), mx.array(pids), mx.array(parents)], "the start")
        )
        here = int((names == name).sum())
        self._neighbours = tuple(
            int(pids[r]) for r in range(self.size) if r != self.rank and names[r] == name and parents[r] == os.getppid()
        )
        if here > 1:
            threads = max(1, (default_threads() or os.cpu_count() or 1) // here)
            set_threads(threads)
            os.environ.setdefault("RAYON_NUM_THREADS", str(threads))

    @property
    def main(self) -> bool:
        return self.rank == 0

    def __repr__(self) -> str:
        return f"World(rank {self.rank} of {self.size})"

    # --- the batch ----------------------------------------------------------------------
    def check_batch(self, batch: int) -> None:
        if batch % self.size:
            raise DsparkError(
                f"--batch {batch} cannot be split evenly over {self.size} processes: give a multiple "
                f"of {self.size} (it is the global batch; each process takes 1/{self.size} of it)"
            )

    def part(self, n: int) -> tuple[int, int]:
        """This rank's contiguous share [lo, hi) of ``n`` items (a multiple of ``size``):
        contiguous, so a rank's anchors share few sequences and it runs the target on few."""
        k = n // self.size
        return self.rank * k, (self.rank + 1) * k

    # --- collectives, each watched --------------------------------------------------------
    def sum(self, arrays: Sequence[mx.array], what: str) -> list[mx.array]:
        """Each array summed over the ranks (one all_sum per dtype), evaluated here."""
        if self.size == 1:
            return list(arrays)
        out: list = [None] * len(arrays)
        for dtype in dict.fromkeys(a.dtype for a in arrays):
            idx = [i for i, a in enumerate(arrays) if a.dtype == dtype]
            flat = mx.distributed.all_sum(mx.concatenate([arrays[i].reshape(-1) for i in idx]), group=self.group)
            with self.waiting(what):
                mx.eval(flat)
            ends = np.cumsum([arrays[i].size for i in idx]).tolist()
            for i, piece in zip(idx, mx.split(flat, ends[:-1])):
                out[i] = piece.reshape(arrays[i].shape)
        return out

    def agree(self, *flags: bool) -> tuple[bool, ...]:
        """Each flag true on every rank when it is true on any (a stop, a checkpoint, the
        time budget: what every rank must do at the same step)."""
        if self.size == 1:
            return tuple(flags)
        (total,) = self.sum([mx.array([int(f) for f in flags], mx.int32)], "a step's end")
        return tuple(bool(x) for x in total.tolist())

    def barrier(self, what: str) -> None:
        """Every rank gets here before any goes on."""
        self.sum([mx.zeros(1, mx.int32)], what)

    def broadcast(self, data: bytes | None, what: str) -> bytes:
        """Rank 0's ``data`` on every rank (the others pass None)."""
        if self.size == 1:
            return data or b""
        (n,) = self.sum([mx.array([len(data) if self.main else 0], mx.int64)], what)
        buf = np.frombuffer(data, np.uint8) if self.main else np.zeros(int(n.item()), np.uint8)
        (got,) = self.sum([mx.array(buf)], what) if buf.size else (mx.array(buf),)
        return bytes(np.array(got))

    @contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """A wait on the other ranks: bounded by the watchdog; a closed connection is RankLost."""
        self._start_watchdog()
        self._waiting_at, self._deadline = what, time.monotonic() + self.timeout
        try:
            yield
        except RuntimeError as e:  # the inputs were computed before: this is the network ("[ring] connection to a
            # peer was lost")
            raise RankLost(
                self._stop_sentence(
                    f"lost its connection to another rank at {what} ({e}): that rank "
                    f"stopped or its machine went away (its .train/rank-N.log may say "
                    f"why)"
                )
            ) from None
        finally:
            self._deadline = None

    def _start_watchdog(self) -> None:
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch, name="dspark-rank-watchdog", daemon=True)
            self._watchdog.start()

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout / 4))
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                sentence = self._stop_sentence(
                    f"waited {self.timeout:g} s at {self._waiting_at} for another rank "
                    f"that no longer answers (--rank-timeout)"
                )
                self.log(sentence)
                print(f"dspark: error: {sentence}", file=self._stderr, flush=True)
                self._wake_neighbours()
                os._exit(2)  # the main thread is stuck inside MLX: nothing else would end it

    def _wake_neighbours(self) -> None:
        """Continue the ranks this machine runs for the same launch. When a rank ends with an
        error, mlx.launch sends the others SIGTERM and waits for each; a rank that was stopped
        (SIGSTOP, Ctrl-Z) holds that signal until it is continued, so the launch never
        returned. Continued, it ends: its next collective finds this rank gone, or the
        launcher's SIGTERM arrives. A rank on another machine is ended by the launcher itself."""
        for pid in self._neighbours:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:  # gone already, or not ours to signal
                pass

    def _stop_sentence(self, what: str) -> str:
        then = f": {self.after_stop}" if self.after_stop else ""
        return f"rank {self.rank} of {self.size} {what}; the run stops{then}"

    # --- agreeing before anything is written ----------------------------------------------------
    @contextmanager
    def together(self) -> Iterator[None]:
        """Every rank runs the block (which must hold no collective); when some refuse (a
        DsparkError), the lowest of them raises its sentence and the others stop silently
        (OtherRankStopped), so a refusal is said once, by a rank that has it."""
        failed: DsparkError | None = None
        try:
            yield
        except DsparkError as e:
            if self.size == 1:
                raise
            failed = e
        if self.size == 1:
            return
        mine = np.zeros(self.size, np.int32)
        mine[self.rank] = failed is not None
        (flags,) = self.sum([mx.array(mine)], "the start")
        first = next((r for r, f in enumerate(flags.tolist()) if f), None)
        if first is None:
            return
        if first == self.rank:
            raise Refused(str(failed) if self.main else f"rank {self.rank}: {failed}") from failed
        raise OtherRankStopped(f"rank {first} refused to start")

    def check_same(self, what: str, parts: Sequence) -> None:
        """Refuse (in ``together``) when this rank's ``parts`` differ from rank 0's."""
        if self.size == 1:
            return
        digest = hashlib.sha256()
        for p in parts:
            digest.update(np.ascontiguousarray(p).tobytes() if isinstance(p, np.ndarray) else json.dumps(p).encode())
        theirs = self.broadcast(digest.digest() if self.main else None, "the start")
        with self.together():
            if theirs != digest.digest():
                raise DsparkError(
                    f"its {what} differ from rank 0's: give every machine the same target, data and "
                    f"options (the same files at the same paths)"
                )

    # --- files ----------------------------------------------------------------------------
    def mirror(self, folder: Path, names: Sequence[str]) -> Path:
        """Where this rank reads rank 0's files ``names`` (paths in ``folder``, those rank 0
        has): ``folder`` itself on rank 0, a private copy on every other rank (whose machine may
        not see rank 0's disk), so a resumed run starts every rank from rank 0's checkpoint."""
        if self.size == 1:
            return folder
        have = [n for n in names if (folder / n).is_file()] if self.main else None
        listing = json.loads(self.broadcast(json.dumps(have).encode() if self.main else None, "the resume"))
        copy = None if self.main else Path(tempfile.mkdtemp(prefix=f"dspark-rank{self.rank}-"))
        if copy is not None:
            atexit.register(shutil.rmtree, copy, True)
        for name in listing:
            data = self.broadcast((folder / name).read_bytes() if self.main else None, "the resume")
            if copy is not None:
                (copy / name).parent.mkdir(parents=True, exist_ok=True)
                (copy / name).write_bytes(data)
        return folder if copy is None else copy

    def open_log(self, path: Path) -> None:
        """This rank's own log file. MLX's own messages (the ring's retries) go there too: the
        process's stderr file descriptor is the log, Python's ``sys.stderr`` stays the terminal."""
        if self.size == 1:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(path, "a", buffering=1, encoding="utf-8")
        terminal = os.dup(2)
        os.dup2(self._log.fileno(), 2)
        self._stderr = sys.stderr = os.fdopen(terminal, "w", buffering=1, encoding="utf-8", errors="replace")
        self.log(f"rank {self.rank} of {self.size}, pid {os.getpid()}")

    def log(self, message: str) -> None:
        if self._log is not None:
            self._log.write(f"{time.strftime('%H:%M:%S')} {message}\n")

    def say(self, message: str) -> None:
        """Rank 0 shows ``message``; every rank keeps it in its log."""
        self.log(message.strip("\n"))
        if self.main:
            print(message, file=self._stderr, flush=True)


__all__ = ["DEFAULT_TIMEOUT", "OtherRankStopped", "RankLost", "Refused", "World"]

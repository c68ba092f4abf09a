"""The ``dspark`` command line. Every subcommand is a module of this package with the same three
names: ``HELP`` (its line in ``dspark --help``), ``add_parser(subparsers)`` (its options, most
from the settings dataclasses: ``GenerationConfig``, ``DflashConfig``, ``TrainSettings``; see
:mod:`dspark.options`) and ``run(args) -> int`` (the arguments turned into library calls, the
results printed). Here: the parser that assembles them and :func:`main`, which runs one.

Every error a user can cause prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys

from ..blas import use_fast_blas
from ..device import temp_dir_problem, use_env_device
from ..errors import DsparkError, printable, report_bug
from ..options import Parser
from . import bench, calibrate, costs, diagnose, export, generate, init, inspect, make_demo, quantize, train

#: Every subcommand's module, in the order ``dspark --help`` lists them.
COMMANDS = {
    "init": init,
    "generate": generate,
    "costs": costs,
    "inspect": inspect,
    "quantize": quantize,
    "train": train,
    "calibrate": calibrate,
    "bench": bench,
    "make-demo": make_demo,
    "diagnose": diagnose,
    "export": export,
}


def build_parser(commands=tuple(COMMANDS)) -> argparse.ArgumentParser:
    """``dspark``'s parser, with the options of each of ``commands`` (default: all); the others
    are listed by name and help only, so ``dspark --help`` and ``dspark X`` build no parser that
    needs MLX but X's own."""
    p = Parser(prog="dspark", description="Speculative decoding with block drafters on MLX.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        q = command.add_parser(sub) if name in commands else sub.add_parser(name, help=command.HELP)
        q.set_defaults(run=command.run, parser=q)
    return p


def _interrupt(signum, frame):
    # A command already stopping with its sentence (a DsparkError on its way out, in an except
    # or finally) keeps it: a distributed rank that lost another got mlx.launch's SIGTERM for
    # the same loss while saying so, and said "interrupted" instead.
    if isinstance(sys.exception(), DsparkError):
        return
    raise KeyboardInterrupt


class OutputLost(Exception):
    """Standard output could not be written: its reader went away (``| head``) or its disk is
    full (``> /dev/full``)."""

    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


class WatchedOutput:
    """``sys.stdout`` while a command runs from the shell: a write that fails ends the command
    as :class:`OutputLost`, whichever code wrote it, and not as a bug."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as e:
            raise OutputLost(e) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            raise OutputLost(e) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def output_lost(e: OutputLost, prog: str = "dspark") -> int:
    """Python's advice for a command whose output is gone: point the descriptor at the null
    device, so that the flush at exit does not fail again with a traceback. A reader that went
    away ends the command quietly, with the status a shell gives a process SIGPIPE ended."""
    from ..files import reason  # noqa: PLC0415 (only when the output is lost)

    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.__stdout__.fileno())
        os.close(null)
    except (OSError, AttributeError, ValueError):  # no stdout descriptor to replace
        pass
    if isinstance(e.error, BrokenPipeError):
        return 128 + signal.SIGPIPE if hasattr(signal, "SIGPIPE") else 1
    print(f"{prog}: error: could not write the output: {reason(e.error)}", file=sys.stderr)
    return 2


def _command(argv: list[str]) -> int:
    """Parse ``argv`` and run its subcommand; what follows the command's name is ``args.argv``."""
    args, extra = build_parser(argv[:1]).parse_known_args(argv)
    if extra:  # said by the command's own parser, which --help then explains
        args.parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.argv = argv[1:]
    # the environment MLX reads, said before a command starts (the temporary folder was an
    # internal error mid-load; DSPARK_DEVICE=gpu without a GPU was said only where a model loads)
    problem = temp_dir_problem(os.environ)
    if problem:
        raise DsparkError(problem)
    use_env_device()
    return args.run(args)


def _run(fn, arg) -> int:
    """Exit status: 0 done, 2 a mistake the user can fix (one line), 130 interrupted, 1 a bug
    (one line; the traceback goes to a log file)."""
    try:
        code = fn(arg)
        sys.stdout.flush()  # here, not at exit: a full disk is then said as one
        return code
    except OutputLost as e:
        return output_lost(e)
    except DsparkError as e:
        print("dspark: error: " + " ".join(str(e).split()), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dspark: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("dspark: error: out of memory: choose a smaller model, fewer tokens or a smaller block", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno != errno.ENAMETOOLONG:
            print("dspark: " + report_bug(e), file=sys.stderr)
            return 1
        # a path the system cannot hold, wherever a command first looks at it (make-demo's and
        # quantize's --out were internal errors): the user's to shorten
        from ..files import short  # noqa: PLC0415 (only for this refusal)

        where = f"{short(e.filename)}: " if e.filename else ""
        print(f"dspark: error: {printable(where)}the path is too long for this system", file=sys.stderr)
        return 2
    except (SystemExit, GeneratorExit):
        raise
    # a bug (a Rust panic from tokenizers is no Exception): one line, the traceback in a file
    except BaseException as e:
        print("dspark: " + report_bug(e), file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # run as the dspark command (not called from Python)
        use_fast_blas()
        # A terminal closing, kill or a scheduler: the same clean stop as Ctrl-C, whatever runs
        # (a SIGHUP that nohup set to be ignored stays ignored).
        signal.signal(signal.SIGTERM, _interrupt)
        if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
            signal.signal(signal.SIGHUP, _interrupt)
        sys.stdout = WatchedOutput(sys.stdout)
    argv = sys.argv[1:] if argv is None else list(argv)
    return _run(_command, argv)


__all__ = ["COMMANDS", "build_parser", "main"]

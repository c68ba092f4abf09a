"""User-facing errors: one clear sentence, no traceback (the CLI and the app print ``str(e)``).

Anything else that escapes is a bug: ``report_bug`` keeps its traceback in a log file and gives
the one line to show instead (the CLI prints it, the app puts it in its message bar).
"""

import json
import os
import sys
import time
import traceback
from pathlib import Path

#: A file larger than this is not a config.json (a crafted one could be gigabytes).
MAX_CONFIG_BYTES = 16 * 2**20


class DsparkError(Exception):
    """Something the user can fix: a path, a file, an argument."""


class NotGemma4Error(DsparkError):
    pass


class DrafterMismatchError(DsparkError):
    pass


def read_config(directory: Path, what: str, name: str = "config.json") -> dict:
    """``directory/name`` as a dict, or a DsparkError saying what is wrong with it. Only a
    regular file is opened (a FIFO would block forever)."""
    path = directory / name
    if not path.is_file():
        raise DsparkError(f"{directory} has no {name}: not {what} directory")
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise DsparkError(f"{path} is {path.stat().st_size / 2**20:.0f} MiB, too large for a config file")
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DsparkError(f"{path} is not valid JSON ({e})") from None
    except OSError as e:
        raise DsparkError(f"cannot read {path} ({e.strerror or e})") from None
    if not isinstance(config, dict):
        raise DsparkError(f"{path} does not hold a JSON object")
    return config


def log_dir() -> Path:
    """Where bug reports are kept (``DSPARK_STUDIO_HOME/logs`` when set, else the user log folder)."""
    home = os.environ.get("DSPARK_STUDIO_HOME")
    if home:
        return Path(home) / "logs"
    from platformdirs import user_log_dir

    return Path(user_log_dir("dspark-studio", "DSpark"))


def report_bug(exc: BaseException, program: str = "dspark") -> str:
    """Save ``exc``'s traceback to a log file; the one line to show (with the file's path)."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    what = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    try:
        folder = log_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{program}-error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
        path.write_text(f"{program} {' '.join(sys.argv[1:])}\n\n{text}")
        where = f"details in {path}"
    except OSError:
        where = "the details could not be saved"
    return f"internal error (a bug, please report it): {what}; {where}"

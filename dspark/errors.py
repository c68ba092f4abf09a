"""User-facing errors: one clear sentence, no traceback (the CLI and the app print ``str(e)``)."""

import json
from pathlib import Path


class DsparkError(Exception):
    """Something the user can fix: a path, a file, an argument."""


class NotGemma4Error(DsparkError):
    pass


class DrafterMismatchError(DsparkError):
    pass


def read_config(directory: Path, what: str) -> dict:
    """``directory/config.json`` as a dict, or a DsparkError saying what is wrong with it."""
    path = directory / "config.json"
    if not path.is_file():
        raise DsparkError(f"{directory} has no config.json: not {what} directory")
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DsparkError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise DsparkError(f"{path} does not hold a JSON object")
    return config

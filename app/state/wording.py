"""The library's sentences speak of the command line ("give it as --target"); in the app the
same sentence names the app's control instead. Every failure the window shows passes here."""

from __future__ import annotations

import re

from dspark import __version__
from dspark.config import GenerationConfig
from dspark.options import describe

#: Whole phrases first, then any flag of a generation setting by its form label.
PHRASES = {
    "give it as --target": "open it with File ▸ Open target…",
    "give it as --drafter": "add it under Drafters with Add… (File ▸ Add drafter…)",
    "export with --drop-heads": "tick “Leave out the Markov and confidence heads”",
    "use --force to replace what it holds": "tick “Replace what the folder holds”",
    "--target": "the target (File ▸ Open target…)",
    "--drafter": "the drafters (File ▸ Add drafter…)",
}
FLAG = re.compile(r"--[a-z][a-z0-9-]*")


def _setting_names() -> dict[str, str]:
    return {s.flag: f"the {s.label} setting" for s in describe(GenerationConfig) if s.form}


def in_app(text: str) -> str:
    """``text`` with each command-line flag replaced by the control that sets it in the app."""
    for phrase, words in PHRASES.items():
        text = text.replace(phrase, words)
    settings = _setting_names()
    return FLAG.sub(lambda m: settings.get(m.group(0), m.group(0)), text)


def about_text(check, blas: str, qt: str) -> str:
    """What Help ▸ About says: the versions that decide what runs (``qt``: PySide6's, from the
    window, as this room imports no Qt), the BLAS, and the device the app computes on with the
    first-launch GPU check's sentence (``check``: a :class:`dspark.device.DeviceCheck`, or None
    when none ran)."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 (slow: ~60 modules, for About only)

    def installed(name: str) -> str:  # a frozen bundle may carry no metadata: then what the check recorded
        try:
            return version(name)
        except PackageNotFoundError:
            return str((check.key if check is not None else {}).get(name, "unknown"))

    device = "not checked" if check is None else check.device.upper()
    if check is not None and check.gpu and check.device == "gpu":
        device += f" ({check.gpu})"
    lines = [
        f"DSpark Studio {__version__}",
        f"MLX {installed('mlx')}, mlx-lm {installed('mlx-lm')}, PySide6 {qt}",
        f"Computes on: {device}",
    ]
    if check is not None:
        lines.append(f"GPU check: {check.sentence}")
    lines.append(f"BLAS: {blas}")
    return "\n".join(lines)

"""``dspark calibrate``: fit the sequential temperatures of a drafter's confidence head on
held-out rounds (:mod:`dspark.training.calibrate`) and save them into the drafter."""

from __future__ import annotations

from pathlib import Path

from ..config import GenerationConfig
from ..corpus import heldout_prompts
from ..errors import DsparkError
from ..options import check_range
from ..training.texts import read_texts
from .say import say, show

HELP = "fit a drafter's confidence temperatures (dspark calibrate --help)"


def add_parser(subparsers):
    ap = subparsers.add_parser(
        "calibrate", help=HELP, description="Fit STS temperatures of a drafter's confidence head."
    )
    ap.add_argument("--target", required=True)
    ap.add_argument("--drafter", required=True, help="drafter directory (the temperatures are saved into it)")
    ap.add_argument(
        "--prompts",
        nargs="+",
        help="prompt files (.txt/.py/.md, or .jsonl with text/prompt); default: held-out corpus prompts",
    )
    ap.add_argument("--rounds", type=int, default=200, help="speculative rounds to collect")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens generated per prompt")
    ap.add_argument("--prompt-len", type=int, default=64, help="prompt tokens cut from each stretch of a prompt file")
    ap.add_argument("--out", help="save the calibrated drafter here instead of over --drafter")
    return ap


def run(a) -> int:
    from ..loading import load_drafter, load_target  # noqa: PLC0415 (slow: mlx, not needed for --help)
    from ..training.calibrate import calibrate_drafter, format_calibration  # noqa: PLC0415 (slow: the training stack)
    from ..training.data import cut_prompts, encode_all  # noqa: PLC0415 (slow: mlx)

    for flag, value, hi in (
        ("--rounds", a.rounds, 100_000),
        ("--max-tokens", a.max_tokens, 1_000_000),
        ("--prompt-len", a.prompt_len, 1_000_000),
    ):
        check_range(flag, value, 1, hi)
    target = load_target(a.target)
    drafter = load_drafter(a.drafter, target, say=say)
    if not hasattr(drafter, "save"):
        raise DsparkError(f"{a.drafter} is a {drafter.format} drafter this version cannot write back")
    if not drafter.has_confidence:
        raise DsparkError("this drafter has no confidence head: nothing to calibrate")
    if a.prompts:
        prompts = cut_prompts(encode_all(target, read_texts(a.prompts)), a.max_tokens + a.prompt_len, a.prompt_len)
    else:
        prompts = heldout_prompts(max(4, a.rounds // 8))
    if not prompts:
        raise DsparkError("no prompts to calibrate on")
    result = calibrate_drafter(target, drafter, prompts, rounds=a.rounds, max_tokens=a.max_tokens)
    drafter.calibration = result.kept()
    drafter.save(a.out or a.drafter)
    _profile(
        target,
        drafter,
        prompts,
        acceptance=result.per_position_acceptance,
        src=Path(a.drafter),
        out=Path(a.out or a.drafter),
    )
    show(format_calibration(result))
    show(
        f"saved calibration to {Path(a.out or a.drafter)}"
        + ("" if drafter.calibration else " (raw confidences kept: the fit did not lower the held-out ECE)")
    )
    return 0


def _profile(target, drafter, prompts, *, acceptance: list[float], src: Path, out: Path) -> None:
    """The drafter's profile (``dspark diagnose`` compares with it) from the calibration's rounds:
    their acceptance on this target and prompt style; the longest context trained on is kept from
    the profile training wrote, when there is one."""
    if not acceptance:
        return
    from ..diagnose.style import run_style  # noqa: PLC0415 (slow: numpy)
    from ..drafter_profile import PROFILE_FILE, measured, read_file, write_own  # noqa: PLC0415 (slow: numpy)

    before = read_file(src / PROFILE_FILE) if (src / PROFILE_FILE).is_file() else None
    templated, thinking = run_style(target, GenerationConfig(), prompts)  # calibrate generates with the defaults
    write_own(
        out,
        measured(
            acceptance,
            target,
            block_size=drafter.block_size,
            templated=templated,
            thinking=thinking,
            context_length=before.context_length if before else None,
            source="calibrate",
            prompts=len(prompts),
        ),
    )

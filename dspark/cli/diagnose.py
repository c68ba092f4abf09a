"""``dspark diagnose``: run a few prompts, compare with what the drafter should reach, and print
what lowers its acceptance, most severe first (``--json``: one object); ``--record`` measures the
drafter's profile instead and keeps it with the user's data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..config import GenerationConfig
from ..diagnose.findings import describe, refused
from ..errors import DrafterMismatchError
from ..options import add_options, check_range, from_args
from ..prompts import DEFAULT, get, read_set
from .say import say, show

HELP = "why a drafter is rejected: run a few prompts and name each cause found (dspark diagnose --help)"

#: Prompts of the set a diagnosis runs unless --limit says otherwise: enough rounds to judge
#: (a few hundred at the default --max-tokens), few enough to take seconds on small models.
DEFAULT_PROMPTS = 4
DEFAULT_MAX_TOKENS = 96
GENERATION = (
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "block_size",
    "chat_template",
    "system_prompt",
    "chat_template_config",
    "stop_at_eos",
)


def add_parser(subparsers):
    ap = subparsers.add_parser(
        "diagnose",
        help=HELP,
        description="Why a drafter is rejected: run a few prompts, "
        "compare with what the drafter should reach (its profile) and name each cause found, "
        "most severe first.",
    )
    ap.add_argument("--target", required=True, help="target model directory (or Hugging Face name)")
    ap.add_argument("--drafter", required=True, help="drafter directory (or Hugging Face name)")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--prompt-set", default=DEFAULT, help=f"a bundled prompt set (default: {DEFAULT})")
    src.add_argument(
        "--prompts",
        metavar="FILE",
        help="a prompt set file: .json (a list of prompts) or .txt (prompts separated by lines holding only ---)",
    )
    ap.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_PROMPTS,
        help=f"prompts of the set to run, from its first (default: {DEFAULT_PROMPTS})",
    )
    ap.add_argument(
        "--max-tokens",
        type=int,
        default=DEFAULT_MAX_TOKENS,
        help=f"tokens to generate per prompt (default: {DEFAULT_MAX_TOKENS})",
    )
    add_options(ap, GenerationConfig, only=GENERATION)
    ap.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: findings, per_position_acceptance, "
        "expected_per_position, tau, rounds, prompts, profile",
    )
    ap.add_argument(
        "--record",
        action="store_true",
        help="measure this drafter's profile on these prompts (greedy) "
        "and keep it with your dspark data, never in the drafter's directory; later diagnoses compare "
        "with it",
    )
    return ap


def _progress(done: int, total: int, what: str) -> None:
    sys.stderr.write(f"\rdspark: diagnosing {done}/{total} ({what})\033[K")
    sys.stderr.flush()


def run(a) -> int:
    from ..diagnose.run import check_drafts, diagnose, record  # noqa: PLC0415 (slow: numpy)
    from ..drafter_profile import find, write_recorded  # noqa: PLC0415 (slow: numpy, not needed for --help)
    from ..loading import load_drafter, load_target, read_drafter_config  # noqa: PLC0415 (slow: mlx)

    check_range("--limit", a.limit, 1, 100_000)
    check_range("--max-tokens", a.max_tokens, 1, 1_000_000)
    config = from_args(GenerationConfig, a, max_tokens=a.max_tokens)
    config.check()
    check_drafts(config)
    chosen = read_set(Path(a.prompts).expanduser()) if a.prompts else get(a.prompt_set)
    prompts = list(chosen.prompts[: a.limit])
    target = load_target(a.target, say=say)
    drafter_dir = read_drafter_config(a.drafter)[0]
    try:
        drafter = load_drafter(drafter_dir, target, say=say)
    except DrafterMismatchError as e:  # made for another target (an assistant for another size): the finding
        if a.record:
            raise
        result = refused(str(e))
        _print(result, a.json)
        return 0
    progress = _progress if sys.stderr.isatty() else None
    if a.record:
        profile = record(target, drafter, prompts, config, progress=progress)
        path = write_recorded(drafter, profile)
        _end(progress)
        if a.json:
            print(json.dumps({"recorded": str(path), "profile": profile.to_dict()}))
        else:
            show(
                f"recorded this drafter's profile in {path}: acceptance by position "
                + " ".join(f"{x:.2f}" for x in profile.per_position_acceptance)
                + f" ({profile.rounds} rounds on {profile.prompts} prompts)"
            )
        return 0
    result = diagnose(target, drafter, prompts, config, profile=find(drafter_dir, drafter), progress=progress)
    _end(progress)
    _print(result, a.json)
    return 0


def _print(result, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result.to_dict()))
    else:  # a profile's source, a finding's quote: from files, escaped for the terminal
        show(describe(result))


def _end(progress) -> None:
    if progress is not None:
        sys.stderr.write("\r\033[K")

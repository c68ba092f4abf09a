"""``dspark generate``: text from a prompt, speculatively when there is a drafter, streamed to
stdout; with ``--baseline`` plain decoding's speed beside it, with ``--json`` one object."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import advice, lossless, metrics, resources
from ..config import GenerationConfig
from ..errors import DsparkError
from ..events import RoundEvent, Summary
from ..options import add_options, from_args
from ..reading import read_text
from .say import say_printable

HELP = "generate text, speculatively if a drafter is given"

#: A prompt file larger than this is no prompt (a target holds at most a few hundred thousand tokens).
MAX_PROMPT_BYTES = 64 * 2**20


def add_parser(subparsers):
    p = subparsers.add_parser("generate", help=HELP)
    p.add_argument("--target", help="target directory (default: the bundled demo target)")
    p.add_argument("--drafter", help="drafter directory (default: the bundled demo drafter with the demo target)")
    p.add_argument("--plain", action="store_true", help="plain decoding even if a default drafter exists")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt")
    src.add_argument("--prompt-file")
    add_options(p, GenerationConfig)
    p.add_argument("--baseline", action="store_true", help="also run plain mlx-lm decoding and report the speedup")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--inspect",
        action="store_true",
        help="keep what the target thought of every verified draft (its "
        "top tokens with probabilities, the drafted token's rank): with --json, a list of rounds",
    )
    return p


def _inspected(ev) -> dict:
    """One round as ``generate --inspect --json`` prints it (the rejection inspector)."""
    return {
        "drafted": list(ev.drafted),
        "accepted": ev.accepted,
        "tokens": [t.id for t in ev.committed],
        "target_top": [[[t, p] for t, p in row] for row in ev.target_top or ()],
        "draft_rank": list(ev.draft_rank or ()),
        "draft_probs": list(ev.draft_probs[: ev.verify_width]),
        "position": ev.position,
        # the first rejected draft lost only a numerical tie of the target's two best
        "tie": bool(ev.draft_tie and ev.accepted < ev.verify_width and ev.draft_tie[ev.accepted]),
    }


def _prompt(a) -> str:
    if a.prompt_file:
        pf = Path(a.prompt_file)
        if pf.is_dir():
            raise DsparkError(f"prompt file not found: {pf} is a folder")
        prompt = read_text(pf, MAX_PROMPT_BYTES, "prompt file")
    else:
        prompt = a.prompt
    if prompt is None or not prompt.strip():
        raise DsparkError("the prompt is empty")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:  # bytes the terminal's encoding could not decode, kept as surrogates
        raise DsparkError(
            f"the prompt is not valid text (an undecodable byte at character {e.start}): give it as UTF-8"
        ) from None
    return prompt


def _models_for_generate(a, config):
    """(prompt, target_dir, target, drafter_dir, drafter): the demo target when no --target is
    given, and its demo drafter unless --plain; loading warnings on stderr."""
    from ..engine import length_note, prompt_ids  # noqa: PLC0415 (slow: mlx, not needed for --help)
    from ..loading import load_drafter, load_target  # noqa: PLC0415 (slow: mlx)

    demo_target = resources.demo_model("target")
    target_dir = a.target or (str(demo_target) if demo_target else None)
    if target_dir is None:
        raise DsparkError("no --target given and no demo target in resources/demo/target")
    prompt = _prompt(a)
    target = load_target(target_dir, say=say_printable)
    # Without --drafter: plain decoding, except on the demo target, whose demo drafter is the default.
    demo_drafter = resources.demo_model("dspark")
    drafter_dir = a.drafter or (None if a.plain or a.target or demo_drafter is None else str(demo_drafter))
    drafter = load_drafter(drafter_dir, target, say=say_printable) if drafter_dir else None
    note = drafter.weights_note(target) if drafter else None
    if note:
        print(f"dspark: warning: {note}", file=sys.stderr)
    note = length_note(target, len(prompt_ids(target, prompt, config)), config.max_tokens)
    if note:
        say_printable(f"warning: {note}")
    return prompt, target_dir, target, drafter_dir, drafter


def _print_generated(result: dict, summary, verdict, plain: bool) -> None:
    """The closing lines of a plain-text ``generate`` (the text itself was streamed)."""
    pos = " ".join(f"{x:.2f}" for x in summary.per_position_acceptance)
    print(
        f"\n\n{len(summary.tokens)} tokens, {summary.rounds} rounds, tau {summary.tau:.2f}, "
        f"{summary.tokens_per_sec:.1f} tok/s" + (f", acceptance by position {pos}" if pos else ""),
        file=sys.stderr,
    )
    if plain:
        print(
            f"plain mlx-lm decoding {result['plain_tokens_per_sec']:.1f} tok/s, speedup {result['speedup']:.2f}x"
            + (f"; {verdict.explain()}" if verdict else " (sampled: outputs differ by design)"),
            file=sys.stderr,
        )


def run(a) -> int:
    from ..costs import for_policy  # noqa: PLC0415 (slow: mlx, not needed for --help)
    from ..engine import generate, generate_plain, run_to_summary  # noqa: PLC0415 (slow: mlx)

    config = from_args(GenerationConfig, a)
    config.check()
    prompt, target_dir, target, drafter_dir, drafter = _models_for_generate(a, config)
    costs = (
        for_policy(config.policy, target, drafter, config.block_size or drafter.block_size, say=say_printable)
        if drafter
        else None
    )
    if a.baseline:
        # Warm both paths up first (kernel compilation, allocations) so neither pays it in the timed run.
        warm = GenerationConfig(max_tokens=8, seed=config.seed, policy="fixed")  # compiles the drafting path
        run_to_summary(generate_plain(target, prompt, warm))
        if drafter:
            run_to_summary(generate(target, drafter, prompt, warm))
    # token probabilities are only printed by --json (Summary.token_logprobs): skip them otherwise
    events = (
        generate(target, drafter, prompt, config, costs=costs, display=a.json or a.inspect, inspect=a.inspect)
        if drafter
        else generate_plain(target, prompt, config)
    )
    summary, inspected = None, []
    for ev in events:
        if isinstance(ev, RoundEvent) and not a.json:
            sys.stdout.write("".join(t.text for t in ev.committed))
            sys.stdout.flush()
        if isinstance(ev, RoundEvent) and a.inspect and not ev.plain_step:
            inspected.append(_inspected(ev))
        elif isinstance(ev, Summary):
            summary = ev
    result = {**summary.to_dict(), "target": target_dir, "drafter": drafter_dir}
    if a.inspect:
        result["rounds"] = inspected
    verdict = None
    if a.baseline:
        plain = run_to_summary(generate_plain(target, prompt, config))
        result["plain_tokens_per_sec"] = plain.tokens_per_sec
        result["speedup"] = metrics.speedup(summary.tokens_per_sec, plain.tokens_per_sec)
        if config.sampling.greedy:
            verdict = lossless.compare(target, summary, plain)
            result.update(verdict.to_dict())
        # 0.1.0's names of the same two values, kept so that scripts reading them go on working
        result["baseline_tokens_per_sec"] = result["plain_tokens_per_sec"]
        if "identical" in result:
            result["identical_to_baseline"] = result["identical"]
    if a.json:
        print(json.dumps(result))
    else:
        _print_generated(result, summary, verdict, a.baseline)
    if drafter:
        note = advice.after_run(summary, policy=config.policy, drafter=drafter_dir, block_size=config.block_size)
        if note:
            say_printable(f"note: {note}")
    return 0

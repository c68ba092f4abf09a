"""The ``dspark`` command line. Options come from the settings dataclasses
(``GenerationConfig``, ``DflashConfig``, ``TrainSettings``; see :mod:`dspark.options`).

Every error a user can cause prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import DsparkError
from .options import Parser


def cmd_init(a) -> int:
    from .config import DflashConfig
    from .convert import cannot_carry, new_drafter
    from .files import output_dir, staged_dir
    from .loading import load_target
    from .options import check_options, from_args

    cfg = from_args(DflashConfig, a)
    check_options(cfg)
    if cannot_carry(cfg):
        raise DsparkError(cannot_carry(cfg))
    out = output_dir(a.out, allow_existing=a.force)
    target = load_target(a.target)
    drafter = new_drafter(target, cfg, seed=a.seed)
    if any(out.iterdir()):  # --force over a drafter: each file is replaced whole
        drafter.save(out)
    else:  # a new drafter appears whole or not at all: a kill leaves no weights without a config
        with staged_dir(out) as tmp:
            drafter.save(tmp)
    print(f"wrote an untrained {cfg.format} drafter ({drafter.num_params():,} parameters, taps "
          f"{list(drafter.tap_layers)}) to {out}")
    return 0


#: A prompt file larger than this is no prompt (a target holds at most a few hundred thousand tokens).
MAX_PROMPT_BYTES = 64 * 2**20


def _inspected(ev) -> dict:
    """One round as ``generate --inspect --json`` prints it (the rejection inspector)."""
    return {"drafted": list(ev.drafted), "accepted": ev.accepted, "tokens": [t.id for t in ev.committed],
            "target_top": [[[t, p] for t, p in row] for row in ev.target_top or ()],
            "draft_rank": list(ev.draft_rank or ()), "draft_probs": list(ev.draft_probs[: ev.verify_width]),
            "position": ev.position,
            # the first rejected draft lost only a numerical tie of the target's two best
            "tie": bool(ev.draft_tie and ev.accepted < ev.verify_width and ev.draft_tie[ev.accepted])}


def _prompt(a) -> str:
    from .reading import read_text

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
        raise DsparkError(f"the prompt is not valid text (an undecodable byte at character {e.start}): give it as "
                          f"UTF-8") from None
    return prompt


def _warn(text: str) -> None:
    from .errors import printable

    print(f"dspark: {printable(text)}", file=sys.stderr)


def _models_for_generate(a, cfg):
    """(target_dir, target, drafter_dir, drafter): the demo target when no --target is given, and
    its demo drafter unless --plain; loading warnings on stderr."""
    from . import resources
    from .engine import length_note, prompt_ids
    from .loading import load_drafter, load_target

    demo_target = resources.demo_model("target")
    target_dir = a.target or (str(demo_target) if demo_target else None)
    if target_dir is None:
        raise DsparkError("no --target given and no demo target in resources/demo/target")
    prompt = _prompt(a)
    target = load_target(target_dir, say=_warn)
    # Without --drafter: plain decoding, except on the demo target, whose demo drafter is the default.
    demo_drafter = resources.demo_model("dspark")
    drafter_dir = a.drafter or (None if a.plain or a.target or demo_drafter is None else str(demo_drafter))
    drafter = load_drafter(drafter_dir, target, say=_warn) if drafter_dir else None
    note = drafter.weights_note(target) if drafter else None
    if note:
        print(f"dspark: warning: {note}", file=sys.stderr)
    note = length_note(target, len(prompt_ids(target, prompt, cfg)), cfg.max_tokens)
    if note:
        _warn(f"warning: {note}")
    return prompt, target_dir, target, drafter_dir, drafter


def _print_generated(result: dict, summary, verdict, baseline: bool) -> None:
    """The closing lines of a plain-text ``generate`` (the text itself was streamed)."""
    pos = " ".join(f"{x:.2f}" for x in summary.per_position_acceptance)
    print(f"\n\n{len(summary.tokens)} tokens, {summary.rounds} rounds, tau {summary.tau:.2f}, "
          f"{summary.tokens_per_sec:.1f} tok/s" + (f", acceptance by position {pos}" if pos else ""), file=sys.stderr)
    if baseline:
        print(f"plain mlx-lm decoding {result['baseline_tokens_per_sec']:.1f} tok/s, speedup {result['speedup']:.2f}x"
              + (f"; {verdict.explain()}" if verdict else " (sampled: outputs differ by design)"), file=sys.stderr)


def cmd_generate(a) -> int:
    from . import lossless, metrics
    from .costs import for_policy
    from .engine import GenerationConfig, generate, generate_baseline, run_to_summary
    from .events import RoundEvent, Summary
    from .options import from_args

    cfg = from_args(GenerationConfig, a)
    cfg.check()
    prompt, target_dir, target, drafter_dir, drafter = _models_for_generate(a, cfg)
    costs = for_policy(cfg.policy, target, drafter, cfg.block_size or drafter.block_size, say=_warn) if drafter else None
    if a.baseline:
        # Warm both paths up first (kernel compilation, allocations) so neither pays it in the timed run.
        warm = GenerationConfig(max_tokens=8, seed=cfg.seed)
        run_to_summary(generate_baseline(target, prompt, warm))
        if drafter:
            run_to_summary(generate(target, drafter, prompt, warm))
    # token probabilities are only printed by --json (Summary.token_logprobs): skip them otherwise
    events = (generate(target, drafter, prompt, cfg, costs=costs, display=a.json or a.inspect, inspect=a.inspect) if drafter
              else generate_baseline(target, prompt, cfg))
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
        base = run_to_summary(generate_baseline(target, prompt, cfg))
        result["baseline_tokens_per_sec"] = base.tokens_per_sec
        result["speedup"] = metrics.speedup(summary.tokens_per_sec, base.tokens_per_sec)
        if cfg.sampling.greedy:
            verdict = lossless.compare(target, summary, base)
            result.update(verdict.to_dict())
    if a.json:
        print(json.dumps(result))
    else:
        _print_generated(result, summary, verdict, a.baseline)
    return 0


def cmd_costs(a) -> int:
    from .costs import describe, load_or_measure
    from .loading import load_drafter
    from .loading import load_target

    from .options import check_range

    check_range("--block-size", a.block_size, 1, 64)  # as generate's: measuring allocates per width
    target = load_target(a.target, say=_warn)
    drafter = load_drafter(a.drafter, target, say=_warn)
    costs = load_or_measure(target, drafter, a.block_size or drafter.block_size, remeasure=a.remeasure, say=_warn)
    print(json.dumps(costs.to_dict()) if a.json else describe(costs))
    return 0


def cmd_inspect(a) -> int:
    from .export_plan import exportable, exports_lines
    from .loading import describe_drafter as describe

    info = {**describe(a.dir), "exports": exportable(a.dir)}
    if a.json:
        print(json.dumps(info))
        return 0
    t = info["target"]
    heads = [h for h, on in (("Markov", info["markov_head"]), ("confidence", info["confidence_head"])) if on]
    lines = [
        f"{info['path']}: {info['format']} drafter" + (f" ({info['variant']})" if info.get("variant") else ""),
        f"  parameters {info['parameters']:,} ({info['bytes'] / 2**20:.1f} MiB, {info['dtype']}"
        + (f", quantized {info['quantization']['bits']}-bit" if info.get("quantization") else "") + ")",
        f"  block size {info['block_size']} (drafted tokens per round; the checkpoint's block has {info['block_slots']} "
        f"slots, the anchor's included); mask token {info['mask_token_id']}",
        f"  layers {info['layers']}; heads: {', '.join(heads) or 'none (DFlash-style)'}; draft vocabulary {info['draft_vocab']}",
        f"  taps target layers {info['tap_layers']}",
        f"  needs a target with hidden size {t['hidden_size']}, vocabulary {t['vocab_size']}, "
        + (f"{t['num_layers']} layers" if t.get("num_layers") else f"at least {t.get('min_layers')} layers"),
    ]
    lines += [f"  note: {n}" for n in info.get("notes", [])]
    lines += exports_lines(info["exports"])
    print("\n".join(lines))
    return 0


def cmd_quantize(a) -> int:
    from .convert import quantize_drafter

    r = quantize_drafter(a.dir, a.out, a.bits, a.group_size)
    print(f"wrote a {r['bits']}-bit {r['format']} drafter to {a.out}: {r['bytes_before'] / 2**20:.1f} MiB -> "
          f"{r['bytes_after'] / 2**20:.1f} MiB")
    return 0


# ----------------------------------------------------------------------------- the parser
def build_parser() -> argparse.ArgumentParser:
    from .drafter import DflashConfig
    from .engine import GenerationConfig
    from .options import add_options

    p = Parser(prog="dspark", description="Speculative decoding with block drafters on MLX.")
    sub = p.add_subparsers(dest="command", required=True)

    i = sub.add_parser("init", help="write an untrained drafter for a target")
    i.add_argument("--target", required=True)
    i.add_argument("--out", required=True)
    add_options(i, DflashConfig)
    i.add_argument("--seed", type=int, default=0, help="seed of the initial weights")
    i.add_argument("--force", action="store_true", help="overwrite a non-empty --out")
    i.set_defaults(fn=cmd_init)

    g = sub.add_parser("generate", help="generate text, speculatively if a drafter is given")
    g.add_argument("--target", help="target directory (default: the bundled demo target)")
    g.add_argument("--drafter", help="drafter directory (default: the bundled demo drafter with the demo target)")
    g.add_argument("--plain", action="store_true", help="plain decoding even if a default drafter exists")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt")
    src.add_argument("--prompt-file")
    add_options(g, GenerationConfig)
    g.add_argument("--baseline", action="store_true", help="also run plain mlx-lm decoding and report the speedup")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.add_argument("--inspect", action="store_true", help="keep what the target thought of every verified draft (its "
                   "top tokens with probabilities, the drafted token's rank): with --json, a list of rounds")
    g.set_defaults(fn=cmd_generate)

    c = sub.add_parser("costs", help="this machine's measured verify and draft costs (what the auto policy uses)")
    c.add_argument("--target", required=True)
    c.add_argument("--drafter", required=True)
    c.add_argument("--block-size", type=int, help="drafted tokens per round (default: the drafter's own)")
    c.add_argument("--remeasure", action="store_true", help="measure again instead of reading the cache")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(fn=cmd_costs)

    n = sub.add_parser("inspect", help="say what a drafter directory is, without loading a target")
    n.add_argument("dir", help="drafter directory or Hugging Face name")
    n.add_argument("--json", action="store_true", help="print one JSON object")
    n.set_defaults(fn=cmd_inspect)

    q = sub.add_parser("quantize", help="write a 4- or 8-bit copy of a drafter (any format, same format)")
    q.add_argument("dir", help="drafter directory or Hugging Face name")
    q.add_argument("--bits", type=int, choices=[4, 8], required=True)
    q.add_argument("--group-size", type=int, choices=[32, 64, 128], default=64,
                   help="weights that share one scale and bias")
    q.add_argument("--out", required=True, help="directory to write (new or empty)")
    q.set_defaults(fn=cmd_quantize)

    # Listed for --help only: main() hands these to their own modules' parsers.
    for name, (_module, text) in DELEGATED.items():
        sub.add_parser(name, add_help=False, help=text)
    return p


#: Subcommands whose modules own their option parsers: ``dspark X ...`` calls ``module.fn(rest)``.
DELEGATED = {
    "train": ("dspark.training.train_cli:main", "train a drafter against a target (dspark train --help)"),
    "calibrate": ("dspark.training.calibrate_cli:main", "fit a drafter's confidence temperatures (dspark calibrate --help)"),
    "bench": ("dspark.bench:main", "time speculative decoding against plain mlx-lm decoding (dspark bench --help)"),
    "make-demo": ("dspark.demo.build:main", "rebuild and measure the bundled demo models (dspark make-demo --help)"),
    "diagnose": ("dspark.diagnose:main", "why a drafter is rejected: run a few prompts and name each cause found "
                 "(dspark diagnose --help)"),
    "export": ("dspark.export:main", "write a drafter in a format vLLM or SGLang serves (dspark export --help)"),
}


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _run(fn, arg) -> int:
    """Exit status: 0 done, 2 a mistake the user can fix (one line), 130 interrupted, 1 a bug
    (one line; the traceback goes to a log file)."""
    try:
        return fn(arg)
    except DsparkError as e:
        print("dspark: error: " + " ".join(str(e).split()), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dspark: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("dspark: error: out of memory: choose a smaller model, fewer tokens or a smaller block", file=sys.stderr)
        return 2
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as e:  # a bug (a Rust panic from tokenizers is no Exception): one line, the traceback in a file
        from .errors import report_bug

        print("dspark: " + report_bug(e), file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # run as the dspark command (not called from Python)
        import signal

        from .blas import use_fast_blas

        use_fast_blas()
        # A terminal closing, kill or a scheduler: the same clean stop as Ctrl-C, whatever runs.
        signal.signal(signal.SIGTERM, _interrupt)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in DELEGATED:
        import importlib

        module, name = DELEGATED[argv[0]][0].split(":")
        return _run(getattr(importlib.import_module(module), name), argv[1:])
    args = build_parser().parse_args(argv)
    return _run(args.fn, args)


if __name__ == "__main__":
    sys.exit(main())

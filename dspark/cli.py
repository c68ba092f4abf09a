"""The ``dspark`` command line: init, generate (and, as they land, train / calibrate / make-demo).

Every error a user can cause prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import DsparkError

DEMO = Path(__file__).resolve().parent.parent / "resources" / "demo"


def _default(path: str | None, demo_name: str) -> str | None:
    """A path the user gave, else the bundled demo model if it exists."""
    if path:
        return path
    demo = DEMO / demo_name
    return str(demo) if (demo / "config.json").is_file() else None


def _taps(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise DsparkError(f"--taps must be comma-separated layer indices, got {text!r}") from None


def cmd_init(a) -> int:
    from .drafter import DflashConfig, DflashDrafter
    from .target import load_target

    target = load_target(a.target)
    cfg = DflashConfig(
        block_size=a.block_size,
        num_layers=a.layers,
        tap_layers=_taps(a.taps),
        mask_token_id=a.mask_token_id,
        markov=not a.no_markov,
        markov_rank=a.markov_rank,
        confidence=not a.no_confidence,
    )
    out = Path(a.out)
    if out.exists() and any(out.iterdir()) and not a.force:
        raise DsparkError(f"{out} exists and is not empty (use --force to overwrite)")
    drafter = DflashDrafter.init(target, cfg, seed=a.seed)
    drafter.save(out)
    print(f"wrote an untrained drafter ({drafter.num_params():,} parameters, taps {list(drafter.cfg.tap_layers)}) to {out}")
    return 0


def cmd_generate(a) -> int:
    from . import metrics
    from .drafter import DflashDrafter
    from .engine import GenerationConfig, generate, generate_baseline
    from .events import RoundEvent, Summary
    from .target import load_target

    target_dir = _default(a.target, "target")
    if target_dir is None:
        raise DsparkError("no --target given and no demo target in resources/demo/target")
    if a.prompt_file:
        pf = Path(a.prompt_file)
        if not pf.is_file():
            raise DsparkError(f"prompt file not found: {pf}")
        prompt = pf.read_text(errors="replace")
    else:
        prompt = a.prompt
    if prompt is None or not prompt.strip():
        raise DsparkError("the prompt is empty")
    target = load_target(target_dir)
    # Without --drafter: plain decoding, except on the demo target, whose demo drafter is the default.
    drafter_dir = a.drafter or (None if a.plain or a.target else _default(None, "dspark"))
    drafter = DflashDrafter.load(drafter_dir, target=target) if drafter_dir else None
    note = drafter.weights_note(target) if drafter else None
    if note:
        print(f"dspark: warning: {note}", file=sys.stderr)
    cfg = GenerationConfig(
        max_tokens=a.max_tokens,
        temperature=a.temperature,
        top_p=a.top_p,
        top_k=a.top_k,
        seed=a.seed,
        block_size=a.block_size,
        verify=a.verify,
        confidence_threshold=a.confidence_threshold,
    )
    if a.baseline:
        # Warm both paths up first (kernel compilation, allocations) so neither pays it in the timed run.
        warm = GenerationConfig(max_tokens=8, seed=a.seed)
        for ev in generate_baseline(target, prompt, warm):
            pass
        if drafter:
            for ev in generate(target, drafter, prompt, warm):
                pass
    events = generate(target, drafter, prompt, cfg) if drafter else generate_baseline(target, prompt, cfg)
    summary = None
    for ev in events:
        if isinstance(ev, RoundEvent) and not a.json:
            sys.stdout.write("".join(t.text for t in ev.committed))
            sys.stdout.flush()
        elif isinstance(ev, Summary):
            summary = ev
    result = {
        "method": summary.method,
        "tokens": list(summary.tokens),
        "text": summary.text,
        "rounds": summary.rounds,
        "tau": summary.tau,
        "acceptance_rate": summary.acceptance_rate,
        "per_position_acceptance": list(summary.per_position_acceptance),
        "tokens_per_sec": summary.tokens_per_sec,
        "ttft_seconds": summary.ttft_seconds,
        "draft_seconds": summary.draft_seconds,
        "verify_seconds": summary.verify_seconds,
        "finish_reason": summary.finish_reason,
        "target": target_dir,
        "drafter": drafter_dir,
    }
    if a.baseline:
        base = None
        for ev in generate_baseline(target, prompt, cfg):
            if isinstance(ev, Summary):
                base = ev
        result["baseline_tokens_per_sec"] = base.tokens_per_sec
        result["speedup"] = metrics.speedup(summary.tokens_per_sec, base.tokens_per_sec)
        result["identical_to_baseline"] = list(base.tokens) == list(summary.tokens)
    if a.json:
        print(json.dumps(result))
    else:
        pos = " ".join(f"{x:.2f}" for x in summary.per_position_acceptance)
        print(f"\n\n{len(summary.tokens)} tokens, {summary.rounds} rounds, tau {summary.tau:.2f}, "
              f"{summary.tokens_per_sec:.1f} tok/s" + (f", acceptance by position {pos}" if pos else ""), file=sys.stderr)
        if a.baseline:
            print(f"plain mlx-lm decoding {result['baseline_tokens_per_sec']:.1f} tok/s, speedup "
                  f"{result['speedup']:.2f}x, identical output: {result['identical_to_baseline']}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dspark", description="Speculative decoding with block drafters on MLX.")
    sub = p.add_subparsers(dest="command", required=True)

    i = sub.add_parser("init", help="write an untrained drafter for a target")
    i.add_argument("--target", required=True)
    i.add_argument("--out", required=True)
    i.add_argument("--block-size", type=int, default=7)
    i.add_argument("--layers", type=int, default=2)
    i.add_argument("--taps", help="comma-separated target layer indices (default: evenly spaced)")
    i.add_argument("--mask-token-id", type=int, default=4)
    i.add_argument("--markov-rank", type=int, default=256)
    i.add_argument("--no-markov", action="store_true", help="DFlash-style: no Markov head")
    i.add_argument("--no-confidence", action="store_true", help="no confidence head")
    i.add_argument("--seed", type=int, default=0)
    i.add_argument("--force", action="store_true")
    i.set_defaults(fn=cmd_init)

    g = sub.add_parser("generate", help="generate text, speculatively if a drafter is given")
    g.add_argument("--target", help="target directory (default: the bundled demo target)")
    g.add_argument("--drafter", help="drafter directory (default: the bundled demo drafter with the demo target)")
    g.add_argument("--plain", action="store_true", help="plain decoding even if a default drafter exists")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt")
    src.add_argument("--prompt-file")
    g.add_argument("--max-tokens", type=int, default=256)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--block-size", type=int, help="drafted tokens per round (default: the drafter's)")
    g.add_argument("--verify", choices=["all", "confidence"], default="all")
    g.add_argument("--confidence-threshold", type=float, default=0.3)
    g.add_argument("--baseline", action="store_true", help="also run plain mlx-lm decoding and report the speedup")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.set_defaults(fn=cmd_generate)

    # Listed for --help only: main() hands these to their own modules' parsers.
    for name, text in HELP.items():
        sub.add_parser(name, add_help=False, help=text)
    return p


#: Subcommands whose modules own their option parsers: ``dspark X ...`` calls ``X.main(rest)``.
DELEGATED = {"train": "dspark.train", "calibrate": "dspark.calibrate", "make-demo": "dspark.demo"}
HELP = {
    "train": "train a drafter against a target (dspark train --help)",
    "calibrate": "fit a drafter's confidence temperatures (dspark calibrate --help)",
    "make-demo": "rebuild and measure the bundled demo models (dspark make-demo --help)",
}


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        from .blas import ensure_fast_blas

        ensure_fast_blas("dspark.cli")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in DELEGATED:
        import importlib

        try:
            return importlib.import_module(DELEGATED[argv[0]]).main(argv[1:])
        except DsparkError as e:
            print("dspark: error: " + " ".join(str(e).split()), file=sys.stderr)
            return 2
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except DsparkError as e:
        print("dspark: error: " + " ".join(str(e).split()), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dspark: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

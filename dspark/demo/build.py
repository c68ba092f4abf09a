"""``dspark make-demo``: rebuild the bundled demo models and measure them.

1. the target: a small Gemma-4 (``gemma4_text``) trained on the Python standard library's
   source (``dspark.demo.pretrain``);
2. a DSpark drafter (Markov + confidence heads) trained against it by self-distillation;
3. a DFlash-style drafter (heads off) trained on exactly the same sequences, same steps;
4. the figures for ``resources/demo/README.md``: tau and per-position acceptance on held-out
   prompts, speedup over plain mlx-lm decoding measured in one run, and a token-for-token check
   against plain greedy decoding (``results.json``).

Every stage resumes from its checkpoints, so an interrupted rebuild continues where it stopped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from ..drafter import DflashConfig
from ..errors import DsparkError
from ..options import Parser
from ..resources import demo_dir
from ..training.trainer import TrainSettings
from .target_model import CKPT_DIR, CKPT_FILE

#: The demo recipe, as data: both drafters share one shape except their heads, and train
#: with the same settings on the same self-distilled sequences.
DRAFTERS = {
    "dspark": DflashConfig(block_size=7, num_layers=2, tap_layers=(1, 3, 4), mask_token_id=4, markov_rank=256),
    "dflash": DflashConfig(block_size=7, num_layers=2, tap_layers=(1, 3, 4), mask_token_id=4, markov=False,
                           confidence=False),
}
TRAINING = TrainSettings(steps=5000, self_distill=True, max_sequences=3000, eval_prompts=8, eval_tokens=128,
                         feature_cache_mb=4096)


def build_target(out: Path, minutes: float | None, resume: bool) -> None:
    from .pretrain import train_target

    if resume and (out / "target" / "config.json").is_file() and not (out / "target" / CKPT_DIR / CKPT_FILE).is_file():
        print(f"the demo target in {out / 'target'} is built (no checkpoint to continue): kept; --fresh rebuilds it",
              file=sys.stderr)
        return
    resumable = resume and (out / "target" / CKPT_DIR / CKPT_FILE).is_file()
    train_target(out / "target", time_budget_minutes=minutes, resume=resumable)


def build_drafters(out: Path, settings: TrainSettings, resume: bool, kinds=tuple(DRAFTERS)) -> None:
    from ..loading import load_target
    from ..training.train import DATA_FILE, train_drafter
    from ..training.trainer import STATE_FILE
    from .corpus import heldout_prompts, iter_texts, prompt_sites

    target = load_target(out / "target")
    # Prompts: stretches of the train files, and def/class headers of the train files (the
    # kind of prompt the held-out evaluation uses, from files it never sees).
    texts = list(iter_texts("train")) + prompt_sites("train")
    held = heldout_prompts(settings.eval_prompts)
    for kind in kinds:
        if resume and (out / kind / "config.json").is_file() and not (out / kind / STATE_FILE).is_file():
            print(f"the {kind} drafter in {out / kind} is built (no checkpoint to continue): kept; --fresh rebuilds it",
                  file=sys.stderr)
            continue
        # The second drafter trains on the first one's self-distilled sequences: same data.
        shared = out / kinds[0] / DATA_FILE if kind != kinds[0] else None
        train_drafter(target, texts, out / kind, DRAFTERS[kind], settings, heldout_texts=held, resume=resume,
                      data_file=shared)


def acceptance(target, drafter, prompts: list[str], tokens: int = 128) -> dict:
    """tau and acceptance of ``drafter`` over ``prompts`` (greedy, block 7, ``tokens`` each)."""
    from .. import metrics
    from ..engine import GenerationConfig, generate

    cfg = GenerationConfig(max_tokens=tokens, stop_at_eos=False, block_size=7)
    runs = [list(generate(target, drafter, p, cfg)) for p in prompts]
    f = metrics.summarize(ev for run in runs for ev in run[:-1])
    return {
        "prompts": len(prompts),
        "tokens_per_prompt": tokens,
        "tau": f.tau,
        "tau_per_prompt": [run[-1].tau for run in runs],
        "acceptance_rate": f.acceptance_rate,
        "per_position_acceptance": list(f.per_position_acceptance),
    }


def evaluate(out: Path, prompts: int = 8, wide_prompts: int = 32, speed_prompts: int = 5, speed_tokens: int = 256,
             lossless_tokens: int = 600) -> dict:
    """Measure the demo pair as the README reports it (greedy, block size 7)."""
    import mlx.core as mx

    from .. import metrics
    from ..blas import describe as blas
    from ..engine import GenerationConfig, generate, generate_baseline, run_to_summary
    from ..loading import load_drafter, load_target
    from .corpus import heldout_prompts

    target = load_target(out / "target")
    held = heldout_prompts(prompts)
    result = {
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "mlx": mx.__version__,
        "device": str(mx.default_device()),
        "blas": blas(),
        "drafters": {},
    }
    base_cfg = GenerationConfig(max_tokens=speed_tokens, stop_at_eos=False)
    for kind in DRAFTERS:
        if not (out / kind / "config.json").is_file():
            continue
        drafter = load_drafter(out / kind, target)
        entry = {**acceptance(target, drafter, held), "parameters": drafter.num_params()}
        # The 8-prompt set is small and a third of it is codec boilerplate: a wider one too.
        entry["wide"] = acceptance(target, drafter, heldout_prompts(wide_prompts))
        speed = []
        for p in held[:speed_prompts]:
            warm = GenerationConfig(max_tokens=16, stop_at_eos=False)
            run_to_summary(generate_baseline(target, p, warm))
            run_to_summary(generate(target, drafter, p, warm))
            spec = run_to_summary(generate(target, drafter, p, base_cfg))
            base = run_to_summary(generate_baseline(target, p, base_cfg))
            speed.append({
                "spec_tokens_per_sec": spec.tokens_per_sec,
                "baseline_tokens_per_sec": base.tokens_per_sec,
                "speedup": metrics.speedup(spec.tokens_per_sec, base.tokens_per_sec),
                "tau": spec.tau,
                "identical": metrics.first_difference(spec.tokens, base.tokens) is None,
            })
        entry["speed"] = speed
        entry["speedup_median"] = statistics.median(s["speedup"] for s in speed) if speed else None
        long_cfg = GenerationConfig(max_tokens=lossless_tokens, stop_at_eos=False)
        spec = run_to_summary(generate(target, drafter, held[0], long_cfg))
        base = run_to_summary(generate_baseline(target, held[0], long_cfg))
        entry["lossless_tokens"] = lossless_tokens
        entry["lossless"] = metrics.first_difference(spec.tokens, base.tokens) is None
        result["drafters"][kind] = entry
        print(f"{kind}: tau {entry['tau']:.2f} ({entry['wide']['tau']:.2f} on {wide_prompts} prompts), per position {' '.join(f'{x:.2f}' for x in entry['per_position_acceptance'])}, "
              f"speedup (median of {len(speed)}) {entry['speedup_median']:.2f}x, lossless {lossless_tokens}: {entry['lossless']}",
              file=sys.stderr)
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="dspark make-demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(demo_dir()), help="where the demo models go (default: resources/demo)")
    ap.add_argument("--only", choices=["target", "drafters", "eval"], help="run one stage only")
    ap.add_argument("--target-minutes", type=float, help="time budget of the target's training (default: none)")
    ap.add_argument("--drafter-steps", type=int, default=TRAINING.steps)
    ap.add_argument("--drafter-minutes", type=float, help="time budget of each drafter's training (default: none)")
    ap.add_argument("--fresh", action="store_true", help="start over instead of resuming checkpoints")
    a = ap.parse_args(argv)
    from ..options import check_options, check_range

    for flag, value in (("--target-minutes", a.target_minutes), ("--drafter-minutes", a.drafter_minutes)):
        check_range(flag, value, 0.01)
    settings = dataclasses.replace(TRAINING, steps=a.drafter_steps, time_budget_minutes=a.drafter_minutes)
    check_options(settings)
    out = Path(a.out)
    stages = [a.only] if a.only else ["target", "drafters", "eval"]
    if "target" in stages:
        build_target(out, a.target_minutes, resume=not a.fresh)
    if not (out / "target" / "config.json").is_file():
        raise DsparkError(f"no demo target in {out / 'target'}: run the target stage first")
    if "drafters" in stages:
        build_drafters(out, settings, resume=not a.fresh)
    if "eval" in stages:
        evaluate(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

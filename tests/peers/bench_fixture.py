"""Write the directories docs/speed.md's peer comparison runs on: a random Gemma-4 target, a
z-lab DFlash head, a DeepSpec DSpark head and a speculators DSpark head for it (the formats
tests' synthetic checkpoints, ``tests/drafter_checkpoints.py``, with a larger vocabulary; the
speculators head's draft vocabulary is the target's most frequent greedy tokens, as speculators
chooses it), and a prompt file.

    .venv/bin/python tests/peers/bench_fixture.py OUT [--vocab 4096] [--window 32]
    .venv/bin/dspark bench --target OUT/target --drafter OUT/deepspec --prompts OUT/prompts.json \\
        --max-tokens 128 --repeats 6 --policy fixed --peer mlx-dspark --out RESULTS

The drafters' weights carry a planted preference (tau about 1.5 at the default vocabulary), not
training: the comparison is of loops running the same drafter on the same target, not of drafters.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import drafter_checkpoints as ckpt

from dspark.config import GenerationConfig
from dspark.engine import generate_plain, run_to_summary
from dspark.loading import load_target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--vocab", type=int, default=4096, help="the target's vocabulary (default: 4096)")
    ap.add_argument("--window", type=int, default=32, help="the target's sliding window (default: 32)")
    a = ap.parse_args()
    ckpt.VOCAB = a.vocab  # the writers read the module's vocabulary
    model = ckpt.target_model(window=a.window)
    ckpt.write_target(a.out / "target", model)
    ckpt.write_zlab(a.out / "zlab", vocab=a.vocab)
    ckpt.write_deepspec(a.out / "deepspec", model)
    target = load_target(a.out / "target")
    config = GenerationConfig(policy="fixed", max_tokens=120, stop_at_eos=False)
    greedy = run_to_summary(generate_plain(target, ckpt.PROMPT, config)).tokens
    ckpt.write_speculators(a.out / "speculators", model, list(greedy[:90]), vocab=a.vocab)
    p = ckpt.PROMPT
    prompts = [" ".join(f"t{i}" for i in ids) for ids in (p[:12], p[6:11], p[5:18], p[:4])]
    (a.out / "prompts.json").write_text(json.dumps(prompts))
    print(f"wrote {a.out}/target, zlab, deepspec, speculators and prompts.json")


if __name__ == "__main__":
    main()

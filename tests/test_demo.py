"""The shipped demo models: the DSpark drafter's acceptance, and losslessness over 600 tokens."""

from pathlib import Path

import pytest
from same import assert_same_greedy

from dspark import GenerationConfig, generate, generate_plain, load_drafter, load_target, run_to_summary
from dspark.corpus import heldout_prompts
from dspark.demo.evaluation import acceptance

DEMO = Path(__file__).resolve().parent.parent / "resources" / "demo"


@pytest.fixture(scope="module")
def target():
    return load_target(DEMO / "target")


def test_demo_target_loads_with_plain_mlx_lm():
    from mlx_lm import load

    model, tokenizer = load(str(DEMO / "target"))
    assert model.model_type == "gemma4_text" and model.args.sliding_window <= 128
    assert tokenizer.decode(tokenizer.encode("def f(x):\n    return x")).endswith("def f(x):\n    return x")


def held_out_tau(target, kind: str) -> float:
    """tau as ``make-demo`` measures it, on three held-out prompts of 96 tokens."""
    drafter = load_drafter(DEMO / kind, target)
    return acceptance(target, drafter, heldout_prompts(3), tokens=96)["tau"]


def test_dspark_drafter_accepts_on_held_out_prompts_and_beats_dflash(target):
    tau = held_out_tau(target, "dspark")
    assert tau >= 3.5, f"tau {tau:.2f} on three held-out prompts"
    baseline = held_out_tau(target, "dflash")
    assert tau > baseline, f"DSpark tau {tau:.2f} is not above the DFlash-style drafter's {baseline:.2f}"


LONG = GenerationConfig(policy="fixed", max_tokens=600, stop_at_eos=False)


@pytest.fixture(scope="module")
def plain_600(target):
    """Plain mlx-lm greedy decoding of the first held-out prompt, 600 tokens: both drafters'
    runs are compared with this one run (decoding it again gives the same tokens)."""
    return run_to_summary(generate_plain(target, heldout_prompts(1)[0], LONG))


@pytest.mark.parametrize("kind", ["dspark", "dflash"])
def test_demo_pair_is_lossless_for_600_tokens(target, plain_600, kind):
    drafter = load_drafter(DEMO / kind, target)
    spec = run_to_summary(generate(target, drafter, heldout_prompts(1)[0], LONG))
    assert len(plain_600.tokens) == 600
    assert_same_greedy(target, plain_600.prompt_tokens, spec.tokens, plain_600.tokens)


def test_the_default_prompt_set_makes_the_demo_target_write_plausible_code(target):
    """The app opens on this set: on every prompt the demo target's 256 greedy tokens must not
    degenerate into a short cycle (which any drafter predicts, faking a speedup)."""
    from dspark import prompts
    from dspark.metrics import repetition_share

    cfg = GenerationConfig(policy="fixed", max_tokens=256)
    demo = prompts.get(prompts.DEFAULT)
    for i, text in enumerate(demo.prompts):
        out = run_to_summary(generate_plain(target, text, cfg))
        assert len(out.tokens) == 256 and repetition_share(out.tokens) < 0.2, (i, out.text[-200:])

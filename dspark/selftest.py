"""The self-test of an install: load the demo pair, generate ``TOKENS`` tokens speculatively
and by plain mlx-lm decoding, check that the two agree (``dspark.lossless``), and say in one
line which device and BLAS ran and what came out. ``dspark-studio --self-test`` runs it (and CI
after each bundle build); everything MLX stays on the calling thread.
"""

from __future__ import annotations

import sys

TOKENS = 32
#: resources/prompts/demo.json: held-out openings on which the demo target writes plausible code
#: (tests/test_demo.py checks it), not a repeated line that any drafter, even a broken one, predicts.
PROMPT_SET, PROMPT_INDEX = "demo", 0


def device() -> str:
    """The default MLX device, and on macOS whether Metal is in use (a missing or too new
    metallib shows here, or as the error of the first evaluation)."""
    import mlx.core as mx

    dev = mx.default_device()
    name = "gpu" if dev.type == mx.gpu else "cpu"
    if sys.platform == "darwin":
        return f"{name} ({'Metal in use' if name == 'gpu' and mx.metal.is_available() else 'Metal not in use'})"
    return name


def held_out_prompt() -> str | None:
    from dspark.prompts import prompt_sets

    found = prompt_sets().get(PROMPT_SET)
    return found.prompts[PROMPT_INDEX] if found and len(found.prompts) > PROMPT_INDEX else None


def check(tokens: int = TOKENS) -> tuple[bool, str]:
    """The headless check: (passed, one line saying what ran and what came out)."""
    from dspark import blas, resources

    try:
        where = device()
    except (ImportError, OSError, RuntimeError) as e:  # a broken mlx install or a missing metallib
        return False, f"mlx does not load: {type(e).__name__}: {e}"
    head = f"device {where}, BLAS {blas.describe()}"
    paths = {name: resources.demo_model(name) for name in ("target", "dspark")}
    missing = [name for name, p in paths.items() if p is None]
    if missing:
        return False, f"{head}; demo model(s) missing under {resources.demo_dir()}: {', '.join(missing)}"
    prompt = held_out_prompt()
    if prompt is None:
        return False, f"{head}; the prompt set {PROMPT_SET!r} is missing under {resources.prompts_dir()}"
    try:
        import dspark
        from dspark import lossless, metrics
        from dspark.formats import load_drafter

        target = dspark.load_target(paths["target"])
        drafter = load_drafter(paths["dspark"], target)
        warm = dspark.GenerationConfig(max_tokens=8, stop_at_eos=False)
        dspark.run_to_summary(dspark.generate_baseline(target, prompt, warm))  # compile and allocate
        dspark.run_to_summary(dspark.generate(target, drafter, prompt, warm))  # before the timed runs
        cfg = dspark.GenerationConfig(max_tokens=tokens, stop_at_eos=False)
        spec = dspark.run_to_summary(dspark.generate(target, drafter, prompt, cfg))
        plain = dspark.run_to_summary(dspark.generate_baseline(target, prompt, cfg))
        verdict = lossless.compare(target, spec, plain)
    except Exception as e:  # anything at all is a failed self-test, said in the one line
        return False, f"{head}; the demo run failed: {type(e).__name__}: {e}"
    figures = (f"{len(spec.tokens)} tokens, tau {spec.tau:.2f}, {spec.tokens_per_sec:.0f} tok/s vs "
               f"{plain.tokens_per_sec:.0f} plain, speedup "
               f"{metrics.speedup(spec.tokens_per_sec, plain.tokens_per_sec):.2f}x")
    ok = len(spec.tokens) == tokens and verdict.lossless
    return ok, f"{head}; {figures}; {verdict.explain()}"

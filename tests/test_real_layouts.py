"""The checkpoints people download, in miniature (``miniatures.py``): bf16 HF repos with shards,
mlx-community 4/8-bit with towers, ``mlx_lm.convert`` output, the unified 12B, the MoE, a config
re-saved by newer transformers. Each loads; greedy speculative output equals plain mlx-lm
greedy, or first differs at a numerical tie (and a planted mismatch is reported as one);
-it tokenizers get their chat template; the MoE runs on the CPU; memory is checked before
loading; a model opens by its Hugging Face name from a pre-populated local cache."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import miniatures as mini
import mlx.core as mx
import pytest
from oracle import OracleDrafter

from dspark import (
    DflashConfig,
    DflashDrafter,
    GenerationConfig,
    gemma4,
    generate,
    generate_plain,
    load_target,
    lossless,
    modeldir,
    run_to_summary,
)
from dspark.errors import DsparkError

PROMPT = "Hello world"
LAYOUTS = {  # name -> (writer, tokens compared)
    "e2b-it-hf-bf16": (lambda d: mini.write_hf(d, "e2b", seed=_seed("e2b")), 160),
    "e4b-it-hf-bf16": (lambda d: mini.write_hf(d, "e4b", seed=_seed("e4b")), 160),
    "31b-it-hf-bf16": (lambda d: mini.write_hf(d, "31b", shards=3, seed=_seed("31b")), 160),
    "26b-a4b-it-hf-bf16-moe": (lambda d: mini.write_hf(d, "26b-a4b", shards=3, seed=_seed("26b")), 160),
    "12b-it-hf-bf16-unified": (lambda d: mini.write_hf(d, "12b", seed=_seed("12b")), 160),
    "31b-it-resaved-per-layer-config": (lambda d: mini.write_hf(d, "31b", resave=True, seed=_seed("31b")), 160),
    "e2b-it-mlx-community-4bit": (lambda d: mini.write_mlx_community(d, "e2b", 4, seed=_seed("e2b")), 200),
    "e4b-it-mlx-community-8bit": (lambda d: mini.write_mlx_community(d, "e4b", 8, seed=_seed("e4b")), 200),
    "26b-a4b-it-mlx-community-4bit": (lambda d: mini.write_mlx_community(d, "26b-a4b", 4, seed=_seed("26b")), 200),
    "12b-it-mlx-community-4bit": (lambda d: mini.write_mlx_community(d, "12b", 4, seed=_seed("12b")), 200),
    "e4b-it-mlx-lm-convert-4bit": (
        lambda d: mini.write_mlx_lm_convert(
            d, mini.write_hf(d.with_name(d.name + "-hf"), "e4b", seed=_seed("e4b")), bits=4
        ),
        200,
    ),
}


def _seed(name: str) -> int:
    return zlib.crc32(name.encode()) % 1000


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("layouts")


def layout(root: Path, name: str) -> Path:
    d = root / name
    if not d.exists():
        LAYOUTS[name][0](d)
    return d


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layout_loads_and_greedy_is_lossless(root, name):
    _, n = LAYOUTS[name]
    target = load_target(layout(root, name))
    assert target.eos_token_ids == {1, 50, 106} and target.has_chat_template
    cfg = GenerationConfig(policy="fixed", max_tokens=n, stop_at_eos=False)
    plain = run_to_summary(generate_plain(target, PROMPT, cfg))
    ids = list(plain.prompt_tokens)
    assert len(set(plain.tokens)) >= 8  # a continuation worth comparing, several windows long
    oracle = OracleDrafter(ids + list(plain.tokens), target.dims.vocab_size, block_size=6, corrupt=0.3)
    random = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=8), seed=0)
    for drafter in (oracle, random):
        spec = run_to_summary(generate(target, drafter, PROMPT, cfg))
        assert spec.prompt_tokens == plain.prompt_tokens
        v = lossless.compare(target, spec, plain)
        assert v.lossless, v.explain()
        if drafter is oracle:
            assert max(spec.accepted_lengths) >= 3 and min(spec.accepted_lengths) == 0  # long accepts, rejections


def test_a_planted_mismatch_is_reported_as_one(root):
    target = load_target(layout(root, "31b-it-hf-bf16"))
    plain = run_to_summary(
        generate_plain(target, PROMPT, GenerationConfig(policy="fixed", max_tokens=40, stop_at_eos=False))
    )
    ids, k = list(plain.prompt_tokens), 12
    logprobs, _ = lossless._plain_logprobs(target, ids, k, 2048)
    unlikely = min(range(len(logprobs)), key=lambda t: logprobs[t])
    planted = dataclasses.replace(plain, tokens=plain.tokens[:k] + (unlikely,) + plain.tokens[k + 1 :])
    v = lossless.compare(target, planted, plain)
    assert not v.lossless and v.first_difference.index == k and v.first_difference.kind == "mismatch"
    assert v.label() == "✗" and "mismatch" in v.explain()
    assert lossless.compare(target, plain, plain).label() == "✓"


def test_a_planted_near_miss_is_a_mismatch_not_a_tie(root):
    """The runner-up token where the target's two clean evaluations agree on the order by more
    than they disagree: close, but not a tie, and the check must say so."""
    target = load_target(layout(root, "e4b-it-mlx-community-8bit"))
    plain = run_to_summary(
        generate_plain(target, PROMPT, GenerationConfig(policy="fixed", max_tokens=40, stop_at_eos=False))
    )
    ids = list(plain.prompt_tokens)
    for k in range(4, 40):
        P, dtype = lossless._plain_logprobs(target, ids, k, 2048)
        P = [float(x) for x in P]
        F = [float(x) for x in lossless._one_pass_logprobs(target, ids + list(plain.tokens[:k]), 2048)]
        first, second = sorted(range(len(P)), key=lambda t: -P[t])[:2]
        noise = max(abs(P[t] - F[t]) for t in sorted(range(len(P)), key=lambda t: -P[t])[:8])
        if max(range(len(F)), key=F.__getitem__) == first and P[first] - P[second] > 2 * noise + 0.1:
            break
    else:
        pytest.fail("no position where the runner-up is clearly second")
    planted = dataclasses.replace(plain, tokens=plain.tokens[:k] + (second,) + plain.tokens[k + 1 :])
    v = lossless.compare(target, planted, plain)
    assert v.first_difference.index == k and v.first_difference.kind == "mismatch", v.explain()
    assert P[first] - P[second] < 8  # a near miss, not the least likely token


@pytest.mark.parametrize("name", ["31b-it-hf-bf16", "e4b-it-mlx-community-8bit"])
def test_a_planted_rollback_bug_is_a_mismatch(root, name, monkeypatch):
    """mlx-lm's own trim of a rotating cache (it only moves counters): the engine then attends
    to rejected rows, and the check must call the result a mismatch, not a tie."""
    from mlx_lm.models.cache import RotatingKVCache

    from dspark import cache as dcache

    target = load_target(layout(root, name))
    cfg = GenerationConfig(policy="fixed", max_tokens=LAYOUTS[name][1], stop_at_eos=False)
    plain = run_to_summary(generate_plain(target, PROMPT, cfg))
    oracle = OracleDrafter(
        list(plain.prompt_tokens) + list(plain.tokens), target.dims.vocab_size, block_size=6, corrupt=0.3
    )
    exact = dcache._rollback_one
    monkeypatch.setattr(
        dcache, "_rollback_one", lambda c, n: c.trim(n) if isinstance(c, RotatingKVCache) else exact(c, n)
    )
    spec = run_to_summary(generate(target, oracle, PROMPT, cfg))
    v = lossless.compare(target, spec, plain)
    assert not v.identical and v.first_difference.kind == "mismatch", v.explain()


def test_chat_template_wraps_the_prompt_as_one_user_turn(root):
    target = load_target(layout(root, "e2b-it-hf-bf16"))
    tok = target.tokenizer
    render = lambda text: tok.decode(text)
    ids = generate_ids(target, GenerationConfig(policy="fixed"))
    assert render(ids) == "<bos><|turn>user\nHello world<turn|>\n<|turn>model\n"
    with_system = generate_ids(target, GenerationConfig(policy="fixed", system_prompt="Be brief."))
    assert (
        render(with_system) == "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHello world<turn|>\n<|turn>model\n"
    )
    thinking = generate_ids(target, GenerationConfig(policy="fixed", chat_template_config='{"enable_thinking": true}'))
    assert render(thinking).startswith("<bos><|turn>system\n<|think|>")
    raw = generate_ids(target, GenerationConfig(policy="fixed", chat_template=False))
    assert render(raw) == PROMPT and raw == list(tok.encode(PROMPT))
    large = load_target(layout(root, "31b-it-hf-bf16"))
    assert large.tokenizer.decode(generate_ids(large, GenerationConfig(policy="fixed"))).endswith(
        "<|turn>model\n<|channel>thought\n<channel|>"
    )
    with pytest.raises(DsparkError, match="chat-template-config is not valid JSON"):
        generate_ids(target, GenerationConfig(policy="fixed", chat_template_config="{oops"))


def generate_ids(target, cfg: GenerationConfig) -> list[int]:
    s = run_to_summary(generate_plain(target, PROMPT, GenerationConfig(**{**cfg.__dict__, "max_tokens": 1})))
    return list(s.prompt_tokens)


def test_a_base_model_without_template_is_unchanged(root):
    d = root / "e2b-base"
    if not d.exists():
        mini.write_hf(d, "e2b", it=False, seed=_seed("e2b"))
    target = load_target(d)
    assert not target.has_chat_template and target.eos_token_ids == {1}
    assert generate_ids(target, GenerationConfig(policy="fixed")) == list(target.tokenizer.encode(PROMPT))


def test_bf16_moe_experts_run_on_the_cpu_with_metal_numbers(root):
    from mlx_lm.models.switch_layers import SwitchLinear

    d = layout(root, "26b-a4b-it-hf-bf16-moe")
    target = load_target(d)
    experts = [m for _, m in target.model.named_modules() if isinstance(m, SwitchLinear)]
    if mx.default_device().type == mx.gpu:  # Metal multiplies bf16 experts itself: nothing is changed
        assert experts and all(type(m) is SwitchLinear and m.weight.dtype == mx.bfloat16 for m in experts)
        assert gemma4.moe_cpu_extra_bytes(d, json.loads((d / "config.json").read_text())) == 0
        return
    assert experts and all(type(m) is not SwitchLinear and m.weight.dtype == mx.float32 for m in experts)
    m = experts[0]
    x = (mx.random.normal((1, 3, 1, 1, m.weight.shape[-1])) * 0.5).astype(mx.bfloat16)  # as SwitchGLU calls it
    idx = mx.array([[1, 5], [0, 7], [3, 3]]).reshape(1, 3, 2)
    y = m(x, idx)
    assert y.dtype == mx.bfloat16 and y.shape == (1, 3, 2, 1, m.weight.shape[1])
    # each expert product: float32 accumulation, one rounding to bf16 (what Metal's kernel does)
    w = m.weight
    for t in range(3):
        for j in range(2):
            e = int(idx[0, t, j])
            want = (x[0, t, 0, 0].astype(mx.float32) @ w[e].T).astype(mx.bfloat16)
            assert mx.array_equal(y[0, t, j, 0], want)


def test_memory_is_checked_before_loading(root, monkeypatch):
    d = layout(root, "e2b-it-hf-bf16")
    needed = gemma4.estimate_target_bytes(d, json.loads((d / "config.json").read_text()))
    on_disk = sum(f.stat().st_size for f in d.glob("*.safetensors"))
    assert 0.8 * on_disk < needed < on_disk  # from the headers alone, the towers left out
    monkeypatch.setattr(modeldir, "metal_working_set", lambda: None)  # as on Linux, or a Mac computing on its CPU
    monkeypatch.setattr(modeldir, "machine_memory", lambda: needed)  # the model would fill it all
    with pytest.raises(DsparkError, match=r"needs about .* this machine has"):
        load_target(d)
    warnings = []
    monkeypatch.setattr(modeldir, "machine_memory", lambda: int(needed / 0.8))
    load_target(d, say=warnings.append)
    assert warnings and "expect swapping" in warnings[0]
    # on a Mac computing on Metal, the GPU's recommended working set is the limit, not the RAM
    monkeypatch.setattr(modeldir, "machine_memory", lambda: 100 * needed)
    monkeypatch.setattr(modeldir, "metal_working_set", lambda: needed)
    with pytest.raises(DsparkError, match=r"needs about .* Metal's recommended working set on this Mac is"):
        load_target(d)


def test_open_a_target_by_its_hugging_face_name_from_the_local_cache(root, tmp_path):
    repo = "mlx-community/gemma-4-e2b-it-4bit"
    snap = mini.populate_hub_cache(tmp_path / "hf" / "hub", repo, layout(root, "e2b-it-mlx-community-4bit"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    cmd = [
        sys.executable,
        "-m",
        "dspark.cli",
        "generate",
        "--target",
        repo,
        "--prompt",
        PROMPT,
        "--max-tokens",
        "6",
        "--json",
        "--baseline",
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["target"] == repo and out["identical"] is True and len(out["tokens"]) == 6
    assert out["prompt_tokens"][:2] == [2, 105]  # <bos><|turn>: the chat template was applied
    cmd[cmd.index(repo)] = "mlx-community/not-in-the-cache"
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "not in the local Hugging Face cache" in r.stderr and r.stderr.count("\n") == 1
    assert snap.is_dir()

"""load_target and lossless greedy decoding across Gemma-4 kinds: the multimodal wrapper,
MoE blocks, quantized weights, K=V global attention; structural recognition."""

import json

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten
from mlx_lm.generate import generate_step
from mlx_lm.models import gemma4
from oracle import OracleDrafter
from same import assert_same_greedy
from tiny import tiny_args, tiny_model, write_tokenizer

from dspark import (
    DflashConfig,
    DflashDrafter,
    GenerationConfig,
    NotGemma4Error,
    Target,
    generate,
    load_target,
    run_to_summary,
)

PROMPT = [5, 9, 11, 3, 7, 21, 2]


def check_lossless(target, n=80):
    ref = [tok for tok, _ in generate_step(mx.array(PROMPT), target.model, max_tokens=n)]
    assert len(set(ref)) >= 8
    cfg = GenerationConfig(policy="fixed", max_tokens=n, stop_at_eos=False)
    oracle = OracleDrafter(PROMPT + ref, target.dims.vocab_size, corrupt=0.3)
    assert_same_greedy(target, PROMPT, run_to_summary(generate(target, oracle, PROMPT, cfg)).tokens, ref)
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=8), seed=0)
    assert_same_greedy(target, PROMPT, run_to_summary(generate(target, drafter, PROMPT, cfg)).tokens, ref)


def test_moe_target():
    model = tiny_model(
        0, scale=0.15, vocab=96, enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32
    )
    check_lossless(Target(model))


def test_k_eq_v_global_layers():
    model = tiny_model(0, scale=0.15, vocab=96, attention_k_eq_v=True, num_global_key_value_heads=1)
    check_lossless(Target(model))


def test_quantized_target():
    model = tiny_model(0, scale=0.15, vocab=96)
    nn.quantize(model, group_size=32, bits=8)
    mx.eval(model.parameters())
    target = Target(model)
    check_lossless(target)
    assert target.target_id == Target(tiny_model(0, scale=0.15, vocab=96)).target_id  # precision-independent


def test_multimodal_wrapper_loads_from_directory(tmp_path):
    text = tiny_args(vocab=300, window=16)
    args = gemma4.ModelArgs(model_type="gemma4", text_config=vars(text).copy(), vocab_size=300)
    mx.random.seed(0)
    model = gemma4.Model(args)
    model.language_model.model.embed_tokens.weight = model.language_model.model.embed_tokens.weight * 0.15
    mx.eval(model.parameters())
    # Checkpoints of the wrapper name the text weights "model.language_model.*".
    weights = {
        k.replace("language_model.model.", "model.language_model."): v for k, v in tree_flatten(model.parameters())
    }
    mx.save_safetensors(str(tmp_path / "model.safetensors"), weights)
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "gemma4", "vocab_size": 300, "text_config": vars(text), "eos_token_id": 1})
    )
    write_tokenizer(tmp_path)
    target = load_target(tmp_path)
    assert target.lm is target.model.language_model and target.dims.vocab_size == 300
    check_lossless(target)


def test_structure_not_name_decides():
    from mlx_lm.models import llama

    llama_model = llama.Model(
        llama.ModelArgs(
            model_type="gemma4_text",
            hidden_size=32,
            num_hidden_layers=2,
            intermediate_size=64,
            num_attention_heads=2,
            rms_norm_eps=1e-5,
            vocab_size=64,
            num_key_value_heads=2,
        )
    )
    with pytest.raises(NotGemma4Error):
        Target(llama_model)  # says gemma4_text, is not

"""Miniatures of the published Gemma-4 checkpoint layouts, written in code.

Every structural feature of the real files is kept (config keys and their nesting, the
layer_types pattern, KV sharing, per-layer inputs, ``attention_k_eq_v`` with a global KV head
count, MoE experts in the HF ``gate_up_proj`` form, EOS lists, chat templates in
``chat_template.jinja``, weight names, shards with an index, mlx-community quantisation with
its ``quantization`` block and bf16 tower weights beside the text model, ``mlx_lm.convert``
output, the transformers >= 5.15 ``per_layer_config`` re-save); only sizes shrink (hidden 64,
vocabulary 512 with Gemma's special ids, sliding windows 16/32). Sources: transformers'
Gemma-4 conversion script variant tables and mlx-lm / mlx-vlm's loading and conversion code.

No tests here; ``test_real_layouts.py`` uses these writers.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path

import mlx.core as mx
import numpy as np

VOCAB = 512
SPECIAL = {
    "<pad>": 0,
    "<eos>": 1,
    "<bos>": 2,
    "<unk>": 3,
    "<mask>": 4,
    "<|tool>": 46,
    "<tool|>": 47,
    "<|tool_call>": 48,
    "<tool_call|>": 49,
    "<|tool_response>": 50,
    "<tool_response|>": 51,
    "<|think|>": 98,
    "<|channel>": 100,
    "<channel|>": 101,
    "<|turn>": 105,
    "<turn|>": 106,
}
NEWLINE = 107  # "\n" is an ordinary token with this id in Gemma's vocabulary
MULTIMODAL = {
    "<|image>": 496,
    "<|audio>": 497,
    "<|image|>": 498,
    "<|audio|>": 499,
    "<image|>": 500,
    "<audio|>": 501,
    "<|video|>": 502,
}  # remapped from 255999..258884
TOKEN_IDS = {
    "boi_token_id": 496,
    "boa_token_id": 497,
    "image_token_id": 498,
    "audio_token_id": 499,
    "eoi_token_id": 500,
    "eoa_token_id": 501,
    "eoa_token_index": 501,
    "video_token_id": 502,
}
EOS_CONFIG, EOS_GENERATION = [1, 106], [1, 106, 50]

# Gemma-4's template for text messages: a system turn when asked, then the turns, then the
# generation prompt; the 26B/31B/12B form appends an empty, closed thought channel.
TEMPLATE = (
    "{{ bos_token }}"
    "{%- if (enable_thinking is defined and enable_thinking) or messages[0]['role'] == 'system' -%}"
    "{{- '<|turn>system\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking -%}{{- '<|think|>' -}}{%- endif -%}"
    "{%- if messages[0]['role'] == 'system' -%}{{- messages[0]['content'] | trim -}}{%- endif -%}{{- '<turn|>\\n' -}}"
    "{%- endif -%}"
    "{%- for m in messages if m['role'] != 'system' -%}"
    "{{- '<|turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\\n' + (m['content'] | trim) "
    "+ '<turn|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|turn>model\\n' -}}LARGE{%- endif -%}"
)
LARGE_TAIL = "{%- if not enable_thinking | default(false) -%}{{- '<|channel>thought\\n<channel|>' -}}{%- endif -%}"


def chat_template(large: bool) -> str:
    return TEMPLATE.replace("LARGE", LARGE_TAIL if large else "")


def write_tokenizer(dst: Path, template: str | None) -> None:
    """A Gemma-like tokenizer (BPE with byte fallback, Gemma's special ids) in the files the
    published repos ship: tokenizer.json, tokenizer_config.json, chat_template.jinja."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    vocab = {**SPECIAL, "\n": NEWLINE, **MULTIMODAL, **{f"<0x{b:02X}>": 240 + b for b in range(256)}}
    pieces = ["▁"] + list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\":;-()/_{}[]=+*#")
    merges = []
    for word in ["user", "model", "system", "▁def", "▁the", "▁Hello", "▁world", "▁return", "thought"]:
        cur = word[0]
        for ch in word[1:]:
            merges.append((cur, ch))
            cur += ch
            pieces.append(cur)
    free = [i for i in range(VOCAB) if i not in set(vocab.values())]
    for p in dict.fromkeys(pieces):
        if p not in vocab and free:
            vocab[p] = free.pop(0)
    for k, i in enumerate(free):
        vocab[f"<unused{k}>"] = i
    merges = [(a, b) for a, b in merges if a in vocab and b in vocab and a + b in vocab]
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in list(SPECIAL) + list(MULTIMODAL)])
    tok.save(str(dst / "tokenizer.json"))
    config = {
        "backend": "tokenizers",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "mask_token": "<mask>",
        "sot_token": "<|turn>",
        "eot_token": "<turn|>",
        "soc_token": "<|channel>",
        "eoc_token": "<channel|>",
        "think_token": "<|think|>",
        "padding_side": "left",
        "tokenizer_class": "GemmaTokenizer",
    }
    (dst / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    if template is not None:
        (dst / "chat_template.jinja").write_text(template)


# --------------------------------------------------------------------------- configs
S5F = ["sliding_attention"] * 5 + ["full_attention"]
S4F = ["sliding_attention"] * 4 + ["full_attention"]
ROPE = {
    "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
    "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
}


def text_config(
    *,
    layers,
    pattern,
    heads,
    kv,
    gkv,
    hd,
    inter,
    hpl=0,
    shared=0,
    double_wide=False,
    k_eq_v=False,
    window=16,
    moe=None,
    model_type="gemma4_text",
) -> dict:
    return {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attention_k_eq_v": k_eq_v,
        "bos_token_id": 2,
        "enable_moe_block": moe is not None,
        "eos_token_id": 1,
        "final_logit_softcapping": 30.0,
        "global_head_dim": 128,
        "head_dim": hd,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 64,
        "hidden_size_per_layer_input": hpl,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "layer_types": (pattern * layers)[:layers],
        "max_position_embeddings": 131072,
        "model_type": model_type,
        "moe_intermediate_size": moe and 64,
        "num_attention_heads": heads,
        "num_experts": moe and 8,
        "num_global_key_value_heads": gkv,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv,
        "num_kv_shared_layers": shared,
        "pad_token_id": 0,
        "rms_norm_eps": 1e-06,
        "rope_parameters": copy.deepcopy(ROPE),
        "sliding_window": window,
        "tie_word_embeddings": True,
        "top_k_experts": moe and 2,
        "use_cache": True,
        "use_double_wide_mlp": double_wide,
        "vocab_size": VOCAB,
        "vocab_size_per_layer_input": VOCAB,
    }


#: name -> (text config, towers: "small" (vision+audio, E-series), "large" (vision), "unified", large template)
FAMILIES = {
    "e2b": (
        lambda: text_config(
            layers=10, pattern=S4F, heads=2, kv=1, gkv=None, hd=32, inter=256, hpl=16, shared=4, double_wide=True
        ),
        "small",
        False,
    ),
    "e4b": (
        lambda: text_config(layers=12, pattern=S5F, heads=4, kv=1, gkv=None, hd=16, inter=256, hpl=16, shared=4),
        "small",
        False,
    ),
    "31b": (
        lambda: text_config(layers=12, pattern=S5F, heads=4, kv=2, gkv=1, hd=16, inter=256, k_eq_v=True, window=32),
        "large",
        True,
    ),
    "26b-a4b": (
        lambda: text_config(
            layers=12, pattern=S5F, heads=4, kv=2, gkv=1, hd=16, inter=64, k_eq_v=True, window=32, moe=True
        ),
        "large",
        True,
    ),
    "12b": (
        lambda: text_config(
            layers=12,
            pattern=S5F,
            heads=4,
            kv=2,
            gkv=1,
            hd=16,
            inter=256,
            k_eq_v=True,
            window=32,
            model_type="gemma4_unified_text",
        ),
        "unified",
        True,
    ),
}


def top_config(text: dict, towers: str, it: bool) -> dict:
    unified = towers == "unified"
    vision = {
        "model_type": "gemma4_unified_vision" if unified else "gemma4_vision",
        "hidden_size": 64,
        "num_hidden_layers": 1,
        "patch_size": 8,
    }
    audio = {"model_type": "gemma4_unified_audio" if unified else "gemma4_audio", "hidden_size": 64}
    c = {
        "architectures": ["Gemma4UnifiedForConditionalGeneration" if unified else "Gemma4ForConditionalGeneration"],
        "audio_config": audio if towers in ("small", "unified") else None,
        **TOKEN_IDS,
        "dtype": "bfloat16",
        "initializer_range": 0.02,
        "model_type": "gemma4_unified" if unified else "gemma4",
        "text_config": text,
        "tie_word_embeddings": True,
        "transformers_version": "5.5.0",
        "vision_config": vision,
        # not in the real files: mlx-lm's gemma4.ModelArgs copies a top-level vocab_size (262144
        # by default) over text_config's, so a shrunk vocabulary must be stated here too
        "vocab_size": VOCAB,
    }
    if it:
        c["eos_token_id"] = list(EOS_CONFIG)
    return dict(sorted(c.items()))


def resave_with_per_layer_config(config: dict) -> dict:
    """What transformers >= 5.15 writes when it re-saves a Gemma-4 config."""
    c = copy.deepcopy(config)
    t = c["text_config"]
    g, gkv = t.pop("global_head_dim"), t.pop("num_global_key_value_heads")
    override = {"head_dim": g, **({"num_key_value_heads": gkv} if t["attention_k_eq_v"] and gkv else {})}
    t["per_layer_config"] = {str(i): dict(override) for i, lt in enumerate(t["layer_types"]) if lt == "full_attention"}
    c["transformers_version"] = "5.24.0"
    return c


# --------------------------------------------------------------------------- weights
def text_weights(t: dict, prefix: str = "model.language_model.") -> dict[str, tuple]:
    """HF names -> shapes of the text model (KV-shared layers keep their unused K/V, as published)."""
    H, L, V, hpl = t["hidden_size"], t["num_hidden_layers"], t["vocab_size"], t["hidden_size_per_layer_input"]
    first_shared = L - t["num_kv_shared_layers"]
    w = {prefix + "embed_tokens.weight": (V, H), prefix + "norm.weight": (H,)}
    if hpl:
        w.update(
            {
                prefix + "embed_tokens_per_layer.weight": (V, L * hpl),
                prefix + "per_layer_model_projection.weight": (L * hpl, H),
                prefix + "per_layer_projection_norm.weight": (hpl,),
            }
        )
    for i, lt in enumerate(t["layer_types"]):
        p, full = f"{prefix}layers.{i}.", lt == "full_attention"
        hd = t["global_head_dim"] if full else t["head_dim"]
        k_eq_v = t["attention_k_eq_v"] and full
        kv = t["num_global_key_value_heads"] if k_eq_v and t["num_global_key_value_heads"] else t["num_key_value_heads"]
        inter = t["intermediate_size"] * (2 if t["use_double_wide_mlp"] and i >= first_shared else 1)
        w.update(
            {
                p + "self_attn.q_proj.weight": (t["num_attention_heads"] * hd, H),
                p + "self_attn.q_norm.weight": (hd,),
                p + "self_attn.k_proj.weight": (kv * hd, H),
                p + "self_attn.k_norm.weight": (hd,),
                p + "self_attn.o_proj.weight": (H, t["num_attention_heads"] * hd),
                p + "mlp.gate_proj.weight": (inter, H),
                p + "mlp.up_proj.weight": (inter, H),
                p + "mlp.down_proj.weight": (H, inter),
                p + "layer_scalar": (1,),
            }
        )
        if not k_eq_v:
            w[p + "self_attn.v_proj.weight"] = (kv * hd, H)
        for n in (
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ):
            w[p + n + ".weight"] = (H,)
        if hpl:
            w.update(
                {
                    p + "per_layer_input_gate.weight": (hpl, H),
                    p + "per_layer_projection.weight": (H, hpl),
                    p + "post_per_layer_input_norm.weight": (H,),
                }
            )
        if t["enable_moe_block"]:
            E, Im = t["num_experts"], t["moe_intermediate_size"]
            w.update(
                {
                    p + "router.proj.weight": (E, H),
                    p + "router.scale": (H,),
                    p + "router.per_expert_scale": (E,),
                    p + "experts.gate_up_proj": (E, 2 * Im, H),
                    p + "experts.down_proj": (E, H, Im),
                    p + "pre_feedforward_layernorm_2.weight": (H,),
                    p + "post_feedforward_layernorm_1.weight": (H,),
                    p + "post_feedforward_layernorm_2.weight": (H,),
                }
            )
    return w


def tower_weights(towers: str) -> dict[str, tuple]:
    """A few tensors of each tower under their real names (mlx-lm's loader drops them all)."""
    if towers == "unified":
        return {
            "model.vision_embedder.patch_dense.weight": (64, 192),
            "model.vision_embedder.pos_embedding": (16, 2, 64),
            "model.embed_vision.embedding_projection.weight": (64, 64),
            "model.embed_audio.embedding_projection.weight": (64, 64),
        }
    w = {
        "model.vision_tower.patch_embedder.input_proj.weight": (64, 192),
        "model.vision_tower.encoder.layers.0.self_attn.q_proj.linear.weight": (64, 64),
        "model.vision_tower.encoder.layers.0.mlp.down_proj.linear.weight": (64, 128),
        "model.embed_vision.embedding_projection.weight": (64, 64),
    }
    if towers == "small":
        w.update(
            {
                "model.audio_tower.layers.0.self_attn.q_proj.linear.weight": (64, 64),
                "model.audio_tower.layers.0.self_attn.q_proj.input_max": (),
                "model.embed_audio.embedding_projection.weight": (64, 64),
            }
        )
    return w


def values(shapes: dict[str, tuple], seed: int) -> dict[str, mx.array]:
    """bf16 values with some structure, so greedy continuations are not flat."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        if name.endswith(("norm.weight", "scale", "per_expert_scale")) or "layernorm" in name:
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("layer_scalar"):
            a = np.full(shape, rng.uniform(0.5, 1.0))
        elif name.endswith(("input_max",)):
            a = np.full(shape, 6.0)
        else:
            a = (0.5 if "embed_tokens" in name else 0.15) * rng.standard_normal(shape)
        out[name] = mx.array(a.astype(np.float32)).astype(mx.bfloat16)
    return out


def save_shards(dst: Path, weights: dict, shards: int, fmt: str) -> None:
    names = list(weights)
    per = -(-len(names) // shards)
    groups = [names[i : i + per] for i in range(0, len(names), per)]
    index = {"metadata": {"total_size": sum(v.nbytes for v in weights.values())}, "weight_map": {}}
    for k, group in enumerate(groups):
        f = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors" if len(groups) > 1 else "model.safetensors"
        mx.save_safetensors(str(dst / f), {n: weights[n] for n in group}, metadata={"format": fmt})
        index["weight_map"].update({n: f for n in group})
    (dst / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def write_common(dst: Path, it: bool, large: bool) -> None:
    write_tokenizer(dst, chat_template(large) if it else None)
    gen = {
        "bos_token_id": 2,
        "do_sample": True,
        "eos_token_id": EOS_GENERATION if it else 1,
        "pad_token_id": 0,
        "temperature": 1.0,
        "top_k": 64,
        "top_p": 0.95,
    }
    (dst / "generation_config.json").write_text(json.dumps(gen, indent=2))


# --------------------------------------------------------------------------- layouts
def write_hf(dst: Path, family: str, it: bool = True, shards: int = 2, resave: bool = False, seed: int = 0) -> Path:
    """google/gemma-4-*: bf16, model-0000K-of-0000N.safetensors + index, towers included."""
    make_text, towers, large = FAMILIES[family]
    t = make_text()
    dst.mkdir(parents=True)
    config = top_config(t, towers, it)
    if resave:
        config = resave_with_per_layer_config(config)
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    save_shards(dst, values({**text_weights(t), **tower_weights(towers)}, seed), shards, "pt")
    write_common(dst, it, large)
    return dst


def _mlx_name(name: str) -> list[tuple[str, int | None]]:
    """HF name -> mlx-vlm's saved name(s) (experts split into switch_glu projections)."""
    n = name.removeprefix("model.")
    if n.startswith("language_model."):
        n = "language_model.model." + n[len("language_model.") :]
    if n.endswith(".experts.gate_up_proj"):
        base = n.replace(".experts.gate_up_proj", ".experts.switch_glu.")
        return [(base + "gate_proj.weight", 0), (base + "up_proj.weight", 1)]
    if n.endswith(".experts.down_proj"):
        return [(n.replace(".experts.down_proj", ".experts.switch_glu.down_proj.weight"), None)]
    return [(n, None)]


def write_mlx_community(dst: Path, family: str, bits: int, seed: int = 0, group: int = 64) -> Path:
    """mlx-community/gemma-4-*-{4,8}bit as mlx-vlm writes them: no "model." prefix, the text model
    under language_model.model.*, affine quantisation (uint32 weight + bf16 scales/biases) of the
    text model's matrices, bf16 towers kept, routers at 8 bits, a quantization block."""
    make_text, towers, large = FAMILIES[family]
    t = make_text()
    dst.mkdir(parents=True)
    hf = values({**text_weights(t), **tower_weights(towers)}, seed)
    quant: dict = {"group_size": group, "bits": bits, "mode": "affine"}
    out = {}
    for name, v in hf.items():
        for new, half in _mlx_name(name):
            w = v if half is None else mx.contiguous(mx.split(v, 2, axis=-2)[half])
            module = new.removesuffix(".weight")
            tower = not new.startswith("language_model.")
            if tower or not new.endswith(".weight") or w.ndim < 2 or w.shape[-1] % group or "norm" in new:
                out[new] = w
                continue
            b = 8 if new.endswith("router.proj.weight") else bits
            if b != bits:
                quant[module] = {"group_size": group, "bits": b}
            out[module + ".weight"], out[module + ".scales"], out[module + ".biases"] = mx.quantize(w, group, b)
    config = top_config(t, towers, True)
    config.pop("dtype")
    config["quantization"] = config["quantization_config"] = quant
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    save_shards(dst, out, 1, "mlx")
    write_common(dst, True, large)
    return dst


def write_mlx_lm_convert(dst: Path, src: Path, bits: int | None = None) -> Path:
    """The real ``mlx_lm.convert`` of an HF miniature: text only (towers dropped)."""
    from mlx_lm.convert import convert

    convert(str(src), mlx_path=str(dst), quantize=bits is not None, q_bits=bits)
    return dst


def populate_hub_cache(hub: Path, repo_id: str, src: Path) -> Path:
    """``src`` in the Hugging Face cache layout: blobs, a snapshot of relative links, refs/main."""
    org, name = repo_id.split("/")
    repo = hub / f"models--{org}--{name}"
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snap = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    snap.mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    for f in sorted(p for p in src.iterdir() if p.is_file()):
        data = f.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    return snap

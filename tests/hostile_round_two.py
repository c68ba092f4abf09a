"""The second round of bad model directories and files (issue #26) for ``test_hostile.py``'s
table: crafted weights and safetensors headers, configs whose values make the math
meaningless, JSON past its bounds, special files, chat templates and tokenizers that do not
end or panic. ``build`` makes them once per test module from a good target and drafter."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
from hostile_fixtures import (
    alias,
    cfg,
    copy,
    drafter_variant,
    duplicate_key_to_zeros,
    edit_json,
    fifo,
    header_variant,
    huge_shape,
    link_to_dev_zero,
    nested,
    overlap,
    read_st,
    setting,
    target_variant,
    unix_socket,
    write_st,
)

EMBED = "model.embed_tokens.weight"
NORM = "model.norm.weight"
NORM_A, NORM_B = "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight"
DOWN = "model.layers.0.mlp.down_proj.weight"
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b[32mall checks passed\x1b[0m"


def _weights(name: str, change):
    def apply(w):
        w[name] = change(w[name])

    return apply


def _rope(kind: str, key: str, value):
    return lambda c: c["rope_parameters"][kind].__setitem__(key, value)


def _raw_config(text: str):
    def write(d: Path) -> Path:
        (d / "config.json").write_text(text)
        return d

    return write


def _template(template: str):
    return lambda d: edit_json(d / "tokenizer_config.json", setting("chat_template", template))


def build(root: Path, t: Path, d: Path) -> dict[str, Path]:
    """name -> crafted directory or file."""
    T, D = target_variant, drafter_variant
    out: dict[str, Path] = {}

    def target(name, change=None, weights=None, then=None):
        out[name] = T(t, root, name, change, weights)
        if then is not None:
            then(out[name])

    # non-finite and mistyped weights (the silent garbage)
    target("t_nan_embed", weights=_weights(EMBED, lambda x: mx.full(x.shape, float("nan"))))
    target("t_inf_weight", weights=_weights(DOWN, lambda x: x.at[3, 5].add(float("inf"))))
    target("t_inf_norm", weights=_weights(NORM, lambda x: x.at[0].add(float("-inf"))))
    target("t_int8_embed", weights=_weights(EMBED, lambda x: (x * 100).astype(mx.int8)))
    target("t_bool_norm", weights=_weights(NORM, lambda x: x > 0))
    target("t_complex_norm", weights=_weights(NORM, lambda x: x.astype(mx.complex64)))
    target("t_int32_scalar", weights=_weights("model.layers.0.layer_scalar", lambda x: x.astype(mx.int32)))
    out["t_dup_key"] = header_variant(t, root, "t_dup_key", duplicate_key_to_zeros(EMBED))
    out["t_alias"] = header_variant(t, root, "t_alias", alias(NORM_A, NORM_B))
    out["t_overlap"] = header_variant(t, root, "t_overlap", overlap(EMBED, NORM_B))
    out["t_huge_shape"] = header_variant(t, root, "t_huge_shape", huge_shape(NORM))
    out["t_trailing_bytes"] = header_variant(t, root, "t_trailing_bytes", lambda h, data: (h, data + bytes(64)))
    out["t_gap"] = header_variant(t, root, "t_gap", _gap)
    out["t_unknown_dtype"] = header_variant(
        t, root, "t_unknown_dtype", lambda h, data: ({**h, NORM: {**h[NORM], "dtype": "F128"}}, data)
    )
    out["t_offsets_text"] = header_variant(
        t, root, "t_offsets_text", lambda h, data: ({**h, NORM: {**h[NORM], "data_offsets": ["0", "4"]}}, data)
    )
    out["t_metadata_numbers"] = header_variant(
        t, root, "t_metadata_numbers", lambda h, data: ({**h, "__metadata__": {"format": 1}}, data)
    )
    out["t_nested_header"] = header_variant(
        t, root, "t_nested_header", lambda h, data: ('{"x": ' + nested(100_000) + "}", b"")
    )
    target("t_zero_size", then=lambda x: _empty_tensor(x / "model.safetensors"))
    target("t_two_shards", then=_second_shard)

    # configs whose values reach mlx-lm unchecked or make the math meaningless
    target("t_rope_theta_0", _rope("full_attention", "rope_theta", 0))
    target("t_top_rope_theta_0", setting("rope_theta", 0))
    target("t_global_head_dim_frac", setting("global_head_dim", 64.5))
    target("t_text_config_list", lambda c: c.update(model_type="gemma4", text_config=[]))
    target("t_kv_shared_100", setting("num_kv_shared_layers", 100))
    target("t_kv_heads_3", setting("num_key_value_heads", 3))
    target("t_head_dim_odd", setting("head_dim", 15))
    target("t_rope_type", _rope("sliding_attention", "rope_type", "warp"))
    target("t_rotary_0", _rope("full_attention", "partial_rotary_factor", 0))
    target("t_softcap_0", setting("final_logit_softcapping", 0))
    target("t_eps_nan", setting("rms_norm_eps", float("nan")))
    target("t_layer_type", lambda c: c["layer_types"].__setitem__(0, "warp_attention"))
    target("t_window_pattern_0", setting("sliding_window_pattern", 0))
    target("t_moe_no_experts", setting("enable_moe_block", True))
    target("t_top_k_experts", lambda c: c.update(num_experts=4, top_k_experts=8))
    target("t_vocab_true", setting("vocab_size", True))
    target("t_pad_negative", setting("pad_token_id", -1))
    target("t_quant_bits_7", setting("quantization", {"bits": 7, "group_size": 64}))
    target("t_model_file", setting("model_file", "modeling.py"))
    target("t_escapes", setting("model_type", ESCAPES))
    target(
        "t_template_module",
        then=lambda x: edit_json(x / "tokenizer_config.json", setting("chat_template_type", "../../os")),
    )
    # JSON past its bounds
    target("t_nested_config", then=_raw_config('{"model_type": "gemma4_text", "x": ' + nested(100_000) + "}"))
    target(
        "t_long_int",
        then=lambda x: (x / "config.json").write_text(
            (x / "config.json").read_text()[:-1] + ', "pad_token_id": ' + "7" * 5001 + "}"
        ),
    )
    target(
        "t_dup_config_key",
        then=lambda x: (x / "config.json").write_text((x / "config.json").read_text()[:-1] + ', "vocab_size": 17}'),
    )
    # special files where regular ones belong
    target("t_fifo_tokenizer", then=lambda x: fifo(x / "tokenizer.json"))
    target("t_zero_tokenizer", then=lambda x: link_to_dev_zero(x / "tokenizer.json"))
    target("t_zero_config", then=lambda x: link_to_dev_zero(x / "config.json"))
    target("t_fifo_quant_config", then=lambda x: fifo(x / "hf_quant_config.json"))
    target("t_socket", then=lambda x: unix_socket(x / "s.json"))
    # chat templates and tokenizers
    target(
        "t_loop_template",
        then=_template("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
    )
    target("t_multiply_template", then=_template("{{ 'x' * 10**10 }}"))
    target("t_power_template", then=_template("{{ 10 ** 100000000 }}"))
    target("t_center_template", then=_template("{{ messages[0].content | center(10000000000) }}"))
    target(
        "t_panic_tokenizer",
        then=lambda x: edit_json(
            x / "tokenizer.json", setting("normalizer", {"type": "Replace", "pattern": {"Regex": ""}, "content": "x"})
        ),
    )

    # drafters
    out["d_calibration_text"] = D(d, root, "d_calibration_text", setting("calibration", ["a", "b"]))
    out["d_calibration_zero"] = D(d, root, "d_calibration_zero", setting("calibration", [0.0, 1.0]))
    out["d_nan_norm"] = D(d, root, "d_nan_norm", weights=_weights("norm.weight", lambda x: x * float("nan")))
    out["d_huge_shape"] = header_variant(d, root, "d_huge_shape", huge_shape("norm.weight"))
    out["d_alias"] = header_variant(d, root, "d_alias", _drafter_alias(d))
    out["d_weights_list"] = D(d, root, "d_weights_list", setting("target_weights", [1, 2]))
    out["d_nested_config"] = copy(d, root / "d_nested_config")
    (out["d_nested_config"] / "config.json").write_text('{"format": "dspark-drafter", "x": ' + nested(100_000) + "}")
    out["d_tap_string"] = D(d, root, "d_tap_string", cfg("tap_layers", "13"))

    out["fifo_drafter"] = copy(d, root / "fifo_drafter")
    fifo(out["fifo_drafter"] / "model.safetensors")

    # files given on the command line
    (root / "fifo_prompt.txt").unlink(missing_ok=True)
    out["fifo_prompt"] = fifo(root / "fifo_prompt.txt")
    out["zero_prompt"] = link_to_dev_zero(root / "zero_prompt.txt")
    return out


def _gap(h: dict, data: bytes):
    """The last tensor moved 64 bytes on: nothing covers the bytes before it."""
    last = max((n for n in h if n != "__metadata__"), key=lambda n: h[n]["data_offsets"][0])
    begin, end = h[last]["data_offsets"]
    h[last]["data_offsets"] = [begin + 64, end + 64]
    return h, data[:begin] + bytes(64) + data[begin:]


def _empty_tensor(path: Path) -> None:
    """A zero-size tensor added to a header (its bytes: none)."""
    h, data = read_st(path)
    h["model.extra.weight"] = {"dtype": "F32", "shape": [0, 64], "data_offsets": [len(data), len(data)]}
    write_st(path, h, data)


def _second_shard(d: Path) -> None:
    """The same tensor in a second file (a loader would keep one of the two)."""
    mx.save_safetensors(str(d / "model-00002.safetensors"), {NORM: mx.zeros((64,))})


def _drafter_alias(d: Path):
    h, _ = read_st(d / "model.safetensors")
    same = {}
    for name, info in h.items():
        if name != "__metadata__":
            same.setdefault((info["dtype"], tuple(info["shape"])), []).append(name)
    a, b = next(names for names in same.values() if len(names) > 1)[:2]
    return alias(a, b)


__all__ = ["ESCAPES", "build"]

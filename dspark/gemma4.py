"""What a Gemma-4 checkpoint needs before and while mlx-lm loads it: a target directory refused
in one sentence before anything is loaded (code it asks to run, a drafter given as a target,
impossible config values), the newer transformers config form rebuilt into the one mlx-lm reads,
and bf16 MoE experts kept in float32 on MLX's CPU backend (with the memory that costs).
``dspark.target`` applies them.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from .errors import DsparkError
from .modeldir import (
    FLOATS,
    TOWER_PREFIXES,
    check_files,
    kind_of,
    read_config,
    read_header,
    read_headers,
    refuse_code,
    safetensors_files,
    tensor_bytes,
)
from .validate import Fields

# --------------------------------------------------------------------------- what a target directory may be
#: mlx-lm's Gemma-4 text fields (``gemma4_text.ModelArgs``) that are integers -> (LIMITS key, may be null).
INT_FIELDS = {
    "hidden_size": ("hidden_size", False),
    "num_hidden_layers": ("num_hidden_layers", False),
    "intermediate_size": ("intermediate_size", False),
    "num_attention_heads": ("num_attention_heads", False),
    "num_key_value_heads": ("num_key_value_heads", False),
    "head_dim": ("head_dim", False),
    "global_head_dim": ("head_dim", False),
    "vocab_size": ("vocab_size", False),
    "vocab_size_per_layer_input": ("vocab_size", False),
    "sliding_window": ("sliding_window", False),
    "sliding_window_pattern": ("num_hidden_layers", False),
    "max_position_embeddings": ("max_position_embeddings", False),
    "num_kv_shared_layers": ("layer_count", False),
    "pad_token_id": ("token_id", False),
    "hidden_size_per_layer_input": ("width", False),
    "num_global_key_value_heads": ("num_key_value_heads", True),
    "num_experts": ("experts", True),
    "top_k_experts": ("experts", True),
    "moe_intermediate_size": ("intermediate_size", True),
}
#: ... that are numbers -> (LIMITS key, may be null); and that are true or false.
FLOAT_FIELDS = {
    "global_partial_rotary_factor": ("fraction", False),
    "partial_rotary_factor": ("fraction", False),
    "rms_norm_eps": ("rms_norm_eps", False),
    "final_logit_softcapping": ("logit_softcap", True),
    "rope_theta": ("rope_theta", False),
}
BOOL_FIELDS = ("rope_traditional", "attention_k_eq_v", "use_double_wide_mlp", "enable_moe_block", "tie_word_embeddings")
LAYER_TYPES = ("sliding_attention", "full_attention")
#: RoPE kinds mlx-lm builds (``rope_utils.initialize_rope``); Gemma-4 uses the first two.
ROPE_TYPES = ("default", "proportional", "linear", "dynamic", "llama3", "yarn", "longrope")
GEMMA4_TYPES = ("gemma4", "gemma4_text", "gemma4_unified")
#: What mlx's quantized layouts allow (``mlx.nn.quantize``).
QUANT_BITS, QUANT_GROUPS, QUANT_MODES = (2, 3, 4, 5, 6, 8), (16, 32, 64, 128), ("affine", "mxfp4", "mxfp8", "nvfp4")


def check_target_dir(directory: Path, config: dict) -> None:
    """Refuse, in one sentence and before anything is loaded, a target directory that asks to
    run code (a model or tokenizer ``auto_map``, ``*.py`` files), that holds anything but regular
    files, that is a drafter, or whose config has a value that reaches mlx-lm unchecked or makes
    the model's math meaningless."""
    check_files(directory)
    refuse_code(directory, config)
    if (directory / "tokenizer_config.json").exists():
        check_tokenizer_config(directory, read_config(directory, "a model", "tokenizer_config.json"))
    if kind_of(config) == "drafter":
        raise DsparkError(f"{directory} is a drafter, not a target model: give it as --drafter")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not re.fullmatch(r"[a-z0-9_]{1,64}", model_type):
        raise DsparkError(f"{directory}/config.json has no valid model_type ({model_type!r}): not a model directory")
    where = directory / "config.json"
    if "text_config" in config and not isinstance(config["text_config"], dict):
        raise Fields(config, where)._fail("text_config", config["text_config"], "a JSON object")
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    if model_type in GEMMA4_TYPES:
        check_text_config(text, where if text is config else f"{where} (text_config)")
        if text is not config and config.get("vocab_size") is not None:  # mlx-lm's wrapper puts it into text_config
            Fields(config, where).int("vocab_size")
        check_quantization(config, where)
    else:  # not Gemma-4 (refused as such once mlx-lm names its class): the sizes a loader would allocate
        f = Fields(text, where)
        for key in ("hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size"):
            if text.get(key) is not None:
                f.int(key)


def check_text_config(text: dict, where) -> None:
    """Every field of a Gemma-4 text config that mlx-lm reads: its type, its range, and how the
    fields must agree (heads and KV heads, layer types and layer count, shared KV layers, RoPE)."""
    f = Fields(text, where)
    got = {}
    for key, (limit, nullable) in INT_FIELDS.items():
        if key in text and (text[key] is not None or not nullable):
            got[key] = f.int(key, limit)
    for key, (limit, nullable) in FLOAT_FIELDS.items():
        if key in text and (text[key] is not None or not nullable):
            f.float(key, limit)
    for key in BOOL_FIELDS:
        if key in text:
            f.bool(key, False)
            if text[key] is None:
                raise f._fail(key, None, "true or false")
    layers = got.get("num_hidden_layers", 35)
    heads = got.get("num_attention_heads", 8)
    for kv_key in ("num_key_value_heads", "num_global_key_value_heads"):
        kv = got.get(kv_key)
        if kv is not None and heads % kv:
            raise f._fail(kv_key, kv, f"a divisor of num_attention_heads ({heads})")
    for key in ("head_dim", "global_head_dim"):
        if got.get(key) is not None and got[key] % 2:
            raise f._fail(key, got[key], "an even number (RoPE rotates pairs)")
    types = text.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or not all(t in LAYER_TYPES for t in types):
            raise DsparkError(f"{where}: layer_types must be a list of names ({' / '.join(LAYER_TYPES)})")
        if len(types) != layers:  # mlx-lm would index past the list mid-load
            raise DsparkError(f"{where} lists {len(types)} layer_types for num_hidden_layers {layers}: they must agree")
    shared = got.get("num_kv_shared_layers", 0)
    if shared:
        if shared >= layers:
            raise f._fail("num_kv_shared_layers", shared, f"fewer than num_hidden_layers ({layers})")
        if types is not None and set(types[layers - shared :]) - set(types[: layers - shared]):
            raise DsparkError(f"{where}: a KV-shared layer's type has no earlier layer to share keys and values with")
    if (
        got.get("top_k_experts") is not None
        and got.get("num_experts") is not None
        and got["top_k_experts"] > got["num_experts"]
    ):
        raise f._fail("top_k_experts", got["top_k_experts"], f"at most num_experts ({got['num_experts']})")
    if text.get("enable_moe_block"):
        for key in ("num_experts", "top_k_experts", "moe_intermediate_size"):
            if got.get(key) is None:
                raise DsparkError(f"{where}: enable_moe_block is true but {key} is not set")
    check_rope(
        text, where, {"full_attention": got.get("global_head_dim", 512), "sliding_attention": got.get("head_dim", 256)}
    )


def check_rope(text: dict, where, head_dims: dict[str, int]) -> None:
    """``rope_parameters`` by layer kind: a known RoPE kind, a base of at least 1, a rotated share
    in (0, 1] that rotates a whole number of pairs."""
    rope = text.get("rope_parameters")
    if rope is None:
        return
    if (
        not isinstance(rope, dict)
        or set(rope) - set(LAYER_TYPES)
        or not all(isinstance(v, dict) for v in rope.values())
    ):
        raise DsparkError(f"{where}: rope_parameters must map {' / '.join(LAYER_TYPES)} to their RoPE settings")
    for kind, params in rope.items():
        f = Fields(params, f"{where} (rope_parameters.{kind})")
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type not in ROPE_TYPES:
            raise f._fail("rope_type", rope_type, f"one of {', '.join(ROPE_TYPES)}")
        if "rope_theta" in params:
            f.float("rope_theta", "rope_theta")
        if "factor" in params or rope_type in ("linear", "dynamic", "yarn"):
            f.float("factor", "rope_factor")
        if "partial_rotary_factor" in params:
            share = f.float("partial_rotary_factor", "fraction")
            rotated = int(head_dims[kind] * share)
            if rope_type == "proportional" and (rotated < 2 or rotated % 2):
                raise f._fail(
                    "partial_rotary_factor",
                    share,
                    f"a share of the {head_dims[kind]}-wide head that rotates whole pairs",
                )


def check_quantization(config: dict, where) -> None:
    """A ``quantization`` block (mlx's layout) as ``mlx.nn.quantize`` takes it: bits, group size
    and mode it knows, per-module entries alike."""
    q = config.get("quantization")
    if q is None:
        return
    if not isinstance(q, dict):
        raise Fields(config, where)._fail("quantization", q, "a JSON object")

    def one(block: dict, name: str) -> None:
        f = Fields(block, f"{where} ({name})")
        if "bits" in block and f.int("bits", "bits") not in QUANT_BITS:
            raise f._fail("bits", block["bits"], f"one of {QUANT_BITS}")
        if "group_size" in block and f.int("group_size", "group_size") not in QUANT_GROUPS:
            raise f._fail("group_size", block["group_size"], f"one of {QUANT_GROUPS}")
        if "mode" in block and block["mode"] not in QUANT_MODES:
            raise f._fail("mode", block["mode"], f"one of {', '.join(QUANT_MODES)}")

    one({k: v for k, v in q.items() if k in ("bits", "group_size", "mode")}, "quantization")
    for name, block in q.items():
        if name in ("bits", "group_size", "mode"):
            continue
        if isinstance(block, dict):
            one(block, f"quantization.{name[:80]}")
        elif not isinstance(block, bool):
            raise DsparkError(f"{where}: quantization.{name[:80]} must be an object or true/false")


def check_tokenizer_config(directory: Path, tokenizer: dict) -> None:
    """What mlx-lm and transformers act on in tokenizer_config.json: no custom code, and the
    names of mlx-lm's own template and tool-parser modules (imported by name) plain names."""
    if "auto_map" in tokenizer:
        raise DsparkError(
            f"{directory}/tokenizer_config.json asks to run a custom tokenizer (auto_map); dspark "
            f"never runs code from a model directory"
        )
    for key in ("chat_template_type", "tool_parser_type"):
        value = tokenizer.get(key)
        if value is not None and not (isinstance(value, str) and re.fullmatch(r"[a-z0-9_]{1,64}", value)):
            raise Fields(tokenizer, directory / "tokenizer_config.json")._fail(key, value, "a module name")


def check_target_weights(directory: Path) -> None:
    """The dtypes of a target's tensors, from the headers (each checked whole by
    ``modeldir.read_header``): floating point, or mlx's quantized layout (uint32 weights beside
    their scales), as a Gemma-4 uses them; an integer embedding, a BOOL or complex norm, an empty
    tensor is refused before mlx-lm would load it as numbers."""
    headers = read_headers(directory)
    for name, info in headers.items():
        if name.removeprefix("model.").startswith(TOWER_PREFIXES):
            continue
        dtype, base = info["dtype"], name.rsplit(".", 1)[0]
        packed = headers.get(base + ".weight", {}).get("dtype") == "U32" and base + ".scales" in headers
        ok = (
            dtype in FLOATS
            or (packed and name.endswith(".weight") and dtype == "U32")
            or (packed and name.endswith(".scales") and dtype == "U8")
        )
        if not ok:
            raise DsparkError(
                f"{directory}: {name[:200]} is stored as {dtype}; a Gemma-4 target's weights are F32, F16 "
                f"or BF16, or mlx's quantized layout (uint32 beside scales)"
            )
        if 0 in info["shape"]:
            raise DsparkError(f"{directory}: {name[:200]} is empty (shape {info['shape']})")


# --------------------------------------------------------------------------- config forms
def legacy_text_config(config: dict) -> dict | None:
    """transformers >= 5.15 re-saves Gemma-4 configs with ``per_layer_config`` instead of
    ``global_head_dim`` / ``num_global_key_value_heads``, which mlx-lm does not read (it falls
    back to defaults and fails on a ``k_proj`` shape). Returns the text config with those two
    fields rebuilt from the full-attention layers' entries, or None when nothing is to be done.
    Raises DsparkError when the entries cannot be read as one global shape."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    plc = text.get("per_layer_config")
    if not plc or "global_head_dim" in text:
        return None
    if not isinstance(plc, dict) or not isinstance(text.get("layer_types"), list):
        raise DsparkError(
            "config.json has a per_layer_config this version cannot read (expected a map from "
            "layer index to head_dim / num_key_value_heads)"
        )
    try:
        by_layer = {int(k): v for k, v in plc.items()}
    except ValueError:
        raise DsparkError("config.json per_layer_config has a key that is not a layer index") from None
    full = [by_layer.get(i, {}) for i, t in enumerate(text["layer_types"]) if t == "full_attention"]
    head_dims = {o.get("head_dim") for o in full}
    kv_heads = {o.get("num_key_value_heads") for o in full}
    if len(head_dims) != 1 or len(kv_heads) != 1:
        raise DsparkError(
            "config.json per_layer_config gives the full-attention layers different shapes, "
            "which mlx-lm's Gemma-4 cannot hold"
        )
    fixed = dict(text)
    fixed["global_head_dim"] = head_dims.pop() or text.get("head_dim")
    fixed["num_global_key_value_heads"] = kv_heads.pop()
    return fixed


def model_config_overrides(config: dict) -> dict | None:
    """What to pass as mlx-lm's ``model_config`` so that ``config`` loads, or None."""
    fixed = legacy_text_config(config)
    if fixed is None:
        return None
    return {"text_config": fixed} if isinstance(config.get("text_config"), dict) else fixed


# --------------------------------------------------------------------------- MoE on the CPU
def moe_cpu_extra_bytes(directory: Path, config: dict) -> int:
    """Extra bytes the float32 copy of unquantized bf16/fp16 MoE experts takes on the CPU."""
    text = config.get("text_config", config)
    if not text.get("enable_moe_block") or not _cpu():
        return 0
    extra = 0
    for f in safetensors_files(directory):
        for name, info in read_header(f).items():
            if name != "__metadata__" and ".experts." in name and info.get("dtype") in ("BF16", "F16"):
                begin, end = info["data_offsets"]
                extra += int(end) - int(begin)  # float32 is twice 16 bits: one more copy's worth
    return extra


def _cpu() -> bool:
    """MLX computes on its CPU backend (Linux; a Mac only when told to, DSPARK_DEVICE=cpu)."""
    import mlx.core as mx  # noqa: PLC0415 (slow: mlx, not needed for the checks)

    return mx.default_device() == mx.cpu


def cpu_safe_experts(model) -> int:
    """MLX's CPU backend computes ``gather_mm`` in float32 only, so a bf16/fp16 MoE target
    (unquantized experts) fails at its first forward there. Keep those expert weights in float32
    and round each expert product back to the activation dtype, as the Metal kernel does
    (float32 accumulation, one rounding): same numbers, twice the experts' memory. Quantized
    experts (``gather_qmm``) already run on the CPU and are left alone. Returns how many expert
    layers were changed (0 off the CPU)."""
    if not _cpu():
        return 0
    import mlx.core as mx  # noqa: PLC0415 (slow: mlx, not needed for the checks)
    from mlx_lm.models.switch_layers import SwitchLinear  # noqa: PLC0415 (slow: mlx, not needed for the checks)

    changed = 0
    for _, m in model.named_modules():
        if type(m) is SwitchLinear and m.weight.dtype in (mx.bfloat16, mx.float16):
            m.weight = m.weight.astype(mx.float32)
            if "bias" in m:
                m.bias = m.bias.astype(mx.float32)
            m.__class__ = _float32_experts_class()
            changed += 1
    return changed


@functools.lru_cache(maxsize=1)
def _float32_experts_class():
    import mlx.core as mx  # noqa: PLC0415 (slow: mlx, not needed for the checks)
    from mlx_lm.models.switch_layers import SwitchLinear  # noqa: PLC0415 (slow: mlx, not needed for the checks)

    class Float32Experts(SwitchLinear):
        """A SwitchLinear whose expert products run in float32 and return the input's dtype."""

        def __call__(self, x, indices, sorted_indices=False):
            y = mx.gather_mm(
                x.astype(mx.float32),
                self["weight"].swapaxes(-1, -2),
                rhs_indices=indices,
                sorted_indices=sorted_indices,
            )
            if "bias" in self:
                y = y + mx.expand_dims(self["bias"][indices], -2)
            return y.astype(x.dtype)

    return Float32Experts


def estimate_target_bytes(directory: Path, config: dict) -> int:
    """What loading a target directory will take: its text weights, plus the float32 experts
    copy on the CPU."""
    return tensor_bytes(directory) + moe_cpu_extra_bytes(directory, config)


__all__ = [
    "check_quantization",
    "check_rope",
    "check_target_dir",
    "check_target_weights",
    "check_text_config",
    "check_tokenizer_config",
    "cpu_safe_experts",
    "estimate_target_bytes",
    "legacy_text_config",
    "model_config_overrides",
    "moe_cpu_extra_bytes",
]

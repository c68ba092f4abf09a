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
from .modeldir import kind_of, read_config, refuse_code, safetensors_files, read_header, tensor_bytes
from .validate import LIMITS, Fields

# --------------------------------------------------------------------------- what a target directory may be
TEXT_FIELDS = ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads", "num_key_value_heads",
               "head_dim", "intermediate_size", "sliding_window", "max_position_embeddings")


def check_target_dir(directory: Path, config: dict) -> None:
    """Refuse, in one sentence and before anything is loaded, a target directory that asks to
    run code (a model or tokenizer ``auto_map``, ``*.py`` files), that is a drafter, or whose
    config has impossible values."""
    refuse_code(directory, config)
    if (directory / "tokenizer_config.json").is_file():
        tokenizer = read_config(directory, "a model", "tokenizer_config.json")
        if "auto_map" in tokenizer:
            raise DsparkError(f"{directory}/tokenizer_config.json asks to run a custom tokenizer (auto_map); dspark "
                              f"never runs code from a model directory")
    if kind_of(config) == "drafter":
        raise DsparkError(f"{directory} is a drafter, not a target model: give it as --drafter")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not re.fullmatch(r"[a-z0-9_]{1,64}", model_type):
        raise DsparkError(f"{directory}/config.json has no valid model_type ({model_type!r}): not a model directory")
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    f = Fields(text, directory / "config.json")
    for key in TEXT_FIELDS:
        if key in text and text[key] is not None:
            f.int(key, key if key in LIMITS else "hidden_size")
    types, layers = text.get("layer_types"), text.get("num_hidden_layers")
    if types is not None and layers is not None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise DsparkError(f"{directory}/config.json: layer_types must be a list of names")
        if len(types) != layers:  # mlx-lm would index past the list mid-load
            raise DsparkError(f"{directory}/config.json lists {len(types)} layer_types for num_hidden_layers {layers}: "
                              f"they must agree")


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
        raise DsparkError("config.json has a per_layer_config this version cannot read (expected a map from "
                          "layer index to head_dim / num_key_value_heads)")
    try:
        by_layer = {int(k): v for k, v in plc.items()}
    except ValueError:
        raise DsparkError("config.json per_layer_config has a key that is not a layer index") from None
    full = [by_layer.get(i, {}) for i, t in enumerate(text["layer_types"]) if t == "full_attention"]
    head_dims = {o.get("head_dim") for o in full}
    kv_heads = {o.get("num_key_value_heads") for o in full}
    if len(head_dims) != 1 or len(kv_heads) != 1:
        raise DsparkError("config.json per_layer_config gives the full-attention layers different shapes, "
                          "which mlx-lm's Gemma-4 cannot hold")
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
    import mlx.core as mx

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
    import mlx.core as mx
    from mlx_lm.models.switch_layers import SwitchLinear

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
    import mlx.core as mx
    from mlx_lm.models.switch_layers import SwitchLinear

    class Float32Experts(SwitchLinear):
        """A SwitchLinear whose expert products run in float32 and return the input's dtype."""

        def __call__(self, x, indices, sorted_indices=False):
            y = mx.gather_mm(x.astype(mx.float32), self["weight"].swapaxes(-1, -2), rhs_indices=indices,
                             sorted_indices=sorted_indices)
            if "bias" in self:
                y = y + mx.expand_dims(self["bias"][indices], -2)
            return y.astype(x.dtype)

    return Float32Experts


def estimate_target_bytes(directory: Path, config: dict) -> int:
    """What loading a target directory will take: its text weights, plus the float32 experts
    copy on the CPU."""
    return tensor_bytes(directory) + moe_cpu_extra_bytes(directory, config)


__all__ = ["check_target_dir", "cpu_safe_experts", "estimate_target_bytes", "legacy_text_config",
           "model_config_overrides", "moe_cpu_extra_bytes"]

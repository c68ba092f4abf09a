"""Reading a model directory before and while it is loaded: the newer transformers config form,
safetensors headers (sizes without reading tensors), the memory a target and a drafter need
against what the machine has, and Gemma-4 MoE experts on the CPU backend.
"""

from __future__ import annotations

import functools
import json
import os
import struct
import sys
from pathlib import Path

from .errors import DsparkError

#: Weights mlx-lm's Gemma-4 loader throws away (vision and audio towers).
TOWER_PREFIXES = ("vision_tower", "multi_modal_projector", "audio_tower", "embed_audio", "embed_vision",
                  "vision_embedder")
#: Above this share of the machine's memory a load is refused; above WARN_SHARE it is warned about.
REFUSE_SHARE, WARN_SHARE = 0.90, 0.70
MAX_HEADER_BYTES = 100 * 2**20  # a safetensors JSON header larger than this is not a checkpoint


# --------------------------------------------------------------------------- what a target directory may be
TEXT_FIELDS = ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads", "num_key_value_heads",
               "head_dim", "intermediate_size", "sliding_window", "max_position_embeddings")


def check_target_dir(directory: Path, config: dict) -> None:
    """Refuse, in one sentence and before anything is loaded, a target directory that asks to
    run code (a model or tokenizer ``auto_map``, ``*.py`` files), that is a drafter, or whose
    config has impossible values."""
    import re

    from . import hub
    from .errors import read_config
    from .formats import refuse_code
    from .validate import LIMITS, Fields

    refuse_code(directory, config)
    if (directory / "tokenizer_config.json").is_file():
        tokenizer = read_config(directory, "a model", "tokenizer_config.json")
        if "auto_map" in tokenizer:
            raise DsparkError(f"{directory}/tokenizer_config.json asks to run a custom tokenizer (auto_map); dspark "
                              f"never runs code from a model directory")
    if hub.kind_of(directory) == "drafter":
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


# --------------------------------------------------------------------------- safetensors headers
def safetensors_files(directory: Path) -> list[Path]:
    """A directory's ``*.safetensors`` files, sorted, without hidden ones: a process killed while
    writing leaves ``.<name>.<pid>.tmp.safetensors`` (``dspark.files.atomic_write``), which is
    not part of the checkpoint (pathlib's glob, unlike a shell's, matches dot files)."""
    return sorted(f for f in Path(directory).glob("*.safetensors") if not f.name.startswith("."))


def read_header(path: Path) -> dict:
    """The JSON header of a safetensors file, without reading its tensors."""
    if not path.is_file():
        raise DsparkError(f"{path} is not a regular file")
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise DsparkError(f"{path} is not a safetensors file (too short)")
            n = struct.unpack("<Q", raw)[0]
            if n > MAX_HEADER_BYTES or n > path.stat().st_size - 8:
                raise DsparkError(f"{path} is not a readable safetensors file (header length {n})")
            header = json.loads(f.read(n))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DsparkError(f"{path} is not a readable safetensors file ({e})") from None
    if not isinstance(header, dict):
        raise DsparkError(f"{path} is not a readable safetensors file (its header is not an object)")
    return header


def tensor_bytes(directory: Path, skip=TOWER_PREFIXES) -> int:
    """Bytes of the tensors a loader keeps (the towers' are skipped), from the headers."""
    total = 0
    for f in safetensors_files(directory):
        for name, info in read_header(f).items():
            if name == "__metadata__" or name.removeprefix("model.").startswith(skip):
                continue
            try:
                begin, end = info["data_offsets"]
                total += int(end) - int(begin)
            except (KeyError, TypeError, ValueError):
                raise DsparkError(f"{f}: tensor {name} has no valid data offsets") from None
    return total


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


# --------------------------------------------------------------------------- memory
def machine_memory() -> int | None:
    """Physical memory in bytes (None when the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def loaded_bytes() -> int:
    """Memory MLX holds now (the models already loaded)."""
    import mlx.core as mx

    return int(mx.get_active_memory())


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GB"


def metal_working_set() -> int | None:
    """Metal's recommended working set in bytes, when MLX computes on a Mac's GPU (None elsewhere).
    MLX's buffers live in memory the GPU must keep resident; beyond this size macOS pages them and
    generation slows to a crawl, which is why mlx-lm warns against it (``wired_limit`` in
    ``mlx_lm/generate.py`` reads the same ``max_recommended_working_set_size``)."""
    if sys.platform != "darwin":
        return None
    try:
        import mlx.core as mx

        if mx.default_device().type != mx.gpu:
            return None
        return int(mx.device_info().get("max_recommended_working_set_size") or 0) or None
    except (AttributeError, ImportError, RuntimeError, ValueError):
        return None


def memory_budget() -> tuple[int, str] | None:
    """What the models must fit in, in bytes, and how to name it in a sentence: Metal's recommended
    working set on a Mac computing on its GPU, else the machine's physical memory."""
    metal = metal_working_set()
    if metal:
        return metal, f"Metal's recommended working set on this Mac is {gib(metal)}"
    total = machine_memory()
    return (total, f"this machine has {gib(total)} in all") if total else None


def check_fits(what: str, needed: int, already: int = 0, say=None) -> None:
    """Refuse (DsparkError) or warn (``say``) before loading ``needed`` bytes on top of
    ``already`` loaded ones, against :func:`memory_budget`. ``DSPARK_IGNORE_MEMORY=1`` skips it."""
    budget = memory_budget()
    if budget is None or os.environ.get("DSPARK_IGNORE_MEMORY"):
        return
    total, limit = budget
    use = needed + already
    if use > REFUSE_SHARE * total:
        raise DsparkError(f"{what} needs about {gib(needed)} of memory and {limit} "
                          f"({gib(already)} already in use by loaded models): choose a smaller or quantised "
                          f"checkpoint (set DSPARK_IGNORE_MEMORY=1 to try anyway)")
    if use > WARN_SHARE * total and say is not None:
        say(f"{what} needs about {gib(needed)} and {limit}: expect swapping")


# --------------------------------------------------------------------------- MoE on the CPU
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


__all__ = ["check_fits", "cpu_safe_experts", "estimate_target_bytes", "legacy_text_config", "machine_memory",
           "memory_budget", "metal_working_set", "model_config_overrides", "read_header", "tensor_bytes"]

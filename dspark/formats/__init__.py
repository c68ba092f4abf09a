"""The drafter checkpoint formats people have, recognised from their files and config keys:

- ``dspark-drafter``: this project's own (``dspark.drafter.DflashDrafter``);
- ``zlab-dflash``: z-lab DFlash heads (``dflash_config``; no embedding or head of their own);
- ``deepspec``: DeepSeek DeepSpec ``Gemma4DSparkModel`` (DSpark, and its DFlash baseline with
  the heads off);
- ``speculators``: vLLM speculators DSpark / DFlash heads (``speculators_config``), possibly
  with a reduced draft vocabulary and its ``d2t`` offsets.

Every format may be quantised in mlx's layout (``weight`` uint32 + ``scales`` + ``biases`` and
a ``quantization`` block in config.json; ``dspark quantize`` writes one). Only ``config.json``
and ``*.safetensors`` are read: a directory that asks for code (``auto_map``, ``*.py``) or ships
pickles is refused, and nothing in it is ever executed.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DsparkError, read_config

PICKLES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def refuse_code(directory: Path, config: dict) -> None:
    """One sentence if ``directory`` asks to run code or ships only pickled weights."""
    code = sorted(p.name for p in directory.glob("*.py"))
    if "auto_map" in config or code:
        what = f"Python files ({', '.join(code[:3])})" if code else "custom code (auto_map in config.json)"
        raise DsparkError(f"{directory} asks to run {what}; dspark never runs code from a checkpoint: "
                          f"use a directory with config.json and .safetensors weights only")
    from ..checkpoint import safetensors_files

    if not safetensors_files(directory) and any(directory.glob(f"*{s}") for s in PICKLES):
        raise DsparkError(f"{directory} holds pickled weights, which can run code when loaded: dspark reads "
                          f".safetensors only")


def detect(config: dict) -> str:
    """The format of a drafter directory's config.json (DsparkError when none fits)."""
    arch = " ".join(a for a in (config.get("architectures") or []) if isinstance(a, str))
    if config.get("format") == "dspark-drafter":
        return "dspark-drafter"
    if "speculators_config" in config or "speculators_model_type" in config:
        return "speculators"
    if "DSparkModel" in arch or ("markov_rank" in config and "target_layer_ids" in config and "dflash_config" not in config):
        return "deepspec"
    if "DFlash2" in arch:
        raise DsparkError("this is a DFlash 2 drafter (conv kernels and a candidate selector), which dspark does "
                          "not run yet")
    if "dflash_config" in config or "DFlashDraftModel" in arch:
        return "zlab-dflash"
    if "model_type" in config and "hidden_size" in config:
        raise DsparkError("this directory holds a model (model type "
                          f"{config.get('model_type')!r}), not a drafter: give it as --target")
    raise DsparkError("config.json is not a drafter this version knows (dspark, z-lab DFlash, DeepSpec DSpark "
                      "or vLLM speculators)")


def read_drafter_config(path: str | Path) -> tuple[Path, dict, str]:
    """(directory, config, format) of a drafter directory or Hugging Face name."""
    from .. import hub

    p = hub.resolve(str(path))
    if not p.is_dir():
        raise DsparkError(f"drafter directory not found: {p}")
    config = read_config(p, "a drafter")
    refuse_code(p, config)
    return p, config, detect(config)


def load_drafter(path: str | Path, target=None, say=None):
    """A drafter of any supported format, ready for ``dspark.generate``; with ``target``, one
    that does not fit it is refused in one sentence naming the value."""
    from .. import checkpoint

    p, config, fmt = read_drafter_config(path)
    if target is not None:
        checkpoint.check_fits(f"the drafter {p.name}", checkpoint.tensor_bytes(p, skip=()), say=say,
                              already=checkpoint.loaded_bytes())
    if fmt == "dspark-drafter":
        from ..drafter import DflashDrafter

        return DflashDrafter.load_native(p, config, target)
    module = _module(fmt)
    spec = module.read_spec(p, config)
    if target is not None:
        spec.check_target(target)
    drafter = spec.build(p)
    if target is not None:
        drafter.check_target(target)
    return drafter


def describe(path: str | Path) -> dict:
    """What a drafter directory is, without loading a target or its weights (``dspark inspect``)."""
    from .. import checkpoint

    p, config, fmt = read_drafter_config(path)
    headers = {}
    for f in checkpoint.safetensors_files(p):
        headers.update({k: v for k, v in checkpoint.read_header(f).items() if k != "__metadata__"})
    dtypes = sorted({v["dtype"] for v in headers.values()})
    out = {"path": str(p), "format": fmt, "dtype": "/".join(dtypes), "bytes": checkpoint.tensor_bytes(p, skip=()),
           "quantization": config.get("quantization")}
    if fmt == "dspark-drafter":
        from ..drafter import read_native_config

        dims, cfg = read_native_config(p, config)  # every field checked, as loading does
        out.update(block_size=cfg.block_size, drafts_per_round=cfg.block_size, tap_layers=list(cfg.tap_layers),
                   mask_token_id=cfg.mask_token_id, draft_vocab=dims.vocab_size, layers=cfg.num_layers,
                   markov_head=cfg.markov, confidence_head=cfg.confidence,
                   target={"hidden_size": dims.hidden_size, "vocab_size": dims.vocab_size,
                           "num_layers": dims.num_layers, "target_id": config.get("target_id")})
    else:
        out.update(_module(fmt).read_spec(p, config).describe())
    out["parameters"] = _parameters(headers, config)
    return out


def _parameters(headers: dict, config: dict) -> int:
    """Parameters from header shapes, counting quantized weights unpacked."""
    import math

    total = 0
    for name, info in headers.items():
        n = math.prod(info["shape"])
        base = name.rsplit(".", 1)[0]
        if name.endswith((".scales", ".biases")) and base + ".weight" in headers and \
                headers[base + ".weight"]["dtype"] == "U32":
            continue
        if info["dtype"] == "U32" and name.endswith(".weight") and base + ".scales" in headers:
            scales = headers[base + ".scales"]["shape"]
            group = ((config.get("quantization") or {}).get(base) or config.get("quantization") or {}).get("group_size", 64)
            n = math.prod(scales[:-1]) * scales[-1] * group
        total += n
    return total


def _module(fmt: str):
    from . import deepspec, speculators, zlab

    return {"zlab-dflash": zlab, "deepspec": deepspec, "speculators": speculators}[fmt]


__all__ = ["describe", "detect", "load_drafter", "read_drafter_config", "refuse_code"]

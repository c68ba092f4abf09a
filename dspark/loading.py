"""Loading a target or a drafter: the one entry point the CLI, the app, the benchmark, the
self-test and the training code call. A directory (or a Hugging Face name) is read and checked
before anything large is allocated (``dspark.modeldir``: its config, code it asks to run, its
safetensors headers, the memory it needs), then built: a Gemma-4 target through mlx-lm
(``dspark.target``, with the fixes of ``dspark.gemma4``), a drafter in its own format
(``dspark.formats``). Every mistake is one sentence (``DsparkError``); ``say`` gets warnings
(memory) and progress lines.
"""

from __future__ import annotations

import math
from pathlib import Path

from mlx_lm.utils import _get_classes, load_model, load_tokenizer

from . import drafter_profile as profiles
from . import finite, gemma4, hub
from .device import use_env_device
from .drafter import DflashDrafter
from .errors import DsparkError, NotGemma4Error
from .formats import assistant, conventions, deepspec, dflash2, eagle3, native, speculators, zlab
from .modeldir import (
    check_files,
    check_fits,
    drafter_format,
    loaded_bytes,
    not_a_drafter,
    read_config,
    read_headers,
    refuse_code,
    safetensors_files,
    tensor_bytes,
)
from .rust_calls import rust_call
from .target import Target, language_model

#: The published formats' readers (``read_spec(directory, config) -> formats.base.Spec``).
PUBLISHED = {"zlab-dflash": zlab, "dflash2": dflash2, "deepspec": deepspec, "speculators": speculators}
#: Formats whose drafters draft a token a step (their sessions are ``autoregressive``): no block,
#: no mask token, no Markov or confidence head; the verify policy sets how many tokens a round.
AUTOREGRESSIVE = frozenset({eagle3.FORMAT, assistant.FORMAT})
#: How a block drafter drafts, as ``dspark inspect`` says it (the autoregressive formats say their own).
BLOCK_DRAFTING = "a block in one forward"


# --------------------------------------------------------------------------- targets
def load_target(path: str | Path, say=None) -> Target:
    """Load a Gemma-4 target: a directory, or a Hugging Face name (from the local cache, else
    downloaded), text model or multimodal wrapper, any quantization. ``say`` gets warnings
    (memory) and progress lines."""
    use_env_device()  # before the first array of the model is made
    p = hub.resolve(str(path), say=say)
    if not p.is_dir():
        raise DsparkError(f"target directory not found: {p}")
    config = read_config(p, "a model")
    gemma4.check_target_dir(p, config)
    try:  # an architecture mlx-lm does not know is not Gemma-4: say so before reading weights
        _get_classes(config)
    except (ValueError, KeyError, TypeError):
        raise NotGemma4Error(f"{p} is not a Gemma-4 model (model type {config.get('model_type')!r})") from None
    if not safetensors_files(p):
        raise DsparkError(f"{p} has no .safetensors weights")
    gemma4.check_target_weights(p)
    check_fits(f"the target {p.name}", gemma4.estimate_target_bytes(p, config), say=say)
    overrides = gemma4.model_config_overrides(config)
    try:
        model, config = load_model(p, lazy=False, model_config=overrides, trust_remote_code=False)
    except ValueError as e:
        if "not supported" in str(e):
            raise NotGemma4Error(f"{p} is not a Gemma-4 model (model type {config.get('model_type')!r})") from None
        raise DsparkError(f"cannot load the target in {p}: {e}") from None
    except (RuntimeError, OSError, KeyError) as e:
        raise DsparkError(f"cannot load the target weights in {p}: {e}") from None
    language_model(model)  # refuse a non-Gemma-4 model before anything else
    # tokenizers raises many kinds, and a Rust panic is no Exception
    tokenizer = rust_call(
        f"cannot load the tokenizer in {p}",
        load_tokenizer,
        p,
        {"trust_remote_code": False},
        eos_token_ids=config.get("eos_token_id"),
    )
    target = Target(model, tokenizer, path=str(p), config=config)
    finite.check_target(target, p)
    return target


# --------------------------------------------------------------------------- drafters
def read_drafter_config(path: str | Path) -> tuple[Path, dict, str]:
    """(directory, config, format) of a drafter directory or Hugging Face name, checked: it
    exists, asks to run no code, and is a drafter format this version reads."""
    p = hub.resolve(str(path))
    if not p.is_dir():
        raise DsparkError(f"drafter directory not found: {p}")
    check_files(p)
    config = read_config(p, "a drafter")
    refuse_code(p, config)
    fmt = drafter_format(config)
    if fmt is None:
        raise not_a_drafter(config)
    return p, config, fmt


def load_drafter(path: str | Path, target: Target | None = None, say=None):
    """A drafter of any supported format, ready for ``dspark.generate``; with ``target``, one that
    does not fit it (or the memory left beside it) is refused in one sentence naming the value,
    before its weights are read."""
    p, config, fmt = read_drafter_config(path)
    check_fits(f"the drafter {p.name}", tensor_bytes(p, skip=()), already=loaded_bytes(), say=say)
    if fmt == native.FORMAT:
        drafter = DflashDrafter.load(p, target)
    elif fmt == eagle3.FORMAT:
        drafter = eagle3.load(p, config, target)
    elif fmt == assistant.FORMAT:
        drafter = assistant.AssistantDrafter.load(p, config, target)
    else:
        spec = read_spec(p, config, fmt)
        if target is not None:
            spec.check_target(target)
        drafter = spec.build(p, config)
        if target is not None:
            drafter.check_target(target)
    finite.check_params(drafter.net, p)
    drafter.profile = read_profile(p, drafter)
    return drafter


def read_profile(directory: Path, drafter):
    """The drafter's profile (``dspark.drafter_profile.find``: the acceptance it reached on
    held-out text), which the ``auto`` policy starts from; None when it has none. A damaged
    profile file does not stop the drafter from loading (``auto`` starts without it): it is
    ``dspark diagnose``'s to name, in its one line."""
    try:
        return profiles.find(directory, drafter)
    except DsparkError:
        return None


def read_spec(p: Path, config: dict, fmt: str):
    """A published drafter's ``formats.base.Spec``: what its format implies, read under the
    conventions its config.json chooses, if any (``formats.conventions``)."""
    return conventions.apply(PUBLISHED[fmt].read_spec(p, config), conventions.read(config, p / "config.json"))


def drafter_kind(drafter) -> str:
    """A loaded drafter's kind in words, the name the app's drafter list, a saved run and
    ``dspark inspect`` give it: "DSpark" (a block drafter with a Markov or confidence head),
    "DFlash" (the published block drafters without; "DFlash baseline" in DeepSpec's format),
    "DFlash 2", "EAGLE-3", "Gemma-4 assistant" (or its unified variant)."""
    if isinstance(drafter, DflashDrafter):
        return "DSpark" if drafter.cfg.markov or drafter.cfg.confidence else "DFlash"
    return drafter.info()["variant"]


def describe_drafter(path: str | Path) -> dict:
    """What a drafter directory is, without loading a target (``dspark inspect``). The drafter is
    loaded as ``load_drafter`` loads it, every check included, so what inspect describes is what
    generate would run, and a directory generate refuses is refused here in the same words."""
    p, config, fmt = read_drafter_config(path)
    drafter = load_drafter(p)
    kind = drafter_kind(drafter)
    drafter.dispose()
    headers = read_headers(p)
    dtypes = sorted({v["dtype"] for v in headers.values()})
    out = {
        "path": str(p),
        "format": fmt,
        "dtype": "/".join(dtypes),
        "bytes": tensor_bytes(p, skip=()),
        "quantization": config.get("quantization"),
        "kind": kind,
        "autoregressive": fmt in AUTOREGRESSIVE,
        "drafting": BLOCK_DRAFTING,  # an autoregressive format's describe() says its own
    }
    if fmt == native.FORMAT:
        dims, cfg = native.read_config(p, config)  # every field checked, as loading does
        out.update(
            block_size=cfg.block_size,
            block_slots=cfg.block_size,
            tap_layers=list(cfg.tap_layers),
            mask_token_id=cfg.mask_token_id,
            draft_vocab=dims.vocab_size,
            layers=cfg.num_layers,
            markov_head=cfg.markov,
            confidence_head=cfg.confidence,
            target={
                "hidden_size": dims.hidden_size,
                "vocab_size": dims.vocab_size,
                "num_layers": dims.num_layers,
                "target_id": config.get("target_id"),
            },
        )
    elif fmt == eagle3.FORMAT:
        out.update(eagle3.read_spec(p, config).describe())
    elif fmt == assistant.FORMAT:
        out.update(assistant.read_spec(p, config).describe())
    else:
        out.update(read_spec(p, config, fmt).describe())
    out["parameters"] = _parameters(headers, config)
    return out


def _parameters(headers: dict, config: dict) -> int:
    """Parameters from header shapes, counting quantized weights unpacked."""
    total = 0
    for name, info in headers.items():
        n = math.prod(info["shape"])
        base = name.rsplit(".", 1)[0]
        if (
            name.endswith((".scales", ".biases"))
            and base + ".weight" in headers
            and headers[base + ".weight"]["dtype"] == "U32"
        ):
            continue
        if info["dtype"] == "U32" and name.endswith(".weight") and base + ".scales" in headers:
            scales = headers[base + ".scales"]["shape"]
            q = config.get("quantization") if isinstance(config.get("quantization"), dict) else {}
            group = (q.get(base) if isinstance(q.get(base), dict) else q).get("group_size", 64)
            n = math.prod(scales[:-1]) * scales[-1] * group
        total += n
    return total


__all__ = [
    "AUTOREGRESSIVE",
    "PUBLISHED",
    "describe_drafter",
    "drafter_kind",
    "load_drafter",
    "load_target",
    "read_drafter_config",
]

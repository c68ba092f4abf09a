"""This project's own drafter format, ``dspark-drafter``: a directory with ``config.json``
(``format``, ``version``, ``target_id``, ``target_weights``, ``dims``, ``cfg``, ``calibration``,
``quantization``) and ``model.safetensors`` (the network's parameters by name, float32, or in
mlx's quantized layout). ``dspark.drafter.DflashDrafter`` reads and writes it with these
functions; ``dspark.loading.load_drafter`` reads it beside the published formats. The config is
checked field by field before anything is allocated, and nothing in the directory is executed.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

from ..backbone import DraftNet
from ..config import DflashConfig
from ..errors import DsparkError
from ..files import output_dir, save_safetensors, write_text
from ..modeldir import read_header
from ..options import check_options
from ..target import TargetDims
from ..validate import Fields, calibration_temps, check_shapes
from .quant import apply_quantization

FORMAT = "dspark-drafter"
VERSION = 1
WEIGHTS = "model.safetensors"


def check_cfg(cfg: DflashConfig, dims: TargetDims) -> None:
    """A drafter shape that fits a target of ``dims``, or one sentence saying what does not."""
    if cfg.block_size < 1 or cfg.num_layers < 1:
        raise DsparkError("block size and number of drafter layers must be at least 1")
    bad = [t for t in cfg.tap_layers if not 0 <= t < dims.num_layers - 1]
    if bad or len(set(cfg.tap_layers)) != len(cfg.tap_layers):
        raise DsparkError(f"tap layers {list(cfg.tap_layers)} must be distinct indices in 0..{dims.num_layers - 2}")
    if not 0 <= cfg.mask_token_id < dims.vocab_size:
        raise DsparkError(f"mask token id {cfg.mask_token_id} is outside the vocabulary ({dims.vocab_size})")
    if cfg.format != "native":
        raise DsparkError(f"a {cfg.format} drafter is stored in its own format, not dspark's (dspark.convert)")


def read_config(p: Path, meta: dict) -> tuple[TargetDims, DflashConfig]:
    """The dims and cfg sections of a native config.json, validated (types, ranges, the taps
    inside the target) before anything is allocated."""
    if meta.get("format") != FORMAT:
        raise DsparkError(
            f'{p} is not a drafter in dspark\'s own format (its config.json has no "format": '
            f'"{FORMAT}"): load it with dspark.load_drafter, which reads every format'
        )
    if meta.get("version") != VERSION:
        raise DsparkError(f"{p} is drafter format version {meta.get('version')!r}, this dspark reads {VERSION}")
    f = Fields(meta, p / "config.json")
    if not isinstance(meta.get("target_id"), str):
        raise DsparkError(f"{p / 'config.json'} has no target_id")
    d = Fields(f.dict("dims"), p / "config.json (dims)")
    try:
        dims = TargetDims(
            hidden_size=d.int("hidden_size"),
            num_layers=d.int("num_layers", "num_hidden_layers"),
            vocab_size=d.int("vocab_size"),
            num_heads=d.int("num_heads", "num_attention_heads"),
            num_kv_heads=d.int("num_kv_heads", "num_key_value_heads"),
            head_dim=d.int("head_dim"),
            intermediate_size=d.int("intermediate_size"),
            rms_norm_eps=d.float("rms_norm_eps", "rms_norm_eps"),
            final_logit_softcapping=d.float("final_logit_softcapping", "softcap")
            if d.has("final_logit_softcapping")
            else None,
        )
        cfg = DflashConfig.from_dict(f.dict("cfg"))
    except TypeError as e:
        raise DsparkError(f"{p / 'config.json'} has a malformed dims/cfg section ({e})") from None
    check_options(cfg)
    check_cfg(cfg, dims)
    calibration_temps(meta.get("calibration"), p / "config.json")
    if meta.get("target_weights") is not None and not (
        isinstance(meta["target_weights"], str) and len(meta["target_weights"]) <= 100
    ):
        raise f._fail("target_weights", meta["target_weights"], "a weights fingerprint")
    if meta.get("quantization") is not None and not isinstance(meta["quantization"], dict):
        raise f._fail("quantization", meta["quantization"], "a JSON object")
    return dims, cfg


def empty_net(p: Path, meta: dict, dims: TargetDims, cfg: DflashConfig) -> DraftNet:
    """The network the weights file must fill, its quantized modules made so, the file's header
    checked against its shapes; nothing of the weights is read yet."""
    w = p / WEIGHTS
    if not w.is_file():
        raise DsparkError(f"{p} has no {WEIGHTS}")
    header = read_header(w)
    header.pop("__metadata__", None)
    net = DraftNet(dims, cfg)
    apply_quantization(net, header, meta.get("quantization"), p)
    check_shapes(header, {k: v.shape for k, v in tree_flatten(net.parameters())}, w)
    return net


def load_weights(net: DraftNet, p: Path) -> None:
    w = p / WEIGHTS
    try:
        weights = mx.load(str(w))
    except Exception as e:  # mlx raises RuntimeError/ValueError for damaged files
        raise DsparkError(f"{w} is not a readable safetensors file ({e})") from None
    net.load_weights(list(weights.items()))
    mx.eval(net.parameters())


def write(path: str | Path, net: DraftNet, meta: dict) -> Path:
    """``config.json`` + ``model.safetensors``, each written whole or not at all (weights first:
    a config never names weights that are not there)."""
    p = output_dir(path, allow_existing=True)
    save_safetensors(p / WEIGHTS, dict(tree_flatten(net.parameters())), {"format": FORMAT})
    write_text(p / "config.json", json.dumps({"format": FORMAT, "version": VERSION, **meta}, indent=2) + "\n")
    return p


__all__ = ["FORMAT", "VERSION", "check_cfg", "empty_net", "load_weights", "read_config", "write"]

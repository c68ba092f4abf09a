"""Making and writing drafters in a format: a new, untrained drafter in any format
(``new_drafter``, what ``dspark train --format`` starts from) and ``dspark quantize`` (a 4- or
8-bit copy in mlx's layout, same format). Every output directory is written whole or not at all
(``dspark.files.staged_dir``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from .backbone import init_params
from .config import DflashConfig, default_taps
from .drafter import DflashDrafter
from .errors import DsparkError
from .files import save_safetensors, staged_dir, write_text
from .formats import deepspec, native, speculators, zlab
from .formats.base import EXTENSION, CheckpointDrafter, DraftShape
from .loading import load_drafter, read_drafter_config
from .modeldir import safetensors_files
from .target import Target

#: ``DflashConfig.format`` -> the module that writes and reads that format.
WRITERS = {"speculators": speculators, "zlab": zlab, "deepspec": deepspec}


def shape_of(target: Target, cfg: DflashConfig) -> DraftShape:
    """The architecture ``cfg`` asks for, on this target's dimensions."""
    d = target.dims
    limit = (
        target.config.get("max_position_embeddings")
        or (target.config.get("text_config") or {}).get("max_position_embeddings")
        or 4096
    )
    return DraftShape(
        hidden=d.hidden_size,
        layers=cfg.num_layers,
        heads=d.num_heads,
        kv_heads=d.num_kv_heads,
        head_dim=d.head_dim,
        intermediate=cfg.intermediate_size or d.intermediate_size,
        vocab=d.vocab_size,
        taps=tuple(cfg.tap_layers or default_taps(d.num_layers)),
        block_size=cfg.block_size,
        mask_token_id=cfg.mask_token_id,
        num_target_layers=d.num_layers,
        eps=d.rms_norm_eps,
        rope_theta=cfg.rope_theta,
        markov_rank=cfg.markov_rank if cfg.markov else 0,
        confidence=cfg.confidence,
        window=cfg.context_window,
        softcap=d.final_logit_softcapping,
        max_positions=int(limit),
    )


def cannot_carry(cfg: DflashConfig) -> str | None:
    """Why ``cfg.format`` cannot hold the drafter ``cfg`` describes (None: it can)."""
    if cfg.format == "zlab" and (cfg.markov or cfg.confidence):
        return (
            "z-lab DFlash heads have no Markov or confidence head: train it with --no-markov --no-confidence, "
            "or in --format speculators, deepspec or native, which carry them"
        )
    if cfg.format == "deepspec" and cfg.context_window:
        return (
            "DeepSpec's Gemma-4 drafter has no context window: train it without --context-window, or in --format "
            "speculators, zlab or native, which have one"
        )
    return None


def new_drafter(target: Target, cfg: DflashConfig, seed: int = 0):
    """An untrained drafter for ``target`` in ``cfg.format``: the native ``DflashDrafter``, or a
    published format's network as that format's reader builds it from the config.json its
    ``new_config`` writes (so what is trained is what the format serves). Weights are drawn
    from ``seed``; an embedding or head of the drafter's own starts as the target's."""
    if cfg.format == "native":
        return DflashDrafter.init(target, cfg, seed=seed)
    problem = cannot_carry(cfg)
    if problem:
        raise DsparkError(problem)
    cfg = replace(cfg, tap_layers=shape_of(target, cfg).taps)
    native.check_cfg(replace(cfg, format="native"), target.dims)
    module = WRITERS[cfg.format]
    config = module.new_config(shape_of(target, cfg))
    config[EXTENSION] = {"target_id": target.target_id, "trained_as": asdict(cfg)}
    with tempfile.TemporaryDirectory() as empty:  # the config alone: no weights to read yet
        spec = module.read_spec(Path(empty), config)
    net = spec.net()
    init_params(net, mx.random.key(seed))
    table = target.projection.table(mx.arange(target.dims.vocab_size)).astype(mx.float32)
    if spec.own_embedding:
        net.embed_tokens.weight = table
    if spec.own_head:
        lm = target.lm
        net.lm_head.weight = table if lm.tie_word_embeddings else lm.lm_head.weight.astype(mx.float32)
    mx.eval(net.parameters())
    drafter = CheckpointDrafter(spec, net, config)
    drafter.target_weights = target.weights_fingerprint
    drafter.check_target(target)
    return drafter


def quantize_drafter(src: str | Path, out: str | Path, bits: int, group_size: int = 64) -> dict:
    """Quantize every linear / embedding matrix whose input width is a multiple of
    ``group_size``; returns what was written (for the CLI's summary line)."""
    if bits not in (4, 8):
        raise DsparkError(f"--bits must be 4 or 8, not {bits}")
    p, config, fmt = read_drafter_config(src)
    if config.get("quantization"):
        raise DsparkError(f"{p} is already quantized ({config['quantization']})")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DsparkError(f"{out} exists and is not an empty directory")
    drafter = load_drafter(p)
    before = sum(v.nbytes for _, v in tree_flatten(drafter.net.parameters()))

    def eligible(path: str, m) -> bool:
        return hasattr(m, "to_quantized") and m.weight.shape[-1] % group_size == 0

    nn.quantize(drafter.net, group_size=group_size, bits=bits, class_predicate=eligible)
    mx.eval(drafter.net.parameters())
    block = {"group_size": group_size, "bits": bits, "mode": "affine"}
    with staged_dir(out) as tmp:
        if fmt == native.FORMAT:
            drafter.quantization = block
            drafter.save(tmp)
        else:
            weights = dict(tree_flatten(drafter.net.parameters()))
            for f in safetensors_files(p):  # the vocabulary tables travel as they are
                weights.update({k: v for k, v in mx.load(str(f)).items() if k in ("d2t", "t2d")})
            save_safetensors(tmp / "model.safetensors", weights, {"format": "mlx"})
            write_text(tmp / "config.json", json.dumps({**config, "quantization": block}, indent=1) + "\n")
            for extra in ("README.md", "LICENSE"):
                if (p / extra).is_file():
                    shutil.copyfile(p / extra, tmp / extra)
    after = sum(f.stat().st_size for f in safetensors_files(out))
    return {"format": fmt, "bits": bits, "group_size": group_size, "bytes_before": before, "bytes_after": after}


__all__ = ["WRITERS", "cannot_carry", "new_drafter", "quantize_drafter", "shape_of"]

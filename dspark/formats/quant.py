"""Drafters stored quantized in mlx's layout (``weight`` uint32 + ``scales`` + ``biases`` per
quantized matrix, a ``quantization`` block in config.json), in any format: the modules the
checkpoint stores quantized are made so before its weights are loaded. ``dspark quantize``
(``dspark.convert``) writes such a checkpoint."""

from __future__ import annotations

from pathlib import Path

import mlx.nn as nn

from ..errors import DsparkError
from ..validate import Fields


def apply_quantization(net: nn.Module, header: dict, quantization: dict | None, where: Path) -> None:
    """Turn the modules the checkpoint stores quantized (a ``<module>.scales`` tensor) into
    quantized ones, with the group size and bits of the config's ``quantization`` block."""
    quantized = {k[: -len(".scales")] for k in header if k.endswith(".scales")}
    if not quantized:
        return
    if not quantization:
        raise DsparkError(f"{where} has quantized weights but no quantization block in config.json")
    f = Fields(quantization, where / "config.json")
    default = (f.int("group_size", "group_size"), f.int("bits", "bits"))

    def predicate(path: str, module) -> bool | dict:
        if path not in quantized:
            return False
        own = quantization.get(path)
        if isinstance(own, dict):
            return {
                "group_size": f.int("group_size", "group_size", config=own),
                "bits": f.int("bits", "bits", config=own),
            }
        return True

    nn.quantize(net, group_size=default[0], bits=default[1], class_predicate=predicate)


__all__ = ["apply_quantization"]

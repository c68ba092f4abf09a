"""Gemma-4 checkpoints' own rules (``dspark.gemma4``) that need no checkpoint: a per-layer config
whose layers disagree is one sentence. The published layouts loading, their memory estimate and
the MoE on the CPU: ``test_real_layouts.py``."""

from __future__ import annotations

import pytest

from dspark import gemma4
from dspark.errors import DsparkError


def test_a_malformed_per_layer_config_is_one_sentence():
    config = {
        "text_config": {
            "layer_types": ["sliding_attention", "full_attention", "full_attention"],
            "per_layer_config": {"1": {"head_dim": 256}, "2": {"head_dim": 512}},
        }
    }
    with pytest.raises(DsparkError, match="different shapes"):
        gemma4.legacy_text_config(config)
    assert gemma4.legacy_text_config({"text_config": {"global_head_dim": 512}}) is None

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


def test_a_gemma4_assistant_drafter_given_as_the_target_is_named_a_drafter(tmp_path):
    """Google's assistant drafters carry a Gemma-4 model_type and width, so they once read as a
    target; each side now says which it is."""
    from dspark.modeldir import drafter_format

    config = {"model_type": "gemma4_assistant", "hidden_size": 256, "backbone_hidden_size": 2560}
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(DsparkError, match="is a drafter, not a target model"):
        gemma4.check_target_dir(tmp_path, config)
    assert drafter_format({**config, "model_type": "gemma4_unified_assistant"}) == "gemma4-assistant"
    with pytest.raises(DsparkError, match="Gemma-4 assistant"):  # an assistant of a model type not known yet
        drafter_format({"architectures": ["Gemma5AssistantModel"]})
    assert gemma4.GEMMA4_TYPES == ("gemma4", "gemma4_text", "gemma4_unified")  # no assistant among targets

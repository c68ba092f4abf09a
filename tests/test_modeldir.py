"""A model directory before loading (``dspark.modeldir``): the memory a model may take is Metal's
recommended working set where MLX computes on a Mac's GPU, else the machine's (a load refused past
it: ``test_real_layouts.py``); pickled weights refused."""

from __future__ import annotations

import sys

import mlx.core as mx
import pytest

from dspark import modeldir
from dspark.errors import DsparkError


def test_the_memory_budget_is_metals_working_set_exactly_where_mlx_computes_on_a_macs_gpu():
    gpu_mac = sys.platform == "darwin" and mx.default_device().type == mx.gpu
    budget, limit = modeldir.memory_budget()
    if gpu_mac:
        assert budget == mx.device_info()["max_recommended_working_set_size"] and "Metal" in limit
    else:
        assert modeldir.metal_working_set() is None
        assert budget == modeldir.machine_memory() and "this machine has" in limit


def test_only_a_directory_with_pickles_is_said_to_hold_pickled_weights(tmp_path):
    """The check once took a glob's generator for a match, so a directory with no weights at all
    was said to hold pickled ones."""
    from dspark.modeldir import refuse_code

    (tmp_path / "config.json").write_text("{}")
    refuse_code(tmp_path, {})  # no weights at all: not this check's sentence
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(DsparkError, match="pickled weights"):
        refuse_code(tmp_path, {})

"""A model directory's budget (``dspark.modeldir``): the memory a model may take is Metal's
recommended working set where MLX computes on a Mac's GPU, else the machine's. A load refused
past it: ``test_real_layouts.py``."""

from __future__ import annotations

import sys

import mlx.core as mx

from dspark import modeldir


def test_the_memory_budget_is_metals_working_set_exactly_where_mlx_computes_on_a_macs_gpu():
    gpu_mac = sys.platform == "darwin" and mx.default_device().type == mx.gpu
    budget, limit = modeldir.memory_budget()
    if gpu_mac:
        assert budget == mx.device_info()["max_recommended_working_set_size"] and "Metal" in limit
    else:
        assert modeldir.metal_working_set() is None
        assert budget == modeldir.machine_memory() and "this machine has" in limit

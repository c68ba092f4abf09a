"""Token-for-token equality of greedy speculative and plain decoding, as the device allows.

On the CPU the target's one-row decode and its many-row verify give the same float32 logits
here, and the tests demand identical output. On a GPU (Metal on a Mac, CUDA) a one-row product
and a many-row product run different kernels that sum in different orders, so even float32
logits differ in their last bits, and where the target's two best tokens are that close the two
paths can pick different ones. There a first difference passes only if ``dspark.lossless`` judges
it a numerical tie of the target (its strict test: the target's own clean evaluations, never the
runs' drift), and it is reported as a warning; any other difference fails as on the CPU.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import mlx.core as mx

from dspark import lossless


def on_gpu() -> bool:
    return mx.default_device().type == mx.gpu


def assert_same_greedy(target, prompt_ids, speculative, plain) -> None:
    speculative, plain = list(speculative), list(plain)
    if speculative == plain:
        return
    assert on_gpu(), f"greedy output differs from plain decoding on the CPU: {speculative} != {plain}"
    run = lambda tokens: SimpleNamespace(tokens=tokens, prompt_tokens=list(prompt_ids), token_logprobs=())
    verdict = lossless.compare(target, run(speculative), run(plain))
    assert verdict.lossless, verdict.explain()
    warnings.warn(f"on the GPU: {verdict.explain()}", stacklevel=2)

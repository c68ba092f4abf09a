"""Tiny random Gemma-4 targets built in code (no downloads), float32, and the wrapping-window cases the
engine's tests decode (with plain greedy's tokens to compare against)."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.models import gemma4_text

from dspark import Target
from dspark.clock import Clock
from dspark.costs import Costs


def tiny_args(window: int = 16, shared: int = 0, per_layer: int = 0, layers: int = 6, vocab: int = 64, **kw):
    base = dict(
        model_type="gemma4_text",
        hidden_size=64,
        num_hidden_layers=layers,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        global_head_dim=32,
        vocab_size=vocab,
        vocab_size_per_layer_input=vocab,
        num_kv_shared_layers=shared,
        hidden_size_per_layer_input=per_layer,
        sliding_window=window,
        sliding_window_pattern=3,
        max_position_embeddings=4096,
        final_logit_softcapping=30.0,
        tie_word_embeddings=True,
    )
    base.update(kw)
    return gemma4_text.ModelArgs.from_dict(base)


def tiny_model(seed: int = 0, scale: float = 1.0, **kw):
    mx.random.seed(seed)
    model = gemma4_text.Model(tiny_args(**kw))
    if scale != 1.0:
        # Sharper random logits make greedy continuations less flat (more like a trained model).
        model.model.embed_tokens.weight = model.model.embed_tokens.weight * scale
    mx.eval(model.parameters())
    return model


def tiny_target(seed: int = 0, **kw) -> Target:
    return Target(tiny_model(seed, **kw))


PROMPT = [5, 9, 11, 3, 7, 21, 2]
#: Targets whose sliding window wraps several times in five windows of output; the second also
#: shares K/V between layers and has per-layer inputs.
WRAPPING = {"sliding16": dict(window=16), "sliding24-kvshared-perlayer": dict(window=24, shared=2, per_layer=8)}
#: A machine where verifying more rows costs more and more: auto must trade width for time.
STEEP = Costs(verify_ms=(2.0, 2.4, 3.0, 4.0, 5.5, 7.5, 10.0), draft_ms=2.0, step_ms=1.5)


class PricedClock(Clock):
    """``auto``'s clock in tests (conftest installs it): every round and plain step takes exactly
    what the costs price it at, so a test's decisions follow its made-up costs, never this
    machine's noise."""

    def round_took(self, measured_ms: float, priced_ms: float) -> float:
        return super().round_took(priced_ms, priced_ms)

    def step_took(self, measured_ms: float, priced_ms: float) -> float:
        return super().step_took(priced_ms, priced_ms)


class ScriptedClock(Clock):
    """A machine that gets busy: from the ``busy_from``-th timed round or step to the
    ``busy_until``-th, every round takes ``factor`` times its price (plain steps their price)."""

    busy_from, busy_until, factor = 0, 0, 1.0

    def __init__(self):
        super().__init__()
        self.timed = 0

    def _factor(self) -> float:
        self.timed += 1
        return self.factor if self.busy_from <= self.timed < self.busy_until else 1.0

    def round_took(self, measured_ms: float, priced_ms: float) -> float:
        return super().round_took(priced_ms * self._factor(), priced_ms)

    def step_took(self, measured_ms: float, priced_ms: float) -> float:
        self._factor()
        return super().step_took(priced_ms, priced_ms)


def wrapping_case(name: str):
    """``WRAPPING[name]``'s target, an output length of five windows, and plain mlx-lm greedy's
    tokens after ``PROMPT`` for that length: what the engine's output must equal."""
    kw = WRAPPING[name]
    target = tiny_target(seed=0, scale=0.15, vocab=96, **kw)
    n = 5 * kw["window"]
    return target, n, [tok for tok, _ in generate_step(mx.array(PROMPT), target.model, max_tokens=n)]


TEXT = (
    "def add(a, b):\n    return a + b\n\n"
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
    "for i in range(10):\n    print(i, add(i, i))\n"
)


def write_tokenizer(path, vocab: int = 300) -> None:
    """A byte-level BPE tokenizer.json that mlx-lm loads, with Gemma's <mask> at id 4."""
    import json

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([TEXT] * 4, trainer)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": "<eos>",
                "bos_token": "<bos>",
                "pad_token": "<pad>",
                "unk_token": "<unk>",
                "mask_token": "<mask>",
            }
        )
    )


def write_tiny_target_dir(path, seed: int = 0, **kw):
    """A Gemma-4 target directory (config.json, model.safetensors, tokenizer) that
    ``dspark.load_target`` and ``mlx_lm.load`` accept."""
    import json
    from pathlib import Path

    from mlx.utils import tree_flatten

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    kw.setdefault("vocab", 300)
    kw.setdefault("scale", 0.15)
    model = tiny_model(seed, **kw)
    config = {k: v for k, v in vars(model.args).items()}
    config["eos_token_id"] = 1
    (path / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(model.parameters())))
    write_tokenizer(path, vocab=kw["vocab"])
    return path

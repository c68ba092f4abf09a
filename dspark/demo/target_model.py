"""The demo target's model, data order, evaluation and files (used by ``dspark.demo.pretrain``).

The demo target is a tiny Gemma-4-architecture LM (``gemma4_text``) trained from scratch on the
Python standard library source (:mod:`dspark.corpus`), saved as a plain mlx-lm checkpoint
directory that ``mlx_lm.load(dir)`` rebuilds exactly.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from functools import partial
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import mlx_lm
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.models import gemma4_text

from ..errors import DsparkError
from ..files import atomic_write, save_safetensors, write_text
from ..modeldir import read_header
from ..reading import parse_json
from .bpe import BOS_ID, EOS_ID, MASK_ID, PAD_ID, TOKENIZER_FILES, VOCAB_SIZE

#: The demo target's shape: Gemma-4's proportions in small. 12 layers, five sliding-window layers
#: (window 64, small so that ordinary generations cross it) to each global one, as Gemma 4's 5:1
#: pattern; 256 wide, so that plain decoding stays interactive on two CPU cores; positions up to
#: 4,096 (it trains on windows of up to 2,048).
MODEL_ARGS = dict(
    model_type="gemma4_text",
    hidden_size=256,
    num_hidden_layers=12,
    intermediate_size=1024,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=64,
    global_head_dim=64,
    sliding_window=64,
    sliding_window_pattern=6,
    num_kv_shared_layers=0,
    hidden_size_per_layer_input=0,
    vocab_size=VOCAB_SIZE,
    vocab_size_per_layer_input=VOCAB_SIZE,
    final_logit_softcapping=30.0,
    tie_word_embeddings=True,
    attention_k_eq_v=False,
    enable_moe_block=False,
    use_double_wide_mlp=False,
    max_position_embeddings=4096,
    pad_token_id=PAD_ID,
)

CKPT_DIR = ".ckpt"
CKPT_FILE = "checkpoint.safetensors"


# ----------------------------------------------------------------------------- model


def model_config(model_args: dict | None = None) -> dict:
    """The full ``config.json`` of a model with these ModelArgs fields (default ``MODEL_ARGS``):
    every field spelled out (so ``mlx_lm.load`` never falls back to a default that differs from
    the trained model) plus the token ids."""
    args = gemma4_text.ModelArgs(**(model_args or MODEL_ARGS))
    config = dataclasses.asdict(args)
    config.update(
        architectures=["Gemma4ForCausalLM"],
        eos_token_id=EOS_ID,
        bos_token_id=BOS_ID,
        pad_token_id=PAD_ID,
        mask_token_id=MASK_ID,
        torch_dtype="float32",
    )
    return config


def build_model(config: dict | None = None) -> gemma4_text.Model:
    config = config or model_config()
    model = gemma4_text.Model(gemma4_text.ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(v.size for _, v in tree_flatten(model.parameters()))


def loss_fn(model, x, y):
    return nn.losses.cross_entropy(model(x), y, reduction="mean")


# ----------------------------------------------------------------------------- data


class Batches:
    """Training windows, in an order that is a pure function of (seed, step).

    The token stream is cut into windows of ``seq_len + 1`` tokens (consecutive windows share
    one token, so every token is a target once). Epoch ``e`` visits the windows in the
    permutation drawn from ``numpy.random.default_rng([seed, e])``; batch ``s`` holds
    samples ``s*batch .. (s+1)*batch - 1`` of that endless sequence. Resuming therefore needs
    only the seed and the step.
    """

    def __init__(self, ids: np.ndarray, seq_len: int, batch: int, seed: int):
        self.ids, self.seq_len, self.batch, self.seed = ids, seq_len, batch, seed
        self.n = (len(ids) - 1) // seq_len
        if self.n < 1:
            raise ValueError("training corpus is shorter than one sequence")
        self._perm_epoch, self._perm = -1, None

    def _order(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.n)
            self._perm_epoch = epoch
        return self._perm

    def __call__(self, step: int) -> tuple[mx.array, mx.array]:
        rows = []
        for g in range(step * self.batch, (step + 1) * self.batch):
            w = int(self._order(g // self.n)[g % self.n])
            rows.append(self.ids[w * self.seq_len : w * self.seq_len + self.seq_len + 1])
        arr = np.stack(rows).astype(np.int32)
        return mx.array(arr[:, :-1]), mx.array(arr[:, 1:])


def eval_windows(ids: np.ndarray, seq_len: int, max_seqs: int) -> np.ndarray:
    """Up to ``max_seqs`` non-overlapping windows spread evenly over a token stream."""
    n = (len(ids) - 1) // seq_len
    picks = np.unique(np.linspace(0, n - 1, num=min(n, max_seqs)).round().astype(int))
    return np.stack([ids[w * seq_len : w * seq_len + seq_len + 1] for w in picks]).astype(np.int32)


def evaluate(model, windows: np.ndarray, batch: int = 16) -> float:
    """Mean next-token loss (nats/token) over the windows."""
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        chunk = windows[i : i + batch]
        x, y = mx.array(chunk[:, :-1]), mx.array(chunk[:, 1:])
        loss = nn.losses.cross_entropy(model(x), y, reduction="sum")
        total += loss.item()
        count += y.size
    return total / max(count, 1)


# ----------------------------------------------------------------------------- checkpoints


def lr_schedule(lr: float, steps: int, warmup: int):
    """Linear warm-up to ``lr``, then cosine decay to ``lr / 10`` at ``steps``."""
    warmup = max(1, min(warmup, steps - 1)) if steps > 1 else 1
    return optim.join_schedules(
        [optim.linear_schedule(lr * 0.01, lr, warmup), optim.cosine_decay(lr, max(1, steps - warmup), lr * 0.1)],
        [warmup],
    )


def save_checkpoint(path: Path, model, optimizer, *, step: int, meta: dict) -> None:
    arrays = {f"model.{k}": v for k, v in tree_flatten(model.parameters())}
    arrays.update({f"opt.{k}": v for k, v in tree_flatten(optimizer.state)})
    # RNG state: MLX's generator is only used to initialise the weights (no dropout), and
    # the data order is a pure function of (seed, phase, step) -- see Batches -- so the seed
    # and the next step are the whole random state of a run.
    rng = {"data_seed": meta["recipe"]["seed"], "next_step": step}
    metadata = {"step": str(step), "rng": json.dumps(rng), "meta": json.dumps(meta)}
    save_safetensors(path, arrays, metadata)


def load_checkpoint(path: Path, model, optimizer) -> tuple[int, dict]:
    """The step and metadata of a pretraining checkpoint, its weights and optimizer state loaded;
    the file is checked whole first (its header, a step that counts updates, bounded metadata)."""
    read_header(path)
    arrays, metadata = mx.load(str(path), return_metadata=True)
    step = metadata.get("step", "")
    meta = parse_json(metadata.get("meta", ""), f"{path} (its metadata)")
    if not step.isdigit() or int(step) > 10_000_000 or not isinstance(meta, dict):
        raise DsparkError(
            f"{path} is not a readable pretraining checkpoint (step {step[:20]!r}): remove it to start over"
        )
    model.load_weights([(k[6:], v) for k, v in arrays.items() if k.startswith("model.")])
    optimizer.state = tree_unflatten([(k[4:], v) for k, v in arrays.items() if k.startswith("opt.")])
    mx.eval(model.parameters(), optimizer.state)
    return int(step), meta


def save_model(model, config: dict, *, tok_dir: Path, out_dir: Path, extra_files: dict) -> None:
    """Write the final model directory. Every file goes to a hidden temporary name first and is
    then renamed into place (``config.json`` last), so an interrupted run never leaves a truncated
    file behind, nor a visible half-written one."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if tok_dir.resolve() != out_dir.resolve():
            atomic_write(out_dir / name, partial(shutil.copyfile, tok_dir / name))
    save_safetensors(out_dir / "model.safetensors", dict(tree_flatten(model.parameters())), {"format": "mlx"})
    for name, text in extra_files.items():
        write_text(out_dir / name, text)
    write_text(out_dir / "config.json", json.dumps(config, indent=2) + "\n")


def verify_saved(out_dir: Path, model, sample_text: str) -> dict:
    """Reload ``out_dir`` with plain ``mlx_lm.load`` and check it is the same model (same
    logits) with a tokenizer that round-trips text. Raises ``RuntimeError`` if not."""
    loaded, tok = mlx_lm.load(str(out_dir))
    ids = tok.encode(sample_text)
    if tok.decode(ids) != sample_text:
        raise RuntimeError("saved tokenizer does not round-trip text")
    if ids and ids[0] == BOS_ID:
        raise RuntimeError("saved tokenizer prepends <bos>; expected nothing prepended")
    if tok.eos_token_id != EOS_ID or tok.bos_token_id != BOS_ID:
        raise RuntimeError("saved tokenizer has the wrong <eos>/<bos> ids")
    x = mx.array([ids[:128]])
    diff = mx.abs(loaded(x) - model(x)).max().item()
    if not diff < 1e-4:
        raise RuntimeError(f"reloaded model differs from the trained one (max |dlogit| {diff})")
    return {"max_abs_logit_diff": diff}

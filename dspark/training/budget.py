"""What a training run's shapes ask of the target and the machine, checked before anything is
allocated: a sequence longer than the positions the target holds, an array past what MLX can
index, or a step that needs more memory than there is, is one sentence naming the options to
lower, never a crash deep inside the first target forward.

The estimate is a model of one step, deliberately on the generous side: the frozen target's
forward over the batch's sequences (its activations and attention scores), the features kept
for them, the drafter's forward and backward over its anchors (context keys and values gathered
per anchor, attention scores, masks, logits over the vocabulary), and self-distillation's
decoding batch with its caches.
"""

from __future__ import annotations

import math
import os

from ..config import default_taps
from ..errors import DsparkError
from ..modeldir import REFUSE_SHARE, gib, loaded_bytes, memory_budget

#: The most elements one MLX array is given here (its sizes are 32-bit in places).
MAX_ELEMENTS = 2**31 - 1
#: Rows self-distillation decodes at once (``distill.greedy_continuations``' batch).
DISTILL_ROWS = 64
FLOAT = 4  # bytes: training runs in float32


def target_positions(target) -> int | None:
    config = target.config or {}
    limit = config.get("max_position_embeddings") or (config.get("text_config") or {}).get("max_position_embeddings")
    return limit if isinstance(limit, int) else None


def sequence_width(settings) -> int:
    """The longest training sequence: a long prompt and its continuation, when there are long prompts."""
    s = settings
    if s.self_distill and s.long_prompts > 0 and s.long_prompt_len > s.prompt_len:
        return max(s.seq_len, s.long_prompt_len + s.seq_len - s.prompt_len)
    return s.seq_len


def step_arrays(target, *, block_size: int, layers: int, taps: int, settings) -> dict[str, int]:
    """Elements of the largest arrays of one training step, by what they hold."""
    d, s = target.dims, settings
    A, S, G = s.batch_anchors, sequence_width(s), block_size
    n_seq = math.ceil(A / s.anchors_per_seq)
    return {
        "the target's attention scores": n_seq * d.num_heads * S * S,
        "the target's activations": n_seq * S * max(d.hidden_size * 8, d.intermediate_size * 3),
        "the batch's target features": n_seq * S * (taps + 1) * d.hidden_size,
        "the drafter's context keys and values": layers * 2 * A * S * d.num_kv_heads * d.head_dim,
        "the drafter's attention scores": layers * A * d.num_heads * (G + 1) * (S + G + 1),
        "the drafter's logits": 4 * A * G * d.vocab_size,
        "self-distillation's caches": (
            DISTILL_ROWS * S * d.num_layers * 2 * d.num_kv_heads * d.head_dim if s.self_distill else 0
        ),
    }


def check_training_shapes(target, *, block_size: int, layers: int, tap_layers, settings, say=None) -> None:
    """Refuse (DsparkError) a run whose sequences the target cannot hold or whose step would not
    fit in memory, naming the options that size it: a drafter of ``layers`` layers drafting
    ``block_size`` tokens from ``tap_layers`` (empty: the default taps), trained with
    ``settings``. ``DSPARK_IGNORE_MEMORY=1`` skips the memory part (not the others)."""
    s = settings
    positions = target_positions(target)
    if positions is not None and s.seq_len > positions:
        raise DsparkError(
            f"--seq-len {s.seq_len:,} is longer than the {positions:,} positions this target holds: "
            f"choose at most {positions:,}"
        )
    if positions is not None and sequence_width(s) > positions:
        raise DsparkError(
            f"--long-prompt-len {s.long_prompt_len:,} and its continuation make sequences of "
            f"{sequence_width(s):,} tokens, more than the {positions:,} positions this target holds"
        )
    taps = len(tap_layers) or len(default_taps(target.dims.num_layers))
    arrays = step_arrays(target, block_size=block_size, layers=layers, taps=taps, settings=s)
    what, largest = max(arrays.items(), key=lambda kv: kv[1])
    options = f"--seq-len {s.seq_len:,}, --batch {s.batch_anchors:,}, --anchors-per-seq {s.anchors_per_seq:,}"
    if largest > MAX_ELEMENTS:
        raise DsparkError(
            f"training with {options} would make {what} one array of {largest:,} numbers, more than "
            f"MLX can index: lower them"
        )
    budget = memory_budget()
    if budget is None or os.environ.get("DSPARK_IGNORE_MEMORY"):
        return
    # activations are kept for the backward pass and the gradients are as large again
    needed = FLOAT * (
        3 * sum(v for k, v in arrays.items() if k.startswith("the drafter"))
        + sum(v for k, v in arrays.items() if not k.startswith("the drafter"))
    )
    total, limit = budget
    if needed + loaded_bytes() > REFUSE_SHARE * total:
        raise DsparkError(
            f"training with {options} needs about {gib(needed)} of memory for one step ({what} the most) "
            f"and {limit}: lower them (set DSPARK_IGNORE_MEMORY=1 to try anyway)"
        )


__all__ = ["MAX_ELEMENTS", "check_training_shapes", "step_arrays", "target_positions"]

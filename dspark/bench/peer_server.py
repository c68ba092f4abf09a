"""A peer package's speculative loop, timed trial by trial for ``dspark bench``.

    PEER_PYTHON peer_server.py dflash|mlx-dspark TARGET_DIR DRAFTER_DIR [OPENBLAS_PATH]

Runs in a Python that has the peer installed (the project's ``.venv-peers``, ``make peers``),
never in the project's own, and imports nothing from ``dspark``. It loads the target and the
drafter once, prints ``{"ready": true}``, then answers each request line
``{"ids": [...], "max_tokens": N, "seed": S}`` with one line: the tokens, the committed tokens of
each round and the decode time. Peers take the first token from the prompt pass, so their rate
is the tokens after the first over the time after it (mlx-lm's own definition); the reported
``decode_seconds`` is scaled to all N tokens at that rate. Greedy only.

- ``dflash``: z-lab's ``dflash.model_mlx`` (``load`` / ``load_draft`` / ``stream_generate``);
- ``mlx-dspark``: ``mlx_dspark.generate.speculative_generate`` with its drafter unquantized, every
  draft verified and no n-gram drafts (its defaults quantize, cap and mix), on mlx-vlm's
  Gemma-4 model holding the same weights (mlx-dspark runs Gemma-4 only through mlx-vlm).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time


def zlab_load(target_dir: str, drafter_dir: str):
    """z-lab's target and drafter from local folders (``load_draft`` takes hub names only, so
    ``snapshot_download`` is pointed at the folder for the call): (model, draft, tokenizer)."""
    import dflash.model_mlx as zl

    model, tokenizer = zl.load(target_dir)
    original = zl.snapshot_download
    zl.snapshot_download = lambda repo, **kw: repo if os.path.isdir(repo) else original(repo, **kw)
    try:
        draft = zl.load_draft(drafter_dir)
    finally:
        zl.snapshot_download = original
    return model, draft, tokenizer


def mlxvlm_target(target_dir: str):
    """mlx-vlm's gemma4.Model holding the mlx-lm target's weights (a 1-layer unused vision
    tower): mlx-dspark runs Gemma-4 only through mlx-vlm."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm import load
    from mlx_vlm.models.gemma4 import Model
    from mlx_vlm.models.gemma4.config import ModelConfig, TextConfig, VisionConfig

    lm, tokenizer = load(target_dir)
    cfg = {**vars(lm.args)}
    vision = VisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=1,
                          num_key_value_heads=1, head_dim=16, global_head_dim=16)
    vlm = Model(ModelConfig(text_config=TextConfig.from_dict(cfg), vision_config=vision,
                            vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"]))
    vlm.language_model.load_weights(list(tree_flatten(lm.parameters())))
    mx.eval(vlm.parameters())
    return vlm, tokenizer


def load_dflash(target_dir: str, drafter_dir: str):
    import dflash.model_mlx as zl
    import mlx.core as mx

    model, draft, tokenizer = zlab_load(target_dir, drafter_dir)

    def run(ids, max_tokens):
        committed, times = [], []
        for r in zl.stream_generate(model, draft, tokenizer, mx.array(ids), max_tokens=max_tokens, temperature=0.0):
            times.append(time.perf_counter())
            committed.append(list(r.tokens))
        return committed, times[0], times[-1]

    return run


def load_mlx_dspark(target_dir: str, drafter_dir: str):
    import mlx_dspark.generate as G
    from mlx_dspark.load import load_drafter
    from mlx_dspark.target import Target

    vlm, tokenizer = mlxvlm_target(target_dir)
    target = Target(vlm, tokenizer)
    drafter, _ = load_drafter(drafter_dir, quantize=False)

    def run(ids, max_tokens):
        res = G.speculative_generate(target, tokenizer, drafter, prompt_ids=ids, max_new_tokens=max_tokens,
                                     max_draft_tokens=None, lookup_drafts=False, confidence_threshold=0.0,
                                     cap_controller=None, temperature=0.0)
        tokens = list(res.token_ids)
        committed, i = [tokens[:1]], 1
        for n in res.accept_lengths:
            committed.append(tokens[i : i + n])
            i += n
        return committed, 0.0, res.decode_seconds

    return run


def main() -> None:
    kind, target_dir, drafter_dir, *rest = sys.argv[1:]
    if rest and rest[0]:
        ctypes.CDLL(rest[0], mode=os.RTLD_GLOBAL)  # the same BLAS as the benchmark's own process, before mlx
    try:
        run = {"dflash": load_dflash, "mlx-dspark": load_mlx_dspark}[kind](target_dir, drafter_dir)
        print(json.dumps({"ready": True}), flush=True)
    except Exception as e:  # noqa: BLE001  (reported to the benchmark, which goes on without this arm)
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        return
    import mlx.core as mx

    for line in sys.stdin:
        req = json.loads(line)
        try:
            mx.reset_peak_memory()
            start = time.perf_counter()
            committed, t_first, t_last = run(req["ids"], req["max_tokens"])
            tokens = [t for c in committed for t in c]
            n = len(tokens)
            window = t_last - t_first  # the time after the first token
            rounds = committed[1:]
            out = {"tokens": n, "token_ids": tokens, "decode_seconds": window * n / max(n - 1, 1),
                   "ttft_seconds": (t_first - start) if t_first else None, "rounds": len(rounds),
                   "accepted": [len(c) - 1 for c in rounds],
                   "draft_seconds": 0.0, "verify_seconds": 0.0, "peak_memory_bytes": int(mx.get_peak_memory())}
        except Exception as e:  # noqa: BLE001
            out = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

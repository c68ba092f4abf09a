"""A peer package's speculative loop, timed trial by trial for ``dspark bench``.

    PEER_PYTHON peer_server.py dflash|dflash-mlx|mlx-dspark TARGET_DIR DRAFTER_DIR [OPENBLAS_PATH]
    PEER_PYTHON peer_server.py mlx-vlm TARGET_DIR DRAFTER_DIR OPENBLAS_PATH FORMAT DRAFTS

Runs in a Python that has the peer installed (the project's ``.venv-peers``, ``make peers``),
never in the project's own, and imports nothing from ``dspark``. It loads the target and the
drafter once, prints ``{"ready": true}``, then answers each request line
``{"ids": [...], "max_tokens": N, "seed": S}`` with one line: the tokens, the committed tokens of
each round and the decode time. Peers take the first token from the prompt pass, so their rate
is the tokens after the first over the time after it (mlx-lm's own definition); the reported
``decode_seconds`` is scaled to all N tokens at that rate. Greedy only.

- ``dflash``: z-lab's ``dflash.model_mlx`` (``load`` / ``load_draft`` / ``stream_generate``);
- ``dflash-mlx``: bstnxbt's ``dflash_mlx`` runtime (``load_runtime_bundle`` /
  ``stream_dflash_generate``) with its verify mode ``dflash`` (every draft verified; its default
  ``adaptive`` shortens blocks after rejections), no prefix cache and no draft quantization;
- ``mlx-dspark``: ``mlx_dspark.generate.speculative_generate`` with its drafter unquantized, every
  draft verified and no n-gram drafts (its defaults quantize, cap and mix), on mlx-vlm's
  Gemma-4 model holding the same weights (mlx-dspark runs Gemma-4 only through mlx-vlm);
- ``mlx-vlm``: mlx-vlm's own loop (``generate.ar.generate_step`` with ``draft_model`` and
  ``draft_kind``) on its ``gemma4.Model`` holding the target's weights, the drafter loaded by its
  ``speculative.drafters.load_drafter`` (the drafter's ``FORMAT`` in dspark's words picks the
  kind: ``mtp`` for the Gemma-4 assistant, ``eagle3`` for EAGLE-3, else mlx-vlm's own choice from
  the config: ``dflash`` for z-lab, DFlash 2 and DSpark heads), ``DRAFTS`` drafts every round
  (its block, ``draft_block_size``, counts the bonus token too; its loop otherwise grows and
  shrinks the block with acceptance). It reports each round's drafts (``widths``).
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def zlab_load(target_dir: str, drafter_dir: str):
    """z-lab's target and drafter from local folders (``load_draft`` takes hub names only, so
    ``snapshot_download`` is pointed at the folder for the call): (model, draft, tokenizer)."""
    import dflash.model_mlx as zl  # noqa: PLC0415 (optional: the peer package)

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
    import mlx.core as mx  # noqa: PLC0415 (ordered: after the BLAS is loaded)
    from mlx.utils import tree_flatten  # noqa: PLC0415 (ordered: after the BLAS is loaded)
    from mlx_lm import load  # noqa: PLC0415 (ordered: after the device is chosen)
    from mlx_vlm.models.gemma4 import Model  # noqa: PLC0415 (optional: mlx-vlm)
    from mlx_vlm.models.gemma4.config import ModelConfig, TextConfig, VisionConfig  # noqa: PLC0415 (optional: mlx-vlm)

    lm, tokenizer = load(target_dir)
    cfg = {**vars(lm.args)}
    vision = VisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=16,
        global_head_dim=16,
    )
    vlm = Model(
        ModelConfig(
            text_config=TextConfig.from_dict(cfg),
            vision_config=vision,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
        )
    )
    vlm.language_model.load_weights(list(tree_flatten(lm.parameters())))
    mx.eval(vlm.parameters())
    return vlm, tokenizer


def load_dflash(target_dir: str, drafter_dir: str):
    import dflash.model_mlx as zl  # noqa: PLC0415 (optional: the peer package)
    import mlx.core as mx  # noqa: PLC0415 (ordered: after the BLAS is loaded)

    model, draft, tokenizer = zlab_load(target_dir, drafter_dir)

    def run(ids, max_tokens):
        committed, times = [], []
        for r in zl.stream_generate(model, draft, tokenizer, mx.array(ids), max_tokens=max_tokens, temperature=0.0):
            times.append(time.perf_counter())
            committed.append(list(r.tokens))
        return committed, times[0], times[-1]

    return run


def load_dflash_mlx(target_dir: str, drafter_dir: str):
    from dflash_mlx.engine.events import SummaryEvent, TokenEvent  # noqa: PLC0415 (optional: the peer package)
    from dflash_mlx.runtime import stream_dflash_generate  # noqa: PLC0415 (optional: the peer package)
    from dflash_mlx.runtime.bundle import load_runtime_bundle  # noqa: PLC0415 (optional: the peer package)
    from dflash_mlx.runtime.context import build_offline_runtime_context  # noqa: PLC0415 (optional: the peer package)

    context = build_offline_runtime_context(verify_mode="dflash")
    b = load_runtime_bundle(
        model_ref=target_dir, draft_ref=_with_rope_theta(drafter_dir), draft_quant="none", verify_config=context.verify
    )

    def run(ids, max_tokens):
        tokens, times, accepted = [], [], []
        events = stream_dflash_generate(
            target_model=b.target_model,
            target_ops=b.target_ops,
            tokenizer=b.tokenizer,
            draft_model=b.draft_model,
            draft_backend=b.draft_backend,
            prompt="",
            prompt_tokens_override=list(ids),
            max_new_tokens=max_tokens,
            stop_token_ids=[],
            publish_generation_snapshot=False,
            runtime_context=context,
        )
        for ev in events:
            if isinstance(ev, TokenEvent):
                times.append(time.perf_counter())
                tokens.append(int(ev.token_id))
            elif isinstance(ev, SummaryEvent):
                accepted = list(ev.acceptance_history)  # accepted drafts per cycle; a cycle commits one more
        committed, i = [tokens[:1]], 1  # the first token comes from the prompt pass
        for a in accepted:
            committed.append(tokens[i : i + a + 1])
            i += a + 1
        return [c for c in committed if c], times[0], times[-1]

    return run


def _with_rope_theta(drafter_dir: str) -> str:
    """dflash-mlx reads RoPE only from a top-level ``rope_theta``; Gemma-era z-lab heads nest it
    under ``rope_parameters``. Such a head is handed over with the value copied up; anything
    else as it is."""
    config = json.loads((Path(drafter_dir) / "config.json").read_text())
    theta = (config.get("rope_parameters") or {}).get("rope_theta")
    if "rope_theta" in config or theta is None:
        return drafter_dir
    return _relabelled(drafter_dir, {**config, "rope_theta": theta}, "dflash-mlx-")


def _with_taps_as_read(drafter_dir: str) -> str:
    """mlx-dspark reads a speculators head's ``aux_hidden_state_layer_ids`` as the tapped layers
    themselves, one below vLLM's numbering (id i is the output of layer i - 1), which dspark
    follows: such a head is handed over with every id less one, so both tap the same layers. A
    config dspark wrote before it followed vLLM's numbering (its ``dspark.trained_as`` taps equal
    the ids), and anything else, as it is."""
    config = json.loads((Path(drafter_dir) / "config.json").read_text())
    ids = config.get("aux_hidden_state_layer_ids")
    trained = ((config.get("dspark") or {}).get("trained_as") or {}).get("tap_layers")
    if "speculators_config" not in config or not isinstance(ids, list) or list(trained or []) == ids:
        return drafter_dir
    return _relabelled(drafter_dir, {**config, "aux_hidden_state_layer_ids": [i - 1 for i in ids]}, "mlx-dspark-")


def _relabelled(drafter_dir: str, config: dict, prefix: str) -> str:
    """A temporary folder (removed at exit) holding ``config`` as config.json and links to the
    drafter's other files: a peer reads the same weights under the config it understands."""
    dst = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, dst, ignore_errors=True)
    for f in Path(drafter_dir).iterdir():
        if f.name != "config.json":
            (dst / f.name).symlink_to(f.resolve())
    (dst / "config.json").write_text(json.dumps(config))
    return str(dst)


def load_mlx_dspark(target_dir: str, drafter_dir: str):
    import mlx_dspark.generate as G  # noqa: PLC0415 (optional: the peer package)
    from mlx_dspark.load import load_drafter  # noqa: PLC0415 (optional: the peer package)
    from mlx_dspark.target import Target  # noqa: PLC0415 (optional: the peer package)

    vlm, tokenizer = mlxvlm_target(target_dir)
    target = Target(vlm, tokenizer)
    drafter, _ = load_drafter(_with_taps_as_read(drafter_dir), quantize=False)

    def run(ids, max_tokens):
        res = G.speculative_generate(
            target,
            tokenizer,
            drafter,
            prompt_ids=ids,
            max_new_tokens=max_tokens,
            max_draft_tokens=None,
            lookup_drafts=False,
            confidence_threshold=0.0,
            cap_controller=None,
            temperature=0.0,
        )
        tokens = list(res.token_ids)
        committed, i = [tokens[:1]], 1
        for n in res.accept_lengths:
            committed.append(tokens[i : i + n])
            i += n
        return committed, 0.0, res.decode_seconds

    return run


#: dspark's name of a drafter format -> mlx-vlm's draft kind (a format not here: mlx-vlm's own
#: choice from the config, ``resolve_drafter_kind``)
MLX_VLM_KINDS = {"gemma4-assistant": "mtp", "eagle3": "eagle3"}


def load_mlx_vlm(target_dir: str, drafter_dir: str, fmt: str, drafts: int):
    import mlx.core as mx  # noqa: PLC0415 (ordered: after the BLAS is loaded)
    from mlx_vlm.generate.ar import generate_step  # noqa: PLC0415 (optional: mlx-vlm)
    from mlx_vlm.speculative.drafters import load_drafter  # noqa: PLC0415 (optional: mlx-vlm)

    vlm, _ = mlxvlm_target(target_dir)
    draft, kind = load_drafter(drafter_dir, kind=MLX_VLM_KINDS.get(fmt))
    draft.prefer_requested_block_size = True  # the same drafts every round, as the other loops run

    def run(ids, max_tokens):
        tokens, times, before = [], [], len(getattr(draft, "draft_lens", None) or [])
        steps = generate_step(
            mx.array([ids]),
            vlm,
            None,
            None,
            max_tokens=max_tokens,
            sampler=lambda x: mx.argmax(x, axis=-1),
            draft_model=draft,
            draft_kind=kind,
            draft_block_size=drafts + 1,
            prefill_step_size=None,
        )
        for tok, _ in steps:
            times.append(time.perf_counter())
            tokens.append(int(tok if isinstance(tok, int) else mx.array(tok).reshape(-1)[0].item()))
        accepted = [int(a) for a in draft.accept_lens]  # this run's rounds (its loop resets them)
        widths = list(getattr(draft, "draft_lens", None) or [])[before:][-len(accepted) :] if accepted else []
        committed, i = [tokens[:1]], 1  # the first token comes from the prompt pass
        for a in accepted:
            committed.append(tokens[i : i + a + 1])
            i += a + 1
        rounds = [c for c in committed[1:] if c]
        return [committed[0], *rounds], times[0], times[-1], widths[: len(rounds)]

    # a drafter mlx-vlm loads may still fail at its first round (a layer it lacks): found here, at
    # load, so the benchmark goes on without the arm instead of stopping at its first trial
    run([2, 3, 4, 5, 6, 7], 2 * drafts + 2)
    return run


def use_env_device() -> None:
    """DSPARK_DEVICE=cpu|gpu, as dspark.device applies it, before mlx-lm is imported (its
    generation stream takes the default device of that moment)."""
    name = os.environ.get("DSPARK_DEVICE", "").strip().lower()
    if name in ("cpu", "gpu"):
        import mlx.core as mx  # noqa: PLC0415 (ordered: after the BLAS is loaded)

        mx.set_default_device(mx.cpu if name == "cpu" else mx.gpu)


def main() -> None:
    kind, target_dir, drafter_dir, *rest = sys.argv[1:]
    if rest and rest[0]:
        ctypes.CDLL(rest[0], mode=os.RTLD_GLOBAL)  # the same BLAS as the benchmark's own process, before mlx
    use_env_device()  # the peer computes where dspark does
    try:
        if kind == "mlx-vlm":
            run = load_mlx_vlm(target_dir, drafter_dir, rest[1], int(rest[2]))
        else:
            run = {"dflash": load_dflash, "dflash-mlx": load_dflash_mlx, "mlx-dspark": load_mlx_dspark}[kind](
                target_dir, drafter_dir
            )
        print(json.dumps({"ready": True}), flush=True)
    except Exception as e:  # reported to the benchmark, which goes on without this arm
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        return
    import mlx.core as mx  # noqa: PLC0415 (ordered: after the BLAS is loaded)

    for line in sys.stdin:
        req = json.loads(line)
        try:
            mx.reset_peak_memory()
            start = time.perf_counter()
            committed, t_first, t_last, *widths = run(req["ids"], req["max_tokens"])
            tokens = [t for c in committed for t in c]
            n = len(tokens)
            window = t_last - t_first  # the time after the first token
            rounds = committed[1:]
            # the rate counts every token made; the comparison with plain decoding only the first
            # max_tokens (mlx-dspark commits a whole last round, one token past the request)
            out = {
                "tokens": n,
                "token_ids": tokens[: req["max_tokens"]],
                "decode_seconds": window * n / max(n - 1, 1),
                "ttft_seconds": (t_first - start) if t_first else None,
                "rounds": len(rounds),
                "accepted": [len(c) - 1 for c in rounds],
                "draft_seconds": 0.0,
                "verify_seconds": 0.0,
                "peak_memory_bytes": int(mx.get_peak_memory()),
            }
            if widths:  # drafts verified each round, where the peer's rounds differ (mlx-vlm's last one)
                out["widths"] = widths[0]
        except Exception as e:
            out = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

"""Run a peer's own generation loop on local directories and print what it did, as JSON.

    .venv-peers/bin/python tests/peers/run_peer.py KIND TARGET_DIR DRAFTER_DIR MAX_TOKENS PROMPT_IDS...

Runs in the test-only environment ``.venv-peers`` (``make peers``), never in the project's own:
- ``zlab``: z-lab's ``dflash.model_mlx`` (``load_draft`` + ``stream_generate``). ``load_draft``
  only takes hub names, so ``snapshot_download`` is pointed at the local directory for the call;
- ``mlx-dspark``: ``mlx_dspark.load.load_drafter(quantize=False)`` and
  ``generate.speculative_generate(max_draft_tokens=None, lookup_drafts=False)`` (its defaults
  quantize the drafter, cap verification at 2 drafts and mix in n-gram drafts). mlx-dspark runs
  Gemma-4 only through mlx-vlm's model classes, so the same weights go into mlx-vlm's
  ``gemma4.Model`` (its greedy output equals mlx-lm's);
- ``zlab-dflash2``: z-lab's loop on a DFlash 2 head, at the checkpoint's ``runtime_block_size``
  when it has one (z-lab's own loop runs ``block_size`` unless told: ``stream_generate``'s
  ``block_size``);
- ``mlx-vlm-dflash2``: mlx-vlm's DFlash 2 drafter (``drafters.dflash2``: its config reader,
  model and ``sanitize``) in mlx-vlm's own round loop (``speculative.dflash._dflash_rounds``) on
  mlx-vlm's Gemma-4 holding the target's weights, its block fixed at the checkpoint's
  ``runtime_block_size`` (mlx-vlm otherwise grows and shrinks it with acceptance).

- ``mlx-vlm-mtp:BLOCK``: mlx-vlm's MTP loop with its own Gemma-4 assistant drafter, ``BLOCK``
  drafts a round, on the same mlx-vlm ``gemma4.Model``.
- ``mlx-vlm-eagle3:BLOCK``: mlx-vlm's EAGLE-3 loop (``generate.ar.generate_step``, draft kind
  ``eagle3``) with its own drafter, ``BLOCK`` drafts a round, on the same mlx-vlm ``gemma4.Model``;
  it adds, where its fallback verifier runs (a head without ``d2t``), ``verify_logits`` (each
  round's target logits) and ``stale`` (per round: a sliding cache left holding more rows than its
  window, rejected ones past its write index, after the round's rollback).
  ``mlx-vlm-eagle3:BLOCK:buffered``: the same with the target's sliding caches made mlx-vlm's
  ``BufferedRotatingKVCache`` (its MTP loop's, which rolls back exactly).

- ``mlx-vlm-mtp:BLOCK``: mlx-vlm's Gemma-4 assistant (MTP) loop (``generate.ar.generate_step``,
  draft kind ``mtp``) with its own ``Gemma4AssistantDraftModel``, ``BLOCK`` drafts every round
  (its block otherwise follows acceptance), on the same mlx-vlm ``gemma4.Model``; it adds
  ``drafts`` and ``logits``: each round's drafted ids and each of its steps' logits.

Output: {"tokens": [...], "tau": [committed per round], "round1_logits": [[...]], "first": int}.
Every peer prefills the whole prompt and takes the first token from the target alone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np

# the benchmark's peer loaders (a script of plain Python, importing nothing from dspark)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dspark" / "bench"))
from peer_server import mlxvlm_target, use_env_device, zlab_load

use_env_device()  # where dspark computes (DSPARK_DEVICE), before any mlx-lm import


def run_zlab(target_dir: str, drafter_dir: str, prompt: list[int], max_tokens: int) -> dict:
    import dflash.model_mlx as zl

    model, draft, tokenizer = zlab_load(target_dir, drafter_dir)
    calls, call = [], zl.DFlashDraftModel.__call__

    def record(self, inputs, target_hidden, cache, logits_start=0):
        logits = call(self, inputs, target_hidden, cache, logits_start)
        calls.append(logits)
        return logits

    zl.DFlashDraftModel.__call__ = record
    tokens, tau = [], []
    try:
        for r in zl.stream_generate(model, draft, tokenizer, mx.array(prompt), max_tokens=max_tokens, temperature=0.0):
            tokens += r.tokens
            if r.accepted is not None:
                tau.append(r.accepted)
    finally:
        zl.DFlashDraftModel.__call__ = call
    return {"tokens": tokens, "tau": tau, "round1_logits": np.array(calls[0][0].astype(mx.float32)).tolist()}


def run_zlab_dflash2(target_dir: str, drafter_dir: str, prompt: list[int], max_tokens: int) -> dict:
    import dflash.model_mlx as zl

    model, draft, tokenizer = zlab_load(target_dir, drafter_dir)
    runtime = json.loads((Path(drafter_dir) / "config.json").read_text())["dflash_config"].get("runtime_block_size")
    calls, compute = [], zl.DFlash2DraftModel.compute_logits

    def record(self, hidden):
        logits = compute(self, hidden)
        calls.append(logits)
        return logits

    zl.DFlash2DraftModel.compute_logits = record
    tokens, tau = [], []
    try:
        for r in zl.stream_generate(
            model, draft, tokenizer, mx.array(prompt), block_size=runtime, max_tokens=max_tokens, temperature=0.0
        ):
            tokens += r.tokens
            if r.accepted is not None:
                tau.append(r.accepted)
    finally:
        zl.DFlash2DraftModel.compute_logits = compute
    return {"tokens": tokens, "tau": tau, "round1_logits": np.array(calls[0][0].astype(mx.float32)).tolist()}


def run_mlxvlm_dflash2(target_dir: str, drafter_dir: str, prompt: list[int], max_tokens: int) -> dict:
    from mlx_vlm.speculative.dflash import _dflash_rounds
    from mlx_vlm.speculative.drafters.dflash2 import Model, ModelConfig

    vlm, _ = mlxvlm_target(target_dir)
    lm = vlm.language_model
    config = ModelConfig.from_dict(json.loads((Path(drafter_dir) / "config.json").read_text()))
    draft = Model(config)
    weights = {}
    for f in sorted(Path(drafter_dir).glob("*.safetensors")):
        weights.update(mx.load(str(f)))
    draft.load_weights(list(draft.sanitize(weights).items()))
    mx.eval(draft.parameters())
    draft.prefer_requested_block_size = True  # one block size every round, as the other loops run
    calls, logits_of = [], type(draft)._logits

    def record(self, hidden):
        out = logits_of(self, hidden)
        calls.append(out)
        return out

    type(draft)._logits = record
    cache = lm.make_cache()
    out = lm(mx.array([prompt]), cache=cache, capture_layer_ids=list(config.target_layer_ids))
    hidden = mx.concatenate(out.hidden_states, axis=-1)
    first = int(mx.argmax(out.logits[0, -1]).item())
    block = config.runtime_block_size
    tokens = [first]
    try:
        for tok, _ in _dflash_rounds(
            vlm,
            draft,
            cache,
            hidden,
            first_bonus=first,
            max_tokens=max_tokens,
            sampler=lambda x: mx.argmax(x, axis=-1),
            draft_block_size=block,
            greedy_sampling=True,
        ):
            tokens.append(int(tok))
    finally:
        type(draft)._logits = logits_of
    tau = [int(a) + 1 for a in draft.accept_lens]
    return {
        "tokens": tokens,
        "tau": tau,
        "block": block,
        "round1_logits": np.array(calls[0][0].astype(mx.float32)).tolist(),
    }


def run_mlx_dspark(target_dir: str, drafter_dir: str, prompt: list[int], max_tokens: int) -> dict:
    import mlx_dspark.generate as G
    import mlx_dspark.model as M
    from mlx_dspark.load import load_drafter
    from mlx_dspark.target import Target

    vlm, tokenizer = mlxvlm_target(target_dir)
    drafter, _ = load_drafter(drafter_dir, quantize=False)
    seen, compute_logits, sample_block = {}, M.DSparkDrafter.compute_logits, M.DSparkDrafter.sample_block

    def logits(self, hidden):
        out = compute_logits(self, hidden)
        seen.setdefault("base", out)
        seen.setdefault("hidden", hidden)
        return out

    def sample(self, base, first_prev_token):
        out = sample_block(self, base, first_prev_token)
        seen.setdefault("tokens", out)
        seen.setdefault("prev", first_prev_token)
        return out

    M.DSparkDrafter.compute_logits, M.DSparkDrafter.sample_block = logits, sample
    try:
        res = G.speculative_generate(
            Target(vlm, tokenizer),
            tokenizer,
            drafter,
            prompt_ids=prompt,
            max_new_tokens=max_tokens,
            max_draft_tokens=None,
            lookup_drafts=False,
            confidence_threshold=0.0,
            cap_controller=None,
            temperature=0.0,
        )
    finally:
        M.DSparkDrafter.compute_logits, M.DSparkDrafter.sample_block = compute_logits, sample_block
    base, prev, full = np.array(seen["base"][0].astype(mx.float32)), seen["prev"], []
    for k, tok in enumerate(seen["tokens"].tolist()):
        row = base[k].copy()
        if drafter.markov_head is not None:  # the logits drafted from: U_k plus the Markov bias of the previous token
            row += np.array(drafter.markov_head.step_bias(mx.array([prev]))[0].astype(mx.float32))
        full.append(row.tolist())
        prev = tok
    out = {"tokens": list(res.token_ids), "tau": list(res.accept_lengths), "round1_logits": full}
    if drafter.confidence_head is not None:  # round 1's confidence logits, as its adaptive truncation computes them
        drafted = seen["tokens"].tolist()
        z = drafter.confidence_logits(seen["hidden"][0], mx.array([seen["prev"]] + drafted[:-1]))
        out["round1_confidence_logits"] = np.array(z.astype(mx.float32)).reshape(-1).tolist()
    return out


def run_mlx_vlm_eagle3(
    target_dir: str, drafter_dir: str, prompt: list[int], max_tokens: int, block: int, buffered: bool = False
) -> dict:
    """mlx-vlm's EAGLE-3 loop (``generate_step`` with ``draft_kind="eagle3"``, greedy) on its own
    ``Eagle3DraftModel``: ``block`` drafts a round (its ``draft_block_size`` counts the bonus
    too; left unset it drafts one). Its verifier is its own (a draft is checked against the
    target's best token among the draft vocabulary); the round-1 logits are its drafter's."""
    from mlx_vlm.generate.ar import generate_step
    from mlx_vlm.models import cache as C
    from mlx_vlm.speculative import eagle3 as loop
    from mlx_vlm.speculative.drafters import load_drafter
    from mlx_vlm.speculative.drafters.eagle3 import eagle3 as E

    vlm, _ = mlxvlm_target(target_dir)
    draft, kind = load_drafter(drafter_dir, kind="eagle3")
    logits, call = [], E.Eagle3DraftModel._logits
    verify, commit, verified, stale = loop._eagle3_verify_target, loop.commit_speculative_round, [], []
    caches = C.make_prompt_cache(vlm.language_model)
    if buffered:
        caches = [
            C.BufferedRotatingKVCache(c.max_size, buffer_size=64) if type(c) is C.RotatingKVCache else c for c in caches
        ]

    def record(self, hidden):
        out = call(self, hidden)
        logits.append(out)
        return out

    def verify_recorded(lm, verify_input, prompt_cache, sampler, target_layer_ids):
        rows = []

        def seen(x):  # the target's logits, as the verifier samples them
            rows.append(x.reshape(-1, x.shape[-1]))
            return sampler(x)

        out = verify(lm, verify_input, prompt_cache, seen, target_layer_ids)
        verified.append(np.array(mx.concatenate(rows).astype(mx.float32)).tolist())
        return out

    def commit_recorded(model, prompt_cache, state, accepted, block_size):
        commit(model, prompt_cache, state, accepted, block_size)
        rings = [c for c in prompt_cache if type(c) is C.RotatingKVCache and c.keys is not None]
        stale.append(any(c.keys.shape[2] > max(c._idx, c.max_size) for c in rings))

    E.Eagle3DraftModel._logits = record
    loop._eagle3_verify_target, loop.commit_speculative_round = verify_recorded, commit_recorded
    tokens = []
    try:
        steps = generate_step(
            mx.array([prompt]),
            vlm,
            None,
            None,
            max_tokens=max_tokens,
            sampler=lambda x: mx.argmax(x, axis=-1),
            draft_model=draft,
            draft_kind=kind,
            draft_block_size=block + 1,
            prefill_step_size=None,
            prompt_cache=caches,
        )
        for tok, _ in steps:
            tokens.append(int(tok if isinstance(tok, int) else mx.array(tok).reshape(-1)[0].item()))
    finally:
        E.Eagle3DraftModel._logits = call
        loop._eagle3_verify_target, loop.commit_speculative_round = verify, commit
    rounds = [int(a) + 1 for a in draft.accept_lens]
    first = [np.array(x.reshape(-1, x.shape[-1])[-1].astype(mx.float32)).tolist() for x in logits[:block]]
    out = {"tokens": tokens[:max_tokens], "tau": rounds, "round1_logits": first, "stale": stale}
    if verified:
        out["verify_logits"] = verified
    return out


def run_mlx_vlm_mtp(target_dir: str, drafter_dir: str, prompt: list[int], max_tokens: int, block: int) -> dict:
    """mlx-vlm's MTP loop (``generate_step`` with ``draft_kind="mtp"``, greedy) on its own port of
    the Gemma-4 assistant, ``block`` drafts a round (``draft_block_size`` counts the bonus too),
    every round's drafts recorded where its loop asks the drafter for them (``draft_block``)."""
    from mlx_vlm.generate.ar import generate_step
    from mlx_vlm.speculative.drafters import load_drafter

    vlm, _ = mlxvlm_target(target_dir)
    draft, kind = load_drafter(drafter_dir, kind="mtp")
    draft.prefer_requested_block_size = True  # the same count every round, as dspark's fixed policy drafts
    drafts, logits, draft_block, call = [], [], draft.draft_block, type(draft).__call__

    def record(*args, **kwargs):
        logits.append([])  # this round's steps
        out = draft_block(*args, **kwargs)
        drafts.append(out)
        return out

    def step(self, *args, **kwargs):  # one draft step: its logits, as the round's sampler reads them
        hidden, out = call(self, *args, **kwargs)
        logits[-1].append(np.array(out.reshape(-1, out.shape[-1])[-1].astype(mx.float32)).tolist())
        return hidden, out

    draft.draft_block = record
    type(draft).__call__ = step
    steps = generate_step(
        mx.array([prompt]),
        vlm,
        None,
        None,
        max_tokens=max_tokens,
        sampler=lambda x: mx.argmax(x, axis=-1),
        draft_model=draft,
        draft_kind=kind,
        draft_block_size=block + 1,
        prefill_step_size=None,
    )
    try:
        tokens = [int(tok if isinstance(tok, int) else mx.array(tok).reshape(-1)[0].item()) for tok, _ in steps]
    finally:
        type(draft).__call__ = call
    return {
        "tokens": tokens[:max_tokens],
        "tau": [int(a) + 1 for a in draft.accept_lens],
        "drafts": [np.array(d).reshape(-1).tolist() for d in drafts],
        "logits": logits,
        "kind": kind,
    }


def main() -> None:
    kind, target_dir, drafter_dir, max_tokens, *prompt = sys.argv[1:]
    if kind.startswith("mlx-vlm-mtp:"):  # mlx-vlm-mtp:BLOCK
        block = int(kind.split(":")[1])
        print(json.dumps(run_mlx_vlm_mtp(target_dir, drafter_dir, [int(t) for t in prompt], int(max_tokens), block)))
        return
    if kind.startswith("mlx-vlm-eagle3:"):  # mlx-vlm-eagle3:BLOCK or mlx-vlm-eagle3:BLOCK:buffered
        _, block, *how = kind.split(":")
        ids = [int(t) for t in prompt]
        out = run_mlx_vlm_eagle3(
            target_dir, drafter_dir, ids, int(max_tokens), int(block), buffered=how == ["buffered"]
        )
        print(json.dumps(out))
        return
    run = {
        "zlab": run_zlab,
        "mlx-dspark": run_mlx_dspark,
        "zlab-dflash2": run_zlab_dflash2,
        "mlx-vlm-dflash2": run_mlxvlm_dflash2,
    }[kind]
    print(json.dumps(run(target_dir, drafter_dir, [int(t) for t in prompt], int(max_tokens))))


if __name__ == "__main__":
    main()

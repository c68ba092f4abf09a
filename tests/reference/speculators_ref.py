"""Round 1 of a speculators DSpark or DFlash head as speculators' own torch model computes it,
printed as JSON.

    .venv-ref/bin/python tests/reference/speculators_ref.py CASES.json

CASES.json maps each case's name to {"drafter": DIR, "verifier": DIR, "inputs": FILE} (one
process for every case: importing torch is most of a run's time).

Runs in the test-only environment ``.venv-ref`` (Python 3.11, CPU torch, speculators 0.9.0),
never in the project's own. The model is ``speculators.models.dspark.DSparkDraftModel`` or
``speculators.models.dflash.DFlashDraftModel`` (by ``speculators_model_type``), loaded the way
speculators loads a checkpoint: ``from_pretrained`` on DRAFTER_DIR with its config.json, then
``load_verifier_weights`` from the verifier's directory (the target's safetensors). For these models that
copies the verifier's ``embed_tokens`` over any the checkpoint ships, and its head over
``lm_head`` unless the draft vocabulary is reduced (then the checkpoint's ``lm_head``, or the
verifier's rows ``t2d`` selects). Eager attention: flex attention's block masks want a compiler.

speculators has no inference loop for these heads: round 1 is its training forward
(``_backbone_forward``) with one anchor. A case's inputs (safetensors) hold ``hidden`` [P, m*H] (the verifier's hidden
states ``aux_hidden_state_layer_ids`` of positions 0..P-1, in the owner's numbering: id i is the
residual stream entering layer i) and ``anchor`` [1] (the last committed token, at position P).
``select_anchors`` draws no anchor from the last ``block_size`` positions and the block's keys are
strictly before the anchor, so the sequence is padded with zero rows after P and P is the only
position the loss mask offers. The block is ``[anchor, mask, ..]`` at positions P.. (the mask
token's embedding from the verifier's table, unscaled); with ``sample_from_anchor`` slot 0
predicts token P+1 and the block drafts ``block_size`` tokens, else slot 0 only feeds the block
and slots 1.. draft. A DSpark head's Markov bias is added as ``DSparkDraftModel.forward`` adds it
(``markov_head.block_bias`` on each slot's previous token, a verifier id), the previous tokens
being the anchor and then the greedy chain itself: each slot's argmax over base + bias, mapped
to a verifier id through ``d2t`` (draft id d -> d + d2t[d]).

Output, per case: {"logits": [[...] per drafting slot, draft vocabulary, Markov bias included],
"argmax": [...] (draft ids), "tokens": [...] (verifier ids), "confidence_logits": [...] or None,
"missing": [...] (checkpoint tensors speculators did not find, verifier-owned ones left out)}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from speculators.models.dflash import DFlashDraftModel, DFlashSpeculatorConfig
from speculators.models.dspark import DSparkDraftModel, DSparkSpeculatorConfig

CLASSES = {"dspark": (DSparkSpeculatorConfig, DSparkDraftModel), "dflash": (DFlashSpeculatorConfig, DFlashDraftModel)}


def model_for(drafter: Path, verifier: Path):
    raw = json.loads((drafter / "config.json").read_text())
    config_class, model_class = CLASSES[raw["speculators_model_type"]]
    config = config_class.from_pretrained(str(drafter))
    config.transformer_layer_config._attn_implementation = "eager"
    config.speculators_config.verifier.name_or_path = str(verifier)
    # (output_loading_info would make from_pretrained skip load_verifier_weights: it returns a tuple)
    model = model_class.from_pretrained(str(drafter), config=config, dtype=torch.float32)
    shipped = set()
    for f in sorted(drafter.glob("*.safetensors")):
        shipped.update(load_file(str(f)))
    missing = sorted(k for k in model.state_dict() if k not in shipped)
    return model.float().eval(), {"missing_keys": missing}


@torch.no_grad()
def round_one(drafter: Path, verifier: Path, inputs: dict) -> dict:
    model, info = model_for(drafter, verifier)
    context, anchor = inputs["hidden"].float(), int(inputs["anchor"][0])
    P, B = context.shape[0], model.block_size
    S = P + B + 1
    hidden = torch.cat([context, context.new_zeros(S - P, context.shape[1])])[None]
    ids = torch.zeros(1, S, dtype=torch.long)
    ids[0, P] = anchor
    loss_mask = torch.zeros(1, S)
    loss_mask[0, P] = 1  # the only anchor select_anchors can draw
    h, base, *_ = model._backbone_forward(
        hidden,
        ids,
        loss_mask,
        hidden.new_zeros(1, S, model.hidden_size),
        torch.zeros(1, S, dtype=torch.long),
        max_anchors=1,
    )
    start = 0 if model.config.sample_from_anchor else 1
    h, base = h[0, start:], base[0, start:]  # the drafting slots
    markov = getattr(model, "markov_head", None)
    prev, picks, logits = [anchor], [], base
    if markov is not None:  # the greedy chain: slot k's previous token is slot k - 1's draft
        for k in range(base.shape[0]):
            bias = markov.block_bias(prev_token_ids=torch.tensor([prev]), hidden_states=h[None, : k + 1])[0]
            pick = int((base[k] + bias[k]).argmax())
            picks.append(pick)
            prev.append(pick + int(model.d2t[pick]) if model.d2t is not None else pick)
        prev = prev[:-1]
        bias = markov.block_bias(prev_token_ids=torch.tensor([prev]), hidden_states=h[None])[0]
        logits = base + bias
    confidence = None
    head = getattr(model, "confidence_head", None)
    if head is not None:
        features = h
        if model.config.confidence_head_with_markov and markov is not None:
            features = torch.cat([h, markov.prev_embeddings(torch.tensor(prev)).to(h.dtype)], dim=-1)
        confidence = head(features).tolist()
    argmax = [int(i) for i in logits.argmax(-1)]
    d2t = model.d2t
    tokens = [i + int(d2t[i]) for i in argmax] if d2t is not None else argmax
    verifier_owned = ("embed_tokens.", "lm_head.", "verifier_")
    return {
        "logits": logits.tolist(),
        "argmax": argmax,
        "tokens": tokens,
        "confidence_logits": confidence,
        "missing": sorted(k for k in info["missing_keys"] if not k.startswith(verifier_owned)),
    }


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text())
    out = {
        name: round_one(Path(c["drafter"]), Path(c["verifier"]), load_file(c["inputs"])) for name, c in cases.items()
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()

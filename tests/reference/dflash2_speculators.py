"""Round 1 of a DFlash 2 head as vLLM speculators' own torch model computes it, printed as JSON.

    .venv-ref/bin/python tests/reference/dflash2_speculators.py DRAFTER_DIR INPUTS.safetensors

Runs in the test-only environment ``.venv-ref`` (Python 3.11, CPU torch, speculators 0.9.0),
never in the project's own. speculators trains DFlash 2 heads under the same tensor names as
z-lab's checkpoints (``speculators.models.dflash2.DFlash2DraftModel``'s state dict) but writes
its own config.json (``speculators_config``, ``transformer_layer_config``), and has no inference
loop: its training forward (``_backbone_forward``) is run with one anchor, the block's position,
on the committed tap rows, which is round 1 of a generation.

INPUTS holds ``context`` [P, m*H] (the target's tap rows of the committed tokens), ``embed``
[V, H] (the target's embedding table: speculators' ``embed_tokens`` and, tied, its head) and
``anchor`` [1] (the last committed token, at position P). The z-lab config.json of DRAFTER_DIR
is translated field for field. Output: {"logits": [[...]] (slots 1.., speculators' head: no
soft-cap, no multiplier), "tokens": [...] (the greedy path through speculators' own selector
scores, ``CandidateSelector.score_candidates``, from the anchor)}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from speculators.models.dflash2 import DFlash2DraftModel, DFlash2SpeculatorConfig
from transformers import Qwen3Config


def model_for(drafter: Path) -> DFlash2DraftModel:
    cfg = json.loads((drafter / "config.json").read_text())
    dc = cfg["dflash_config"]
    layer = Qwen3Config(
        hidden_size=cfg["hidden_size"],
        num_hidden_layers=cfg["num_hidden_layers"],
        num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_key_value_heads"],
        head_dim=cfg["head_dim"],
        intermediate_size=cfg["intermediate_size"],
        vocab_size=cfg["vocab_size"],
        rms_norm_eps=cfg["rms_norm_eps"],
        max_position_embeddings=cfg["max_position_embeddings"],
        rope_parameters={"rope_type": "default", "rope_theta": cfg["rope_theta"]},
        layer_types=cfg["layer_types"],
        sliding_window=cfg.get("sliding_window"),
    )
    layer._attn_implementation = "eager"  # a dense mask: flex attention's block masks want a compiler
    config = DFlash2SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=cfg["vocab_size"],
        block_size=dc["block_size"],
        aux_hidden_state_layer_ids=dc["target_layer_ids"],
        mask_token_id=dc["mask_token_id"],
        conv_kernel_size=dc["conv_kernel_size"],
        conv_group_size=dc["conv_group_size"],
        selector_rank=dc["selector_rank"],
        selector_top_k=dc["selector_top_k"],
    )
    model = DFlash2DraftModel(config)
    weights = {}
    for f in sorted(drafter.glob("*.safetensors")):
        weights.update(load_file(str(f)))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected, unexpected
    assert set(missing) <= {"embed_tokens.weight", "lm_head.weight", "verifier_lm_head.weight", "verifier_norm.weight"}
    return model.eval()


@torch.no_grad()
def main() -> None:
    drafter, inputs = Path(sys.argv[1]), load_file(sys.argv[2])
    model = model_for(drafter)
    embed = inputs["embed"].float()
    for head in (model.embed_tokens, model.lm_head, model.verifier_lm_head):
        head.weight.copy_(embed)  # the verifier's, as load_verifier_weights copies them in
    context, anchor = inputs["context"].float(), int(inputs["anchor"][0])
    P, B = context.shape[0], model.block_size
    # one anchor at P; select_anchors draws none from the last B positions, and rows from P on
    # are never seen (keys strictly before the anchor): zeros
    S = P + B + 1
    hidden = torch.cat([context, context.new_zeros(S - P, context.shape[1])])[None]
    ids = torch.zeros(1, S, dtype=torch.long)
    ids[0, P] = anchor
    loss_mask = torch.zeros(1, S)
    loss_mask[0, P] = 1  # the only anchor select_anchors can draw
    h, logits, *_ = model._backbone_forward(
        hidden,
        ids,
        loss_mask,
        hidden.new_zeros(1, S, embed.shape[1]),
        torch.zeros(1, S, dtype=torch.long),
        max_anchors=1,
    )
    h, logits = h[:, 1:], logits[:, 1:]  # slot 0 is the anchor's: it only feeds the block
    selector, prev, path = model.candidate_selector, torch.tensor([anchor]), []
    ids = logits.topk(selector.top_k, dim=-1).indices
    for k in range(h.shape[1]):
        scores = selector.score_candidates(logits[:, k], h[:, k], prev, ids[:, k])
        prev = ids[:, k].gather(-1, scores.argmax(-1, keepdim=True))[:, 0]
        path.append(int(prev[0]))
    print(json.dumps({"logits": logits[0].tolist(), "tokens": path}))


if __name__ == "__main__":
    main()

"""speculators' own EAGLE-3 model on a drafter directory and given target hidden states: the
logits of one autoregressive draft, as JSON.

    .venv-ref/bin/python tests/reference/eagle3_ref.py DRAFTER_DIR INPUTS.npz

Runs in the test-only environment ``.venv-ref`` (``make reference``), never in the project's own.
``INPUTS.npz`` holds ``rows`` [P, m*H] (the target's taps of positions 0..P-1, float32), ``ids``
[P] (the tokens of positions 1..P: the last is the anchor) and ``drafted`` [G - 1] (the target
ids drafted after it). The model is ``Eagle3DraftModel`` built from the directory's config.json
(``Eagle3SpeculatorConfig``) with its safetensors loaded, run by its own ``forward`` with
``ttt_steps = G``: that training forward pairs row i with token i + 1 at position i + 1 and, at
step j, feeds row i the token ``ids[i + j]`` and its own step j - 1 output, attending to the
first step's rows up to i and its own steps (the diagonal mask). Rows after the anchor's are
given the drafted tokens (and zero taps, which the anchor's row never attends to), so the
anchor's row at step j is exactly the j-th step of a draft from the anchor: its logits
(captured from ``lm_head``) are what a drafter computes there. Eager attention (flex attention
needs a compiler on the CPU).

Output: {"logits": [[...] per step, over the draft vocabulary], "argmax": [...], "missing": [...]}
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig


def main() -> None:
    directory, inputs = Path(sys.argv[1]), np.load(sys.argv[2])
    rows, ids, drafted = inputs["rows"], inputs["ids"].astype(np.int64), inputs["drafted"].astype(np.int64)
    config = json.loads((directory / "config.json").read_text())
    config["transformer_layer_config"]["_attn_implementation"] = "eager"
    cfg = Eagle3SpeculatorConfig(**config)
    cfg.transformer_layer_config._attn_implementation = "eager"
    model = Eagle3DraftModel(cfg).float().eval()
    state = {}
    for f in sorted(directory.glob("*.safetensors")):
        state.update(load_file(str(f)))
    missing, unexpected = model.load_state_dict(
        {k: v.float() if v.is_floating_point() else v for k, v in state.items()}, strict=False
    )
    if unexpected:
        raise SystemExit(f"unexpected tensors: {unexpected}")
    if "embed_tokens.weight" not in state:  # no embedding of its own: the verifier's, unscaled
        model.embed_tokens.weight.data = torch.from_numpy(inputs["embedding"]).float()
    P, G = rows.shape[0], len(drafted) + 1
    hidden = np.concatenate([rows, np.zeros((G - 1, rows.shape[1]), rows.dtype)])
    tokens = np.concatenate([ids, drafted])
    seen = []
    model.lm_head.register_forward_hook(lambda _m, _i, out: seen.append(out.detach()))
    with torch.no_grad():
        model(
            hidden_states=torch.from_numpy(hidden).float()[None],
            input_ids=torch.from_numpy(tokens)[None],
            document_ids=torch.zeros(1, len(tokens), dtype=torch.long),
            ttt_steps=G,
        )
    logits = [s[0, P - 1].numpy().astype(np.float64) for s in seen]
    print(
        json.dumps(
            {
                "logits": [x.tolist() for x in logits],
                "argmax": [int(x.argmax()) for x in logits],
                "missing": sorted(k for k in missing if not k.startswith("verifier_")),
            }
        )
    )


if __name__ == "__main__":
    main()

"""transformers' own Gemma-4 assistant classes on the inputs dspark's assistant drafted from:
run in the reference environment (``.venv-ref``, Python 3.11, CPU torch), called by
``tests/test_assistant.py``.

    python assistant_ref.py steps ASSISTANT_DIR INPUTS.safetensors

INPUTS holds, per case ``c``: ``c.full_k`` / ``c.full_v`` and ``c.sliding_k`` / ``c.sliding_v``
(the target's K/V of its last full and sliding layer that keep one, [1, heads, rows, width],
every committed row the target cache held: transformers' bidirectional masks choose the rows),
``c.emb`` [G, backbone] (the target's scaled embedding of the anchor and of each drafted token
but the last: the tokens are dspark's, so each step's input is the same), ``c.h0`` [1, backbone]
(the target's final hidden state before the anchor) and ``c.position`` (the anchor's). Prints
JSON: per case, the logits of every step [G, V] and their argmax, as
``SinglePositionMultiTokenCandidateGenerator`` computes a step (``position_ids`` held at the
anchor's, the attention mask of ones the runtime passes, h_prev the assistant's own output).
"""

from __future__ import annotations

import json
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def steps(assistant_dir: str, inputs_path: str) -> dict:
    model = AutoModelForCausalLM.from_pretrained(assistant_dir, dtype=torch.float32, trust_remote_code=False)
    model.eval()
    arrays = load_file(inputs_path)
    out = {}
    for case in sorted({k.split(".")[0] for k in arrays}):
        a = {k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith(case + ".")}
        position = int(a["position"].item())
        shared = {
            "full_attention": (a["full_k"].float(), a["full_v"].float()),
            "sliding_attention": (a["sliding_k"].float(), a["sliding_v"].float()),
        }
        mask = torch.ones((1, position + 1), dtype=torch.long)  # the runtime's: input_ids, the anchor's row included
        h = a["h0"].float()[None]  # [1, 1, backbone]
        logits = []
        with torch.no_grad():
            for emb in a["emb"].float():
                x = torch.cat([emb[None, None], h], dim=-1)
                o = model(
                    inputs_embeds=x,
                    attention_mask=mask,
                    position_ids=torch.tensor([[position]]),
                    shared_kv_states=shared,
                    use_cache=False,
                )
                logits.append(o.logits[0, 0])
                h = o.last_hidden_state
        stacked = torch.stack(logits)
        out[case] = {"logits": stacked.tolist(), "argmax": stacked.argmax(-1).tolist()}
    return out


def assisted(target_dir: str, assistant_dir: str, n: int, prompt: list[int], committed: bool = False) -> dict:
    """transformers' own assisted generation, greedy: the target ``Gemma4ForCausalLM`` with the
    assistant, ``generate(assistant_model=..., do_sample=False)``. Each round's drafts are
    recorded from the runtime's candidate generator with the anchor's position (the length of
    ``input_ids`` less one); the output tokens say how many were accepted.

    ``committed``: the runtime as it is, but for the shared K/V it hands the assistant after a
    rejection: the rows of the rejected drafts are cut off first (of both layer types; the
    verify's K/V ends with them), so the assistant reads committed rows only, as dspark's does.
    The runtime itself slices to ``input_ids``' length, which keeps the first rejected draft's
    row (at the anchor's position) and, once the sliding window is full, every rejected row of
    the sliding K/V (its slice counts rows as if they started at position 0)."""
    from transformers.generation import candidate_generator as cg

    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32, trust_remote_code=False)
    assistant = AutoModelForCausalLM.from_pretrained(assistant_dir, dtype=torch.float32, trust_remote_code=False)
    rounds = []
    original = cg.SinglePositionMultiTokenCandidateGenerator.get_candidates

    def recorded(self, input_ids, model_kwargs=None, model_outputs=None, **kwargs):
        shared = getattr(model_outputs, "shared_kv_states", None)
        if committed and shared and not kwargs.get("is_first_iteration"):
            rejected = shared["full_attention"][0].shape[2] - (input_ids.shape[1] - 1)
            if rejected > 0:
                model_outputs.shared_kv_states = {
                    kind: (k[:, :, :-rejected], v[:, :, :-rejected]) for kind, (k, v) in shared.items()
                }
        ids, logits = original(self, input_ids, model_kwargs=model_kwargs, model_outputs=model_outputs, **kwargs)
        if ids.shape[1] > input_ids.shape[1]:
            rounds.append({"position": input_ids.shape[1] - 1, "drafted": ids[0, input_ids.shape[1] :].tolist()})
        return ids, logits

    cg.SinglePositionMultiTokenCandidateGenerator.get_candidates = recorded
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = target.generate(
            ids,
            assistant_model=assistant,
            do_sample=False,
            max_new_tokens=n,
            min_new_tokens=n,
            attention_mask=torch.ones_like(ids),
        )
    return {"tokens": out[0, len(prompt) :].tolist(), "rounds": rounds}


if __name__ == "__main__":
    if sys.argv[1] == "steps":
        print(json.dumps(steps(sys.argv[2], sys.argv[3])))
    elif sys.argv[1] in ("generate", "generate-committed"):
        prompt = [int(x) for x in sys.argv[5:]]
        committed = sys.argv[1] == "generate-committed"
        print(json.dumps(assisted(sys.argv[2], sys.argv[3], int(sys.argv[4]), prompt, committed=committed)))
    else:
        raise SystemExit(f"unknown command {sys.argv[1]!r}")

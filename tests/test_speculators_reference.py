"""speculators' DSpark and DFlash heads against the owner's own torch models: the first round's
draft logits dspark computes (``load_drafter``, then the engine's prefill and round 1, as
``test_formats.py`` records them) equal what ``speculators.models.dspark.DSparkDraftModel`` /
``speculators.models.dflash.DFlashDraftModel`` compute for the same checkpoint, verifier and
target hidden states (``reference/speculators_ref.py``, run in ``.venv-ref``): every drafting
slot's logits to 1e-4 with the Markov bias of the greedy chain, the same drafted ids, the same
confidence logits. No peer's departure is applied to dspark's side; the target's hidden states
are taken in the owner's numbering (``aux_hidden_state_layer_ids`` id i: the residual stream
entering layer i), straight from the config, not from dspark's reading of it.

The checkpoints: the synthetic ones of ``drafter_checkpoints.write_speculators`` (both algorithms,
with a reduced draft vocabulary and ``d2t`` and with the full vocabulary, a causal sliding
layer, the anchor slot predicting) on the miniature target, and the demo's own speculators
drafter (``resources/demo/dspark``) with its ``dspark export --drop-heads`` copy (a speculators
DFlash head) on the demo target, past its sliding window of 512. Where dspark departs from
speculators on purpose (``OWNER_READING``; docs/formats.md), the test checks that dspark's
default is the departure and switches it off to compare.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import drafter_checkpoints as ckpt
import mlx.core as mx
import numpy as np
import pytest

from dspark import GenerationConfig, generate, generate_plain, load_target, run_to_summary
from dspark.cli import main as dspark
from dspark.loading import load_drafter

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / ".venv-ref" / "bin" / "python"
DEMO = ROOT / "resources" / "demo"
DEMO_CONTEXT = 540  # prompt tokens: past the demo drafter's sliding window of 512


def _rewrite(path: Path, drop=(), perturb=()) -> Path:
    """The checkpoint at ``path`` without the tensors ``drop``, and with ``perturb``'s moved off
    the verifier's (so that whose table is read shows)."""
    weights = mx.load(str(path / "model.safetensors"))
    for name in drop:
        weights.pop(name)
    for i, name in enumerate(perturb):
        weights[name] = weights[name] + 0.05 * mx.random.normal(weights[name].shape, key=mx.random.key(i))
    mx.save_safetensors(str(path / "model.safetensors"), weights, metadata={"format": "pt"})
    return path


FULL_VOCAB = ("lm_head.weight", "embed_tokens.weight", "d2t", "t2d")  # what a full-vocabulary head does not ship


def synthetic(root: Path, model, frequent: list[int]) -> dict[str, Path]:
    def write(name, **kw):
        return ckpt.write_speculators(root / name, model, frequent, **kw)

    full = dict(draft_vocab=ckpt.VOCAB)
    return {
        "dspark-d2t": write("dspark-d2t"),
        "dspark-full-vocab": _rewrite(write("dspark-full-vocab", **full), drop=FULL_VOCAB),
        "dflash-d2t": write("dflash-d2t", algorithm="dflash"),
        "dflash-full-vocab": _rewrite(write("dflash-full-vocab", algorithm="dflash", **full), drop=FULL_VOCAB),
        "dspark-d2t-borrowed-embedding": write("dspark-d2t-borrowed-embedding", with_embedding=False),
        "dspark-causal-sliding-layer": write("dspark-causal-sliding-layer", sliding=True),
        "dspark-anchor-predicts": write("dspark-anchor-predicts", from_anchor=True),
        # a full-vocabulary head shipping an embedding and a head of its own, not the verifier's
        "dspark-own-tables": _rewrite(
            write("dspark-own-tables", **full), drop=("d2t", "t2d"), perturb=("embed_tokens.weight", "lm_head.weight")
        ),
    }


#: dspark's deliberate departures from speculators' own model, each (dspark's default, the owner's
#: reading). A soft-cap: speculators' config has no ``final_logit_softcapping`` and its head none;
#: dspark writes the key for a drafter trained against a soft-capped target's head (the demo's)
#: and caps as it was trained. Tables of its own: speculators' loader (``load_verifier_weights``)
#: always copies the verifier's embedding over ``embed_tokens``, and its head over a
#: full-vocabulary ``lm_head`` (it never saves either); vLLM's DFlash loader uses both when a
#: checkpoint ships them (``has_own_embed_tokens``, ``has_own_lm_head``), and so does dspark.
OWNER_READING = {
    "demo-dspark": (lambda d: d.spec.softcap == 30.0, lambda d: setattr(d.spec, "softcap", None)),
    "demo-dflash-export": (lambda d: d.spec.softcap == 30.0, lambda d: setattr(d.spec, "softcap", None)),
    "dspark-own-tables": (
        lambda d: d.spec.own_embedding and d.spec.own_head,
        lambda d: (setattr(d.spec, "own_embedding", False), setattr(d.spec, "own_head", False)),
    ),
}

#: mistakes the comparison must notice (each against a case's reference): the departures the
#: project found in mlx-dspark on speculators checkpoints, and the owner's readings switched off
MISTAKES = {
    "taps read one layer lower (mlx-dspark)": (
        "dspark-d2t",
        lambda d: setattr(d, "tap_layers", tuple(t + 1 for t in d.tap_layers)),
    ),
    "borrowed embedding scaled by sqrt(d) (mlx-dspark)": (
        "dspark-d2t-borrowed-embedding",
        lambda d: setattr(d.spec, "embed_scale", float(ckpt.H) ** 0.5),
    ),
    "borrowed head soft-capped (mlx-dspark)": ("dflash-full-vocab", lambda d: setattr(d.spec, "softcap", 30.0)),
    "the demo's soft-cap kept": ("demo-dspark", None),
    "the head's own tables kept": ("dspark-own-tables", None),
}


class Capture:
    """The drafter, its first propose's DraftRows recorded."""

    def __init__(self, drafter):
        self.drafter, self.rows = drafter, []

    def start(self, target, *, cache=None):
        session = self.drafter.start(target, cache=cache)
        propose = session.propose

        def recorded(*args, **kwargs):
            self.rows.append(propose(*args, **kwargs))
            return self.rows[-1]

        session.propose = recorded
        return session


def round_one(target, drafter, prompt: list[int]) -> dict:
    """The engine's round 1 after the prompt's prefill (every prompt token but the last, whose
    taps are the block's context): the last prompt token is the anchor, at position
    len(prompt) - 1. The drafting slots' logits over the draft vocabulary, the drafted target
    ids and the confidence logits."""
    cap = Capture(drafter)
    cfg = GenerationConfig(policy="fixed", max_tokens=drafter.block_size + 2, stop_at_eos=False)
    run_to_summary(generate(target, cap, prompt, cfg))
    rows = cap.rows[0]
    return {
        "logits": np.array(rows.logits[0]),
        "tokens": rows.tokens[0].tolist(),
        "confidence_logits": None if rows.conf_logits is None else np.array(rows.conf_logits[0]),
    }


def owner_hidden(target, directory: Path, prompt: list[int]) -> mx.array:
    """The target's hidden states of the prompt's tokens (all but the anchor) at the config's
    ``aux_hidden_state_layer_ids``, in the owner's numbering: id i is the output of layer i - 1."""
    ids = json.loads((directory / "config.json").read_text())["aux_hidden_state_layer_ids"]
    _, rows = target.forward(mx.array([prompt[:-1]]), target.make_cache(), [i - 1 for i in ids], logits=False)
    return rows[0]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Every case's checkpoint, verifier, prompt and dspark's round 1 (owner's reading set), and
    the inputs speculators' model is given."""
    if os.environ.get("DSPARK_SKIP_PEERS"):
        pytest.skip("DSPARK_SKIP_PEERS is set")
    if not REFERENCE.exists():
        pytest.skip("the reference environment .venv-ref is missing: run `make reference` (make test does)")
    root = tmp_path_factory.mktemp("speculators_reference")
    model = ckpt.target_model()
    tiny_dir = ckpt.write_target(root / "target", model)
    tiny = load_target(tiny_dir)
    frequent = run_to_summary(
        generate_plain(tiny, ckpt.PROMPT, GenerationConfig(policy="fixed", max_tokens=60, stop_at_eos=False))
    ).tokens
    demo = load_target(DEMO / "target")
    exported = root / "demo-dflash-export"
    assert (
        dspark(["export", str(DEMO / "dspark"), "--format", "speculators", "--drop-heads", "--out", str(exported)]) == 0
    )
    demo_prompt = demo.encode((ROOT / "dspark" / "engine.py").read_text())[:DEMO_CONTEXT]
    cases = {name: (tiny, tiny_dir, path, list(ckpt.PROMPT)) for name, path in synthetic(root, model, frequent).items()}
    cases["demo-dspark"] = (demo, DEMO / "target", DEMO / "dspark", demo_prompt)
    cases["demo-dflash-export"] = (demo, DEMO / "target", exported, demo_prompt)
    ours, manifest = {}, {}
    for name, (target, verifier, directory, prompt) in cases.items():
        drafter = load_drafter(directory, target)
        if name in OWNER_READING:
            is_default, to_owner = OWNER_READING[name]
            assert is_default(drafter), name  # dspark's departure is what it does by default
            to_owner(drafter)
        ours[name] = round_one(target, drafter, prompt)
        inputs = root / f"{name}.safetensors"
        hidden = owner_hidden(target, directory, prompt)
        mx.save_safetensors(str(inputs), {"hidden": hidden, "anchor": mx.array(prompt[-1:])})
        manifest[name] = {"drafter": str(directory), "verifier": str(verifier), "inputs": str(inputs)}
    (root / "cases.json").write_text(json.dumps(manifest))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = ROOT / "tests" / "reference" / "speculators_ref.py"
    r = subprocess.run(
        [str(REFERENCE), str(script), str(root / "cases.json")], capture_output=True, text=True, timeout=600, env=env
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return {"cases": cases, "ours": ours, "reference": json.loads(r.stdout)}


CASES = [
    "dspark-d2t",
    "dspark-full-vocab",
    "dflash-d2t",
    "dflash-full-vocab",
    "dspark-d2t-borrowed-embedding",
    "dspark-causal-sliding-layer",
    "dspark-anchor-predicts",
    "dspark-own-tables",
    "demo-dspark",
    "demo-dflash-export",
]


@pytest.mark.parametrize("name", CASES)
def test_round_one_equals_speculators_own_model(world, name):
    ours, ref = world["ours"][name], world["reference"][name]
    assert ref["missing"] == []  # every tensor speculators' model has came from the checkpoint or the verifier
    logits = np.array(ref["logits"])
    assert ours["logits"].shape == logits.shape
    assert np.abs(ours["logits"] - logits).max() < 1e-4, np.abs(ours["logits"] - logits).max()
    assert [int(i) for i in ours["logits"].argmax(-1)] == ref["argmax"]
    assert ours["tokens"] == ref["tokens"]  # the same drafts, as target ids
    if ref["confidence_logits"] is None:
        assert ours["confidence_logits"] is None
    else:
        assert np.abs(ours["confidence_logits"] - np.array(ref["confidence_logits"])).max() < 1e-4


def test_the_cases_cover_both_algorithms_and_vocabularies(world):
    drafters = {name: load_drafter(c[2], c[0]) for name, c in world["cases"].items()}
    assert set(drafters) == set(CASES)
    variants = {(d.spec.variant, d.draft_to_target is not None) for d in drafters.values()}
    assert variants == {("DSpark", True), ("DSpark", False), ("DFlash", True), ("DFlash", False)}
    assert drafters["dspark-causal-sliding-layer"].layout.causal == (True, False)
    assert drafters["dspark-anchor-predicts"].layout.anchor_predicts
    assert not drafters["dspark-d2t"].layout.anchor_predicts


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_departure_changes_round_one(world, mistake):
    name, break_it = MISTAKES[mistake]
    target, _, directory, prompt = world["cases"][name]
    drafter = load_drafter(directory, target)  # dspark's default reading, unless broken here
    if break_it is not None:
        break_it(drafter)
    ours, ref = round_one(target, drafter, prompt), world["reference"][name]
    assert np.abs(ours["logits"] - np.array(ref["logits"])).max() > 1e-2

"""``dspark export`` (#27): a drafter written as vLLM speculators, DeepSpec or z-lab DFlash, exactly
or not at all. Exactly: loaded back, the export drafts the same block (tokens and logits) every
round as the drafter it came from, and the peer package that reads the format (mlx-dspark for
speculators and DeepSpec, z-lab's ``dflash`` for z-lab) accepts the same drafts every round on the
same target; the serving keys are the ones vLLM reads. Not at all: one sentence naming the part
the format cannot carry, exit 2, nothing written.

The drafters are made by the formats' writers (``dspark.convert.new_drafter``, what ``dspark train
--format`` starts from) with weights planted so acceptance varies from round to round on
``drafter_checkpoints``' target (it repeats its current token in runs), and trained for a few
steps by ``dspark train --format``."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import drafter_checkpoints as ckpt
import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten, tree_unflatten
from test_formats import PEERS, Capture, N

from dspark import DflashConfig, GenerationConfig, generate, generate_plain, load_drafter, load_target, run_to_summary
from dspark.cli import main as dspark
from dspark.convert import new_drafter
from dspark.export import ProbeProjection, same_drafts
from dspark.modeldir import read_header
from dspark.sampling import soft_cap

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("speculators", "deepspec", "zlab")
PEER = {"speculators": "mlx-dspark", "deepspec": "mlx-dspark", "zlab": "zlab"}
LOADED_AS = {"speculators": "speculators", "deepspec": "deepspec", "zlab": "zlab-dflash"}
PLANTED = {  # on ckpt's target: hidden 64, 6 layers, vocabulary 256, mask token 4
    "speculators": DflashConfig(
        block_size=6,
        num_layers=1,
        tap_layers=tuple(ckpt.TAPS),
        mask_token_id=4,
        markov_rank=ckpt.R,
        format="speculators",
    ),
    "deepspec": DflashConfig(
        block_size=6, num_layers=1, tap_layers=tuple(ckpt.TAPS), mask_token_id=4, markov_rank=ckpt.R, format="deepspec"
    ),
    "zlab": DflashConfig(
        block_size=7,
        num_layers=1,
        tap_layers=tuple(ckpt.TAPS),
        mask_token_id=4,
        markov=False,
        confidence=False,
        format="zlab",
    ),
}


def plant(drafter) -> None:
    """Weights under which acceptance varies: small random layers, context rows kept faint, and a
    "repeat the previous token" Markov head, or without one (z-lab) values that carry the block's
    anchor (its first 16 dimensions) into the mask slots, all a z-lab block has to draft from."""
    mx.random.seed(9)
    keep = ("norm.weight", "layer_scalar", "embed_tokens.weight", "lm_head.weight")
    new = {
        k: v if k.endswith(keep) else 0.02 * mx.random.normal(v.shape)
        for k, v in tree_flatten(drafter.net.parameters())
    }
    new["hidden_norm.weight"] = mx.full(new["hidden_norm.weight"].shape, 0.002)
    for i in range(0 if drafter.has_markov else len(drafter.net.layers)):
        p = f"layers.{i}.self_attn."
        v, o = mx.zeros(new[p + "v_proj.weight"].shape), mx.zeros(new[p + "o_proj.weight"].shape)
        v[:16, :16] = mx.eye(16)
        o[:16, :16] = 3.0 * mx.eye(16)
        new[p + "v_proj.weight"], new[p + "o_proj.weight"] = v, o
    if drafter.has_markov:
        new.update(ckpt._markov(ckpt.VOCAB, list(range(ckpt.VOCAB))))
    drafter.net.update(tree_unflatten(list(new.items())))
    mx.eval(drafter.net.parameters())


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    model = ckpt.target_model()
    d = {"target": ckpt.write_target(root / "target", model)}
    target = load_target(d["target"])
    for fmt, cfg in PLANTED.items():
        drafter = new_drafter(target, cfg, seed=3)
        plant(drafter)
        drafter.save(root / fmt)
        d[fmt] = root / fmt
    native = new_drafter(target, DflashConfig(block_size=4, num_layers=1, tap_layers=tuple(ckpt.TAPS), markov_rank=16))
    native.save(root / "native")
    d["native"] = root / "native"
    plain = run_to_summary(
        generate_plain(target, ckpt.PROMPT, GenerationConfig(policy="fixed", max_tokens=N, stop_at_eos=False))
    )
    d["published"] = ckpt.write_speculators(root / "published", model, list(plain.tokens[:90]))
    return d


@pytest.fixture(scope="module")
def target(models):
    return load_target(models["target"])


@pytest.fixture(scope="module")
def plain(target):
    return run_to_summary(
        generate_plain(target, ckpt.PROMPT, GenerationConfig(policy="fixed", max_tokens=N, stop_at_eos=False))
    )


def ours(target, drafter, prompt: list[int], first: int, rows: list) -> tuple[list[int], list[int], np.ndarray]:
    """Our run aligned with the peers' (test_formats.ours, for any prompt): the prompt ends with
    the target's first token. (tokens, committed per round, round 1's logits); ``rows`` gets
    every round's DraftRows."""
    cap = Capture(drafter)
    s = run_to_summary(
        generate(
            target, cap, list(prompt) + [first], GenerationConfig(policy="fixed", max_tokens=N - 1, stop_at_eos=False)
        )
    )
    rows.extend(cap.rows)
    return [first, *s.tokens], [a + 1 for a in s.accepted_lengths], np.array(cap.rows[0].logits[0])


def same_rounds(target, prompt: list[int], plain, a, b) -> tuple[list[int], list[int], np.ndarray]:
    """Both drafters' runs, checked to draft the same block every round (tokens, logits): ours() of ``a``."""
    rows_a, rows_b = [], []
    tokens_a, tau_a, logits_a = ours(target, a, prompt, plain.tokens[0], rows_a)
    tokens_b, tau_b, _ = ours(target, b, prompt, plain.tokens[0], rows_b)
    assert tokens_a == tokens_b == list(plain.tokens) and tau_a == tau_b
    assert len(rows_a) == len(rows_b) > 10
    for r, s in zip(rows_a, rows_b):
        assert r.tokens.tolist() == s.tokens.tolist()
        assert np.allclose(np.array(r.logits), np.array(s.logits), rtol=1e-5, atol=1e-5)
    return tau_a, tokens_a, logits_a


def peer(kind: str, target_dir: Path, drafter_dir: Path, prompt: list[int] = ckpt.PROMPT) -> dict:
    """The peer's own loop on these folders (tests/peers/run_peer.py, as test_formats runs it)."""
    if os.environ.get("DSPARK_SKIP_PEERS"):
        pytest.skip("DSPARK_SKIP_PEERS is set")
    assert PEERS.exists(), "the peer environment is missing: run `make peers` (make test does)"
    cmd = [
        str(PEERS),
        str(ROOT / "tests" / "peers" / "run_peer.py"),
        kind,
        str(target_dir),
        str(drafter_dir),
        str(N),
        *map(str, prompt),
    ]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def as_mlx_dspark_reads_it(drafter):
    """Where mlx-dspark departs from speculators' own code on a drafter that borrows the
    verifier's embedding and head, dspark keeps speculators' (checked here) and the peer is
    compared in its own: it scales the borrowed embedding by sqrt(hidden)
    (test_formats.PEER_CONVENTION), and it soft-caps the borrowed head twice (mlx-vlm's head caps,
    then the drafter's cap again)."""
    s = drafter.spec
    assert not s.own_embedding and s.embed_scale == 1.0 and not s.own_head
    s.embed_scale = float(s.hidden) ** 0.5
    drafter.head_raw = lambda proj, h: soft_cap(proj.head(h), proj.softcap)
    return drafter


def peer_dir(out: Path, fmt: str, tmp_path: Path) -> Path:
    """What the peer is given: mlx-dspark reads speculators' tap ids one below vLLM's numbering."""
    return ckpt.for_mlx_dspark(out, tmp_path / f"{fmt}-for-mlx-dspark") if fmt == "speculators" else out


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_export_drafts_what_the_drafter_drafts_here_and_in_the_peer(models, target, plain, fmt, tmp_path):
    out = tmp_path / fmt
    assert dspark(["export", str(models[fmt]), "--format", fmt, "--out", str(out)]) == 0
    original, exported = load_drafter(models[fmt], target), load_drafter(out, target)
    assert exported.format == LOADED_AS[fmt] and exported.has_markov == original.has_markov
    tau, tokens, logits = same_rounds(target, ckpt.PROMPT, plain, original, exported)
    assert len(set(tau)) >= 3, tau  # acceptance varies, so "the same drafts every round" says something
    if fmt == "speculators":
        tokens, tau, logits = ours(target, as_mlx_dspark_reads_it(exported), ckpt.PROMPT, plain.tokens[0], [])
    ref = peer(PEER[fmt], models["target"], peer_dir(out, fmt, tmp_path))
    assert ref["tokens"][: len(tokens)] == tokens
    assert tau[: len(ref["tau"]) - 1] == ref["tau"][:-1]  # the peer clips its last round to the budget
    assert np.allclose(logits, np.array(ref["round1_logits"]), atol=1e-4)


def test_a_published_speculators_checkpoint_exports_with_its_vocabulary_tables(models, target, plain, tmp_path):
    """Its own embedding, a head over 48 draft ids with d2t / t2d, slot 0 a pure anchor (6 of 7)."""
    out = tmp_path / "published"
    assert dspark(["export", str(models["published"]), "--format", "speculators", "--out", str(out)]) == 0
    src, dst = mx.load(str(models["published"] / "model.safetensors")), mx.load(str(out / "model.safetensors"))
    assert set(src) == set(dst) and all(src[k].dtype == dst[k].dtype for k in src)
    assert all(np.array_equal(np.array(src[k]), np.array(dst[k])) for k in src)  # d2t and t2d too
    config = json.loads((out / "config.json").read_text())
    assert config["draft_vocab_size"] == 48 and config["block_size"] == 7 and not config["sample_from_anchor"]
    assert config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 6
    tau, tokens, logits = same_rounds(
        target, ckpt.PROMPT, plain, load_drafter(models["published"], target), load_drafter(out, target)
    )
    ref = peer("mlx-dspark", models["target"], peer_dir(out, "speculators", tmp_path))
    assert ref["tokens"][: len(tokens)] == tokens and tau[: len(ref["tau"]) - 1] == ref["tau"][:-1]
    assert np.allclose(logits, np.array(ref["round1_logits"]), atol=1e-4)


def test_serving_configs_hold_the_keys_vllm_and_sglang_read(models, tmp_path):
    cfg = {}
    for fmt in FORMATS:
        out = tmp_path / fmt
        assert (
            dspark(["export", str(models[fmt]), "--format", fmt, "--out", str(out), "--verifier", "org/gemma-4-tiny"])
            == 0
        )
        cfg[fmt] = json.loads((out / "config.json").read_text())
        header = read_header(out / "model.safetensors")
        assert header["__metadata__"]["format"] == "pt"
        assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"F32"}
    s = cfg["speculators"]
    assert s["speculators_model_type"] == "dspark" and isinstance(s["transformer_layer_config"], dict)
    assert s["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 6
    assert s["speculators_config"]["verifier"]["name_or_path"] == "org/gemma-4-tiny"
    assert s["mask_token_id"] == 4 and s["markov_rank"] == ckpt.R
    # vLLM's update_dflash: dflash_config.target_layer_ids = [i - 1 for i in aux_hidden_state_layer_ids]
    assert [i - 1 for i in s["aux_hidden_state_layer_ids"]] == ckpt.TAPS
    z = cfg["zlab"]
    assert z["architectures"] == ["DFlashDraftModel"]
    assert z["dflash_config"]["block_size"] == 8 and z["dflash_config"]["mask_token_id"] == 4
    assert z["dflash_config"]["target_layer_ids"] == ckpt.TAPS
    d = cfg["deepspec"]
    assert d["architectures"] == ["Gemma4DSparkModel"] and d["model_type"] == "gemma4_text"
    assert (d["block_size"], d["mask_token_id"], d["target_layer_ids"], d["markov_rank"]) == (6, 4, ckpt.TAPS, ckpt.R)
    assert d["enable_confidence_head"] and d["num_target_layers"] == 6
    readme = {fmt: (tmp_path / fmt / "README.md").read_text() for fmt in FORMATS}
    assert f"vllm serve {tmp_path / 'speculators'}" in readme["speculators"]  # the verifier is in its config
    spec_cfg = {fmt: json.loads(re.search(r"--speculative-config '(.*)'", readme[fmt]).group(1)) for fmt in FORMATS}
    assert spec_cfg["zlab"] == {"method": "dflash", "model": str(tmp_path / "zlab"), "num_speculative_tokens": 7}
    assert spec_cfg["deepspec"]["method"] == "dspark" and spec_cfg["deepspec"]["num_speculative_tokens"] == 6
    assert "--speculative-algorithm DFLASH" in readme["zlab"] and "--speculative-num-draft-tokens 8" in readme["zlab"]
    assert "vllm serve org/gemma-4-tiny" in readme["deepspec"] and "SGLang" in readme["deepspec"]
    # speculators' config class has no soft-cap key: the README says what a server ignoring it changes
    assert ("final_logit_softcapping" in readme["speculators"]) == bool(s.get("final_logit_softcapping"))


def test_the_speculators_readme_says_what_an_ignored_soft_cap_changes():
    from dspark import serving

    info = {"source": "d", "source_format": "native", "block_size": 6, "taps": [1, 3]}
    capped = serving.readme("speculators", {"final_logit_softcapping": 30.0}, info, "out", verifier=None)
    assert "`final_logit_softcapping` 30.0" in capped and "Markov head" in capped
    assert "final_logit_softcapping" not in serving.readme("speculators", {}, info, "out", verifier=None)


def test_speculators_tap_ids_are_read_in_vllm_s_numbering(models, target, tmp_path):
    """id i is the output of layer i - 1 (vLLM, speculators' training data); a config an earlier
    dspark wrote kept the taps themselves, which its extension's trained_as records; id 0 (the
    embedding) is refused in one sentence."""
    from dspark.errors import DsparkError

    config = json.loads((models["speculators"] / "config.json").read_text())
    assert config["aux_hidden_state_layer_ids"] == [t + 1 for t in ckpt.TAPS]
    assert config["dspark"]["trained_as"]["tap_layers"] == ckpt.TAPS
    weights = mx.load(str(models["speculators"] / "model.safetensors"))
    older = ckpt._save(tmp_path / "older", {**config, "aux_hidden_state_layer_ids": ckpt.TAPS}, weights)
    assert list(load_drafter(older, target).tap_layers) == ckpt.TAPS
    foreign = {k: v for k, v in config.items() if k != "dspark"}
    assert list(load_drafter(ckpt._save(tmp_path / "foreign", foreign, weights), target).tap_layers) == ckpt.TAPS
    embedding = ckpt._save(tmp_path / "embedding", {**foreign, "aux_hidden_state_layer_ids": [0, 2, 4]}, weights)
    with pytest.raises(DsparkError, match="id 0 is the embedding"):
        load_drafter(embedding, target)


def _refused(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert dspark(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dspark: error: ") and err.count("\n") == 0, err
    return err


def test_what_a_format_cannot_carry_is_one_sentence_and_nothing_is_written(models, tmp_path, capsys):
    published = tmp_path / "published-h"  # a confidence head that reads h alone: no writer of dspark writes one
    config = json.loads((models["published"] / "config.json").read_text())
    weights = mx.load(str(models["published"] / "model.safetensors"))
    weights["confidence_head.proj.weight"] = weights["confidence_head.proj.weight"][:, : ckpt.H]
    ckpt._save(published, {**config, "confidence_head_with_markov": False}, weights)
    quantized = tmp_path / "q"
    assert dspark(["quantize", str(models["speculators"]), "--bits", "8", "--out", str(quantized)]) == 0
    cases = [
        (models["native"], "zlab", "native Gemma-style draft layers", "train it with dspark train --format"),
        (
            models["speculators"],
            "zlab",
            "anchor slot that predicts the first draft",
            "it exports exactly to speculators",
        ),
        (models["deepspec"], "speculators", "Gemma-4 global-attention draft layers", "which deepspec carries"),
        (models["zlab"], "deepspec", "Qwen3-style draft layers", "which speculators and zlab carry"),
        (published, "speculators", "confidence head", "--drop-heads"),
        (quantized, "speculators", "quantized in mlx's layout", "export the drafter it was quantized from"),
    ]
    for src, fmt, part, then in cases:
        out = tmp_path / f"out-{src.name}-{fmt}"
        err = _refused(capsys, ["export", str(src), "--format", fmt, "--out", str(out)])
        assert part in err and then in err, err
        assert not out.exists() and not list(tmp_path.glob(f".{out.name}*"))
    # --drop-heads leaves out what only the heads stood in the way of
    assert (
        dspark(
            ["export", str(published), "--format", "speculators", "--out", str(tmp_path / "dropped"), "--drop-heads"]
        )
        == 0
    )


def test_drop_heads_exports_the_backbone_and_says_what_acceptance_is_left(models, target, tmp_path, capsys):
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([" ".join(map(str, ckpt.PROMPT)), "w7 w7 w9 w9 w9 w12"]))
    out = tmp_path / "dflash"
    capsys.readouterr()
    assert (
        dspark(
            [
                "export",
                str(models["speculators"]),
                "--format",
                "speculators",
                "--out",
                str(out),
                "--drop-heads",
                "--target",
                str(models["target"]),
                "--prompt-set",
                str(prompts),
                "--max-tokens",
                "48",
                "--json",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["dropped"] == ["Markov", "confidence"]
    assert report["tau_without_heads"] < report["tau_with_heads"]  # the planted Markov head carried the runs
    assert f"{report['tau_without_heads']:.2f}" in (out / "README.md").read_text()
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_model_type"] == "dflash" and "calibration" not in config["dspark"]
    assert not any(k.startswith(("markov_head", "confidence_head")) for k in mx.load(str(out / "model.safetensors")))
    headless, back = load_drafter(models["speculators"], target), load_drafter(out, target)
    for head in ("markov_head", "confidence_head"):
        headless.net.pop(head)
    assert not back.has_markov and same_drafts(headless, back, target.projection) is None
    # without a target the acceptance is not made up: the message says how to measure it
    capsys.readouterr()
    assert (
        dspark(
            ["export", str(models["deepspec"]), "--format", "deepspec", "--out", str(tmp_path / "d2"), "--drop-heads"]
        )
        == 0
    )
    said = capsys.readouterr().out
    assert "not measured" in said and f"dspark bench --target TARGET --drafter {tmp_path / 'd2'}" in said


def test_a_drafter_trained_with_dspark_train_format_exports_exactly(models, target, plain, tmp_path):
    data = tmp_path / "data.txt"
    data.write_text(" ".join(f"w{i % 40}" for i in range(600)))
    options = {
        "speculators": ["--context-window", "12"],
        "deepspec": [],
        "zlab": ["--no-markov", "--no-confidence", "--context-window", "12"],
    }
    for fmt, extra in options.items():
        trained, out = tmp_path / f"trained-{fmt}", tmp_path / f"exported-{fmt}"
        assert (
            dspark(
                [
                    "train",
                    "--target",
                    str(models["target"]),
                    "--data",
                    str(data),
                    "--out",
                    str(trained),
                    "--format",
                    fmt,
                    "--steps",
                    "3",
                    "--batch",
                    "8",
                    "--seq-len",
                    "32",
                    "--prompt-len",
                    "6",
                    "--layers",
                    "1",
                    "--taps",
                    "1,3,4",
                    "--block-size",
                    "5",
                    "--eval-prompts",
                    "0",
                    "--no-compile",
                    "--no-progress",
                    *extra,
                ]
            )
            == 0
        )
        assert dspark(["export", str(trained), "--format", fmt, "--out", str(out)]) == 0
        original, exported = load_drafter(trained, target), load_drafter(out, target)
        assert same_drafts(original, exported, target.projection) is None
        assert same_drafts(original, exported, ProbeProjection(ckpt.VOCAB, ckpt.H, seed=3)) is None
        same_rounds(target, ckpt.PROMPT, plain, original, exported)


def test_an_export_that_would_draft_otherwise_is_not_written(models, tmp_path, capsys, monkeypatch):
    """The last guard: what was written is loaded back and must draft what the drafter drafts."""
    import dspark.export as export

    real = export.write

    def off_by_a_little(folder, drafter, plan):
        real(folder, drafter, plan)
        weights = mx.load(str(folder / "model.safetensors"))
        weights["layers.0.mlp.down_proj.weight"] = weights["layers.0.mlp.down_proj.weight"] * 1.01
        mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "pt"})

    monkeypatch.setattr(export, "write", off_by_a_little)
    out = tmp_path / "off"
    err = _refused(capsys, ["export", str(models["deepspec"]), "--format", "deepspec", "--out", str(out)])
    assert "would not draft what the drafter drafts (the backbone output" in err
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == []


def test_force_replaces_a_folder_only_once_the_export_is_in_place(models, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    err = _refused(capsys, ["export", str(models["zlab"]), "--format", "zlab", "--out", str(out)])
    assert "not empty" in err and (out / "keep.txt").read_text() == "mine"
    err = _refused(capsys, ["export", str(models["native"]), "--format", "zlab", "--out", str(out), "--force"])
    assert (out / "keep.txt").read_text() == "mine"  # a refused export with --force keeps what was there
    err = _refused(capsys, ["export", str(models["zlab"]), "--format", "zlab", "--out", str(models["zlab"]), "--force"])
    assert "holds the drafter being exported" in err and (models["zlab"] / "config.json").is_file()
    assert dspark(["export", str(models["zlab"]), "--format", "zlab", "--out", str(out), "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_inspect_says_which_formats_a_drafter_exports_to_exactly(models, capsys):
    capsys.readouterr()
    assert dspark(["inspect", str(models["speculators"]), "--json"]) == 0
    exports = json.loads(capsys.readouterr().out)["exports"]
    assert exports["exact"] == ["speculators"] and set(exports["refused"]) == {"deepspec", "zlab"}
    assert dspark(["inspect", str(models["native"])]) == 0
    text = capsys.readouterr().out
    assert "exports exactly to: no published format" in text and "not to zlab: z-lab DFlash" in text


DEMO = ROOT / "resources" / "demo"


#: What the bundled demo drafters ship as (dspark.demo.build.DRAFTERS): servable, so exported exactly.
SHIPPED = {"dspark": "speculators", "dflash": "zlab"}


@pytest.mark.parametrize("name", list(SHIPPED))
def test_the_bundled_demo_drafters_export_exactly_and_run_in_their_peer(name, tmp_path):
    """The demo drafters ship in servable formats (make-demo trains them with --format): each
    exports exactly and its peer package accepts the same drafts every round on the demo target."""
    src = DEMO / name
    if not (src / "config.json").is_file() or not (DEMO / "target" / "config.json").is_file():
        pytest.skip(f"no bundled demo {name} drafter or target in {DEMO}")
    from dspark.loading import read_drafter_config

    fmt = SHIPPED[name]
    assert read_drafter_config(src)[2] == LOADED_AS[fmt], f"resources/demo/{name} is not in {fmt}'s format"
    target = load_target(DEMO / "target")
    out = tmp_path / name
    assert dspark(["export", str(src), "--format", fmt, "--out", str(out)]) == 0
    original, exported = load_drafter(src, target), load_drafter(out, target)
    assert same_drafts(original, exported, target.projection) is None
    prompt = target.tokenizer.encode("def main():\n    ")[:16]
    base = run_to_summary(
        generate_plain(target, prompt, GenerationConfig(policy="fixed", max_tokens=N, stop_at_eos=False))
    )
    tau, tokens, logits = same_rounds(target, prompt, base, original, exported)
    if fmt == "speculators" and not exported.spec.own_embedding:
        tokens, tau, logits = ours(target, as_mlx_dspark_reads_it(exported), prompt, base.tokens[0], [])
    ref = peer(PEER[fmt], DEMO / "target", peer_dir(out, fmt, tmp_path), prompt)
    assert ref["tokens"][: len(tokens)] == tokens and tau[: len(ref["tau"]) - 1] == ref["tau"][:-1]
    assert np.allclose(logits, np.array(ref["round1_logits"]), atol=1e-3)


def test_export_help_lists_every_option_with_its_default(capsys):
    with pytest.raises(SystemExit):
        dspark(["export", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option in (
        "--format {speculators,deepspec,zlab}",
        "--out",
        "--verifier",
        "--drop-heads",
        "--target",
        "--prompt-set",
        "--max-tokens",
        "--force",
        "--json",
    ):
        assert option in text, option
    assert "(default: demo)" in text and "(default: 128)" in text and "the README says TARGET" in text


def test_the_bench_hands_mlx_dspark_a_speculators_head_with_its_taps_as_it_reads_them(models, tmp_path):
    """dspark bench --peer mlx-dspark: the peer taps the layers dspark taps (ckpt.for_mlx_dspark's relabelling)."""
    from dspark.bench.peer_server import _with_taps_as_read

    src = models["speculators"]
    given = Path(_with_taps_as_read(str(src)))
    assert json.loads((given / "config.json").read_text())["aux_hidden_state_layer_ids"] == ckpt.TAPS
    assert (given / "model.safetensors").resolve() == (src / "model.safetensors").resolve()
    config = json.loads((src / "config.json").read_text())
    older = ckpt._save(tmp_path / "older", {**config, "aux_hidden_state_layer_ids": ckpt.TAPS}, {"x": mx.zeros((1,))})
    assert _with_taps_as_read(str(older)) == str(older) and _with_taps_as_read(str(models["zlab"])) == str(
        models["zlab"]
    )

"""``dspark train --kind eagle3|assistant`` (``dspark.training.heads``, ``dspark.training.stepwise``):
the loss computes, step for step, the logits the head's session drafts; a short run on the tiny
target lowers the loss and drafts better than the untrained head; the directories it writes are
in the published layouts, load with ``load_drafter`` and generate exactly what plain decoding
does, past several sliding windows; ``--resume`` continues exactly; mlx-vlm loads and runs them
(``peers/run_peer.py`` in ``.venv-peers``); the CLI refuses what does not apply to a kind."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
from pathlib import Path

import drafter_checkpoints as ckpt
import mlx.core as mx
import numpy as np
import pytest

from dspark import GenerationConfig, generate, generate_plain, load_target, run_to_summary
from dspark.cli import main as dspark
from dspark.config import SamplingParams
from dspark.errors import DsparkError
from dspark.formats import assistant
from dspark.loading import load_drafter
from dspark.modeldir import drafter_format
from dspark.training.calibrate import evaluate_drafter
from dspark.training.data import Sequences
from dspark.training.heads import HeadConfig, new_head
from dspark.training.stepwise import StepFeatures, StepwiseTrainer, assistant_logits, eagle3_logits, train_head
from dspark.training.trainer import STATE_FILE, TrainSettings

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / ".venv-peers" / "bin" / "python"
KINDS = {
    "eagle3": HeadConfig(kind="eagle3", block_size=4, num_layers=1),
    "assistant": HeadConfig(kind="assistant", block_size=4, num_layers=2),
}
SETTINGS = TrainSettings(
    steps=120,
    batch_anchors=8,
    anchors_per_seq=4,
    lr=3e-3,
    seq_len=48,
    prompt_len=8,
    self_distill=True,
    max_sequences=48,
    eval_prompts=4,
    eval_tokens=40,
)
N = 70  # tokens generated: more than four sliding windows (16) of the target
QUIET = dict(progress=False, log=lambda m: None)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("kinds")
    target_dir = ckpt.write_target(root / "target", ckpt.target_model())
    target = load_target(target_dir)
    rng = np.random.default_rng(0)
    texts = [[int(x) for x in rng.integers(5, 200, size=60)] for _ in range(60)]
    trained = {}
    for kind, cfg in KINDS.items():
        data = root / "eagle3" / ".train" / "train_data.safetensors" if kind != "eagle3" else None
        train_head(target, texts, root / kind, cfg, settings=SETTINGS, data_file=data, **QUIET)
        trained[kind] = root / kind
    return {"root": root, "target_dir": target_dir, "target": target, "texts": texts, **trained}


def _features(target, drafter, seq: list[int], P: int):
    seqs = Sequences(np.array([seq], np.int32), np.array([len(seq)], np.int32), np.array([P], np.int32))
    if drafter.format == assistant.FORMAT:
        src, kinds = assistant.shared_layers(target), sorted(set(drafter.spec.text.layer_types))
        f = StepFeatures(target, seqs, taps=(), kv_layers=[src[k] for k in kinds], mb=64).get_many([0], len(seq))
        return f, kinds
    return StepFeatures(target, seqs, taps=drafter.tap_layers, kv_layers=(), mb=64).get_many([0], len(seq)), None


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_loss_computes_what_the_session_drafts(world, kind):
    """The training forward's logits at an anchor, step for step, are the session's when it
    drafts there: fed the tokens the session drafted, after a prompt longer than the target's
    sliding window (the assistant's sliding rows)."""
    target, G = world["target"], 4
    drafter = load_drafter(world[kind], target)
    prefix = [int(x) for x in np.random.default_rng(1).integers(5, 200, size=40)]
    P = len(prefix) - 1
    cache = target.make_cache()
    taps = drafter.tap_layers if kind == "eagle3" else ()
    _, rows = target.forward(mx.array([prefix[:-1]]), cache, (*taps, target.dims.num_layers - 1), logits=False)
    rows = rows[..., : len(taps) * target.dims.hidden_size] if kind == "eagle3" else rows
    session = drafter.start(target, cache=cache)
    drafted = session.propose(
        prefix[-1],
        P,
        new_rows=rows,
        history=prefix,
        block_size=G,
        sampling=SamplingParams(temperature=0.0),
        key=mx.random.key(0),
    )
    seq = prefix + [int(t) for t in np.array(drafted.tokens[0])] + [0]
    feats, kinds = _features(target, drafter, seq, P)
    if kind == "eagle3":
        ours = eagle3_logits(
            drafter.net,
            embed=target.projection.table,
            taps=feats[0],
            tokens=mx.array([seq]),
            owner=mx.array([0, 0]),
            anchors=mx.array([P - 3, P]),
            G=G,
            norm_output=False,
        )[1]
    else:
        shared = {k: (feats[1 + 2 * i], feats[2 + 2 * i]) for i, k in enumerate(kinds)}
        window = drafter.spec.text.sliding_window + 1
        ours = assistant_logits(
            drafter.net,
            embed=target.projection.embed,
            final=feats[0],
            shared=shared,
            tokens=mx.array([seq]),
            owner=mx.array([0, 0]),
            anchors=mx.array([P - 3, P]),
            G=G,
            window=window,
        )[1]
    assert np.abs(np.array(ours) - np.array(drafted.logits[0])).max() < 1e-4


@pytest.mark.parametrize("kind", list(KINDS))
def test_training_lowers_the_loss_and_drafts_better_than_the_untrained_head(world, kind):
    report = json.loads((world[kind] / "train_report.json").read_text())
    assert report["steps_done"] == SETTINGS.steps and report["drafter"]["kind"] == kind
    target = world["target"]
    untrained = new_head(target, KINDS[kind], seed=SETTINGS.seed)
    # the held-out prompts the report's evaluation used, kept with the data
    held = Sequences.load(world[kind] / ".train" / "train_data.safetensors", target.dims.vocab_size)[1]
    before, _ = evaluate_drafter(target, untrained, held[: SETTINGS.eval_prompts], SETTINGS.eval_tokens)
    after = report["heldout"]
    assert after["tau"] > before["tau"] + 0.05, (before["tau"], after["tau"])
    assert after["per_position_acceptance"][0] > before["per_position_acceptance"][0]


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_written_head_is_in_its_published_layout_and_lossless(world, kind):
    out, target = world[kind], world["target"]
    config = json.loads((out / "config.json").read_text())
    assert drafter_format(config) == ("eagle3" if kind == "eagle3" else assistant.FORMAT)
    if kind == "eagle3":
        assert config["speculators_model_type"] == "eagle3"
        assert config["transformer_layer_config"]["model_type"] == "llama"
        assert not config["fc_norm"] and not config["transformer_layer_config"]["use_sliding_window"]
    else:
        assert config["model_type"] == "gemma4_assistant" and config["backbone_hidden_size"] == 64
        assert json.loads((out / "generation_config.json").read_text())["num_assistant_tokens"] == 4
    assert not list(out.glob("*.safetensors"))[1:]  # the checkpoint stays in .train/
    drafter = load_drafter(out, target)
    config = GenerationConfig(policy="fixed", max_tokens=N, stop_at_eos=False)
    plain = run_to_summary(generate_plain(target, ckpt.PROMPT, config))
    ours = run_to_summary(generate(target, drafter, ckpt.PROMPT, config, display=False))
    assert ours.tokens == plain.tokens


@pytest.mark.parametrize("kind", list(KINDS))
def test_resume_continues_exactly(world, kind, tmp_path, monkeypatch):
    """Nine steps in one run, and nine steps stopped by Ctrl-C after six and resumed: the same
    weights."""
    target, texts = world["target"], world["texts"]
    data = world["eagle3"] / ".train" / "train_data.safetensors"
    s = dataclasses.replace(SETTINGS, steps=9, eval_prompts=0, compile=False, checkpoint_minutes=0.0)
    cfg = KINDS[kind]
    train_head(target, texts, tmp_path / "one", cfg, settings=s, data_file=data, **QUIET)
    step = StepwiseTrainer.train_step

    def interrupted(self, batch):
        out = step(self, batch)
        if self.step == 6:
            os.kill(os.getpid(), signal.SIGINT)  # noted by the loop, acted on between steps
        return out

    monkeypatch.setattr(StepwiseTrainer, "train_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_head(target, texts, tmp_path / "two", cfg, settings=s, data_file=data, **QUIET)
    monkeypatch.setattr(StepwiseTrainer, "train_step", step)
    train_head(target, texts, tmp_path / "two", cfg, settings=s, resume=True, **QUIET)
    one = mx.load(str(tmp_path / "one" / "model.safetensors"))
    two = mx.load(str(tmp_path / "two" / "model.safetensors"))
    assert set(one) == set(two)
    assert all(np.array_equal(np.array(one[k]), np.array(two[k])) for k in one)
    with pytest.raises(DsparkError, match="trained with lr"):
        train_head(target, texts, tmp_path / "two", cfg, settings=dataclasses.replace(s, lr=1e-3), resume=True, **QUIET)


def peer(world, kind: str, runner: str, block: int, prompt: list[int], n: int) -> dict:
    if os.environ.get("DSPARK_SKIP_PEERS"):
        pytest.skip("DSPARK_SKIP_PEERS is set")
    if not PEERS.exists():
        pytest.skip("the peer environment .venv-peers is missing (make peers)")
    cmd = [str(PEERS), str(ROOT / "tests" / "peers" / "run_peer.py"), f"{runner}:{block}", str(world["target_dir"])]
    cmd += [str(world[kind]), str(n), *map(str, prompt)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


#: mlx-vlm's EAGLE-3 loop verifies a head drafting over the whole vocabulary in two target calls
#: and rolls them back, which leaves plain decoding once the target's sliding window (16) is
#: full (measured: at once after a 20-token prompt); it is compared before that.
MLX_VLM_RUNS = {"eagle3": ("mlx-vlm-eagle3", ckpt.PROMPT[:6], 9), "assistant": ("mlx-vlm-mtp", ckpt.PROMPT, N)}


@pytest.mark.parametrize("kind", list(KINDS))
def test_mlx_vlm_loads_and_runs_the_written_head(world, kind):
    """mlx-vlm loads the directory with its own loader (its draft kind for it: eagle3, mtp) and
    drafts with it in its own loop: plain greedy decoding's output, some drafts accepted."""
    runner, prompt, n = MLX_VLM_RUNS[kind]
    config = GenerationConfig(policy="fixed", max_tokens=n, stop_at_eos=False)
    plain = run_to_summary(generate_plain(world["target"], prompt, config))
    ref = peer(world, kind, runner, KINDS[kind].block_size, prompt, n)
    assert ref["tokens"] == list(plain.tokens)
    assert max(ref["tau"]) > 1


def test_the_cli_trains_a_kind_and_refuses_what_does_not_apply(world, tmp_path, capsys):
    target_dir, data = str(world["target_dir"]), tmp_path / "data.txt"
    data.write_text("def f(x):\n    return x\n" * 40)
    out = str(tmp_path / "e")
    base = ["train", "--target", target_dir, "--data", str(data), "--out", out, "--no-progress"]
    refusals = {
        "--no-markov is a block drafter's setting: an eagle3 head has no such setting": ["eagle3", "--no-markov"],
        "--format is a block drafter's setting": ["eagle3", "--format", "zlab"],
        "not taps": ["assistant", "--taps", "1,3"],
    }
    for sentence, args in refusals.items():
        assert dspark([*base, "--kind", *args]) != 0
        assert sentence in capsys.readouterr().err
    small = ["--steps", "3", "--batch", "4", "--seq-len", "24", "--max-sequences", "4", "--eval-prompts", "0"]
    assert dspark([*base, "--kind", "eagle3", *small, "--block-size", "3", "--layers", "1"]) == 0
    assert json.loads((tmp_path / "e" / "config.json").read_text())["speculators_model_type"] == "eagle3"
    assert (tmp_path / "e" / STATE_FILE).is_file()
    # --resume keeps the run's kind and shape; another kind is refused
    assert dspark([*base, "--kind", "assistant", "--resume", "--steps", "4"]) != 0
    assert "trains the eagle3 kind, not --kind assistant" in capsys.readouterr().err
    assert dspark([*base, "--resume", "--steps", "4"]) == 0
    resumed = load_drafter(tmp_path / "e", world["target"])
    assert resumed.block_size == 3 and json.loads((tmp_path / "e" / "train_report.json").read_text())["steps_done"] == 4


def test_a_time_budget_counts_training_steps_not_the_data(world, tmp_path):
    """The budget is the training's: a run whose self-distillation alone outlasts it still trains
    (a budget counted from the command's start once trained 0 steps, after 40 minutes of data)."""
    settings = dataclasses.replace(SETTINGS, steps=400, time_budget_minutes=0.002)  # 0.12 s
    train_head(world["target"], world["texts"], tmp_path / "e3", KINDS["eagle3"], settings=settings, **QUIET)
    report = json.loads((tmp_path / "e3" / "train_report.json").read_text())
    assert report["stopped_by"] == "time budget" and 1 <= report["steps_done"] < 400

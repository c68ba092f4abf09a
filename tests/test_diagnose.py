"""``dspark diagnose``: each finding code planted and named, the demo pair healthy, the JSON
fields, the profile written by training and by calibrate, ``--record`` kept outside the drafter,
and bad inputs as one line.

The planted causes run on tests/diagnose_world.py's hand-built target (a bigram that sinks into
one token past long contexts or without BOS) and drafters trained on it here in seconds; the
healthy pair is the bundled demo pair.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from diagnose_world import PROMPTS, bos_prompt, write_target

from dspark import DflashConfig, load_drafter, load_target
from dspark.cli import main as dspark
from dspark.config import GenerationConfig
from dspark.diagnose import checks as C
from dspark.diagnose import diagnose
from dspark.diagnose.acceptance import Measurement, Stopped, conditional, pooled_conditional
from dspark.diagnose.findings import Finding, ordered
from dspark.drafter_profile import PROFILE_FILE, Profile, find, read_file
from dspark.resources import demo_model
from dspark.training.train import train_drafter
from dspark.training.trainer import TrainSettings

TRAIN = TrainSettings(
    steps=200,
    batch_anchors=32,
    lr=3e-3,
    seq_len=64,
    prompt_len=8,
    self_distill=True,
    eval_prompts=4,
    eval_tokens=32,
    anchors_per_seq=8,
)
NATIVE = DflashConfig(block_size=4, num_layers=1, markov_rank=32, tap_layers=(1, 3, 4))
PUBLISHED = DflashConfig(
    block_size=4, num_layers=1, markov=False, confidence=False, tap_layers=(1, 3, 4), format="speculators"
)
SHORT = GenerationConfig(policy="fixed", max_tokens=40)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The target (and one of other weights), a native drafter and a published one trained on it."""
    root = tmp_path_factory.mktemp("world")
    write_target(root / "target", seed=0)
    write_target(root / "other", seed=1)
    target = load_target(root / "target")
    rng = np.random.default_rng(0)
    texts = [bos_prompt(rng, 24) for _ in range(200)]
    quiet = dict(progress=False, log=lambda m: None)
    train_drafter(target, texts, root / "native", NATIVE, settings=TRAIN, **quiet)
    train_drafter(target, texts, root / "published", PUBLISHED, settings=TRAIN, **quiet)
    return root, target


@pytest.fixture(autouse=True)
def own_profiles_dir(tmp_path, monkeypatch):
    """Recorded profiles go to a folder of the test's own, never the person's."""
    monkeypatch.setenv("DSPARK_PROFILES_DIR", str(tmp_path / "profiles"))


def run(world, drafter_dir, prompts=PROMPTS, config=SHORT, target=None):
    root, default = world
    target = target or default
    drafter = load_drafter(drafter_dir, target)
    return diagnose(target, drafter, prompts, config, profile=find(drafter_dir, drafter))


def codes(d, severities=("error", "warn", "info")) -> set[str]:
    return {f.code for f in d.findings if f.severity in severities}


# ----------------------------------------------------------------------------- healthy
def test_the_trained_pair_is_healthy_as_trained(world):
    root, target = world
    drafter = load_drafter(root / "native", target)
    calls = []
    d = diagnose(
        target,
        drafter,
        PROMPTS,
        SHORT,
        profile=find(root / "native", drafter),
        progress=lambda done, total, what: calls.append((done, total)),
    )
    assert d.per_position_acceptance[0] > 0.9 and d.tau > 3 and d.profile_source == "training"
    assert not codes(d), d.findings
    assert calls == [(i, len(PROMPTS)) for i in range(1, len(PROMPTS) + 1)]  # one pass: nothing to compare
    with pytest.raises(Stopped):
        diagnose(target, drafter, PROMPTS, SHORT, cancel=lambda: True)


@pytest.mark.parametrize("name", ["dspark", "dflash"])
def test_the_demo_pair_on_the_demo_set_gets_no_warning_or_error(name, capsys):
    target, drafter = demo_model("target"), demo_model(name)
    assert (
        dspark(["diagnose", "--target", str(target), "--drafter", str(drafter), "--prompt-set", "demo", "--json"]) == 0
    )  # the defaults: what a person runs
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"findings", "per_position_acceptance", "expected_per_position", "tau"}
    assert out["tau"] > 1.5 and len(out["per_position_acceptance"]) >= 1
    assert all(set(f) == {"code", "severity", "sentence", "evidence"} for f in out["findings"])
    assert not [f for f in out["findings"] if f["severity"] in ("warn", "error")], out["findings"]


# ----------------------------------------------------------------------------- each code planted
def test_target_mismatch_a_fine_tune_that_left_the_norms_alone(world, tmp_path):
    """A fine-tune of the target the drafter was trained on (its head moved, every norm as it was:
    the norms' fingerprint cannot tell it apart) is named from the profile's finer weights digest,
    with both digests and the drop against the profile, at the severity the drop deserves."""

    root, target = world
    tuned = tmp_path / "tuned"
    shutil.copytree(root / "target", tuned)
    w = mx.load(str(tuned / "model.safetensors"))
    rng = np.random.default_rng(3)
    head = np.array(w["lm_head.weight"])
    w["lm_head.weight"] = mx.array(0.3 * head + 0.7 * head[rng.permutation(head.shape[0])])
    mx.save_safetensors(str(tuned / "model.safetensors"), w)
    other = load_target(tuned)
    assert other.weights_fingerprint == target.weights_fingerprint and other.weights_digest != target.weights_digest
    profile = find(root / "native", load_drafter(root / "native", target))
    assert profile.target_digest == target.weights_digest  # training's profile keeps it
    d = run(world, root / "native", target=other)
    f = next(f for f in d.findings if f.code == "target_mismatch")
    assert f.severity in ("warn", "error") and "same norms" in f.sentence
    assert (
        f.evidence["recorded_digest"] == target.weights_digest and f.evidence["target_digest"] == other.weights_digest
    )
    assert f.evidence["accepted"] < 0.85 * f.evidence["expected_accepted"]
    assert not [f for f in run(world, root / "native").findings if f.code == "target_mismatch"]  # its own target


def test_target_mismatch_other_weights_of_the_same_shape(world):
    root, target = world
    other = load_target(root / "other")
    assert other.target_id == target.target_id and other.weights_fingerprint != target.weights_fingerprint
    d = run(world, root / "native", target=other)
    f = next(f for f in d.findings if f.code == "target_mismatch")
    assert f.severity == "error" and f.evidence["accepted"] < 0.5 * f.evidence["expected_accepted"]
    assert d.findings[0].code == "target_mismatch"


def test_block_beyond_trained(world):
    root, _ = world
    d = run(world, root / "native", config=dataclasses.replace(SHORT, block_size=9))
    f = next(f for f in d.findings if f.code == "block_beyond_trained")
    assert f.evidence["trained_block"] == 4 and "--block-size 4" in f.sentence


def test_chat_template_off(world):
    root, _ = world
    d = run(world, root / "native", config=dataclasses.replace(SHORT, chat_template=False))
    f = next(f for f in d.findings if f.code == "chat_template_off")
    assert f.severity == "warn" and f.evidence["accepted_with_template"] > 2 > f.evidence["accepted"]
    assert "low_acceptance" not in codes(d)  # another cause was found


def test_thinking_mode(world):
    root, _ = world
    assert read_file(root / "native" / PROFILE_FILE).thinking is False
    d = run(world, root / "native", config=dataclasses.replace(SHORT, chat_template_config='{"enable_thinking": true}'))
    assert "thinking_mode" in codes(d, ("warn",))


def test_sampling(world):
    root, _ = world
    d = run(world, root / "native", config=dataclasses.replace(SHORT, temperature=1.0))
    f = next(f for f in d.findings if f.code == "sampling")
    assert f.evidence["accepted"] < f.evidence["accepted_greedy"] and f.evidence["share_lost"] >= C.LOSS_NOISE


def test_context_length(world):
    root, _ = world
    rng = np.random.default_rng(1)
    d = run(world, root / "native", prompts=[bos_prompt(rng, 1200) for _ in range(2)])
    f = next(f for f in d.findings if f.code == "context_length")
    assert f.severity == "warn" and f.evidence["trained_context"] == TRAIN.seq_len
    assert "low_acceptance" not in codes(d)


def test_low_acceptance_of_an_untrained_drafter(tmp_path, capsys):
    """On the demo target: on the world's bigram target even an untrained drafter's first draft is
    right (its residual carries the anchor's embedding to the target's head, which is the bigram)."""
    target = str(demo_model("target"))
    assert dspark(["init", "--target", target, "--out", str(tmp_path / "random"), "--seed", "3"]) == 0
    capsys.readouterr()
    assert (
        dspark(
            [
                "diagnose",
                "--target",
                target,
                "--drafter",
                str(tmp_path / "random"),
                "--limit",
                "2",
                "--max-tokens",
                "40",
                "--json",
            ]
        )
        == 0
    )
    found = json.loads(capsys.readouterr().out)["findings"]
    assert [(f["code"], f["severity"]) for f in found if f["severity"] != "info"] == [("low_acceptance", "error")]
    assert "does not fit this target or this text" in found[0]["sentence"]


def test_convention_names_the_flag_and_the_flag_restores_acceptance(world, tmp_path):
    """A published checkpoint trained with the anchor slot predicting, whose config says it does
    not (speculators' speculative_tokens one short: slot 0 a pure anchor)."""
    root, target = world
    planted = tmp_path / "planted"
    shutil.copytree(root / "published", planted)
    config = json.loads((planted / "config.json").read_text())
    config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = config["block_size"] - 1
    config["sample_from_anchor"] = False
    (planted / "config.json").write_text(json.dumps(config))
    d = run(world, planted)
    f = next(f for f in d.findings if f.code == "convention")
    assert f.severity == "error" and f.evidence["convention"] == "anchor_predicts" and f.evidence["value"] is True
    assert f.evidence["flag"] in f.sentence
    config.setdefault("dspark", {}).update(json.loads(f.evidence["flag"])["dspark"])
    (planted / "config.json").write_text(json.dumps(config))
    fixed = run(world, planted)
    assert "convention" not in codes(fixed) and fixed.tau > d.tau + 0.5


def test_a_drafter_weak_as_its_training_measured_is_not_read_again_under_other_conventions(world):
    """Low position-1 acceptance makes diagnose try a published checkpoint's other readings,
    unless the drafter's own training measured it that low on these weights (then only far below
    the profile is low): the demo's DFlash-style drafter was otherwise measured four times."""
    from dspark.diagnose.run import LOW_FIRST, _looks_low

    _, target = world
    weak = Measurement(rounds=100, tau=1.9, per_position=(0.45, 0.3), by_context=(), max_position=200)
    far = dataclasses.replace(weak, per_position=(0.2, 0.1))
    assert weak.first < LOW_FIRST

    def profile(source, fingerprint=target.weights_fingerprint):
        return Profile(
            per_position_acceptance=(0.49, 0.33),
            block_size=4,
            target_id=target.target_id,
            target_fingerprint=fingerprint,
            templated=None,
            thinking=None,
            context_length=64,
            source=source,
        )

    assert not _looks_low(weak, profile("training"), target)
    assert _looks_low(far, profile("training"), target)  # far below what training measured
    assert _looks_low(weak, None, target)
    assert _looks_low(weak, profile("recorded"), target)  # recorded under whatever reading was in use
    assert _looks_low(weak, profile("training", fingerprint="other weights"), target)


# ----------------------------------------------------------------------------- profiles
def test_training_writes_the_profile(world):
    root, target = world
    for name in ("native", "published"):
        p = read_file(root / name / PROFILE_FILE)
        report = json.loads((root / name / "train_report.json").read_text())
        assert (
            p.source == "training" and list(p.per_position_acceptance) == report["heldout"]["per_position_acceptance"]
        )
        assert p.target_fingerprint == target.weights_fingerprint and p.target_id == target.target_id
        assert (p.templated, p.thinking, p.context_length, p.block_size) == (False, False, TRAIN.seq_len, 4)


def test_calibrate_writes_the_profile_and_keeps_the_trained_context(world, tmp_path):
    root, _ = world
    out = tmp_path / "calibrated"  # its default prompts are texts, put in the template (and so after BOS)
    assert (
        dspark(
            [
                "calibrate",
                "--target",
                str(root / "target"),
                "--drafter",
                str(root / "native"),
                "--out",
                str(out),
                "--rounds",
                "30",
                "--max-tokens",
                "16",
            ]
        )
        == 0
    )
    p = read_file(out / PROFILE_FILE)
    assert p.source == "calibrate" and p.context_length == TRAIN.seq_len and (p.templated, p.thinking) == (True, False)
    assert len(p.per_position_acceptance) == 4 and p.per_position_acceptance[0] > 0.5


def test_record_keeps_the_profile_outside_the_drafter_and_diagnose_uses_it(world, tmp_path, capsys):
    root, _ = world
    drafter = tmp_path / "published"
    shutil.copytree(root / "published", drafter)
    for f in (PROFILE_FILE, "train_report.json"):
        (drafter / f).unlink()
    before = sorted(p.name for p in drafter.rglob("*"))
    common = [
        "diagnose",
        "--target",
        str(root / "target"),
        "--drafter",
        str(drafter),
        "--prompts",
        str(_prompt_file(tmp_path)),
        "--max-tokens",
        "32",
        "--json",
    ]
    assert dspark(common) == 0
    assert json.loads(capsys.readouterr().out)["expected_per_position"] is None
    assert dspark([*common, "--record"]) == 0
    recorded = Path(json.loads(capsys.readouterr().out)["recorded"])
    assert recorded.parent == tmp_path / "profiles" and recorded.is_file()
    assert sorted(p.name for p in drafter.rglob("*")) == before  # nothing written into the drafter
    assert dspark(common) == 0
    out = json.loads(capsys.readouterr().out)
    assert (
        out["profile"] == "recorded"
        and out["expected_per_position"] == read_file(recorded).to_dict()["per_position_acceptance"]
    )
    assert read_file(recorded).templated is True  # the prompts went through the template


def _prompt_file(tmp_path: Path) -> Path:
    f = tmp_path / "prompts.json"
    f.write_text(json.dumps(PROMPTS))
    return f


# ----------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize(
    "extra, words",
    [
        (["--limit", "0"], "--limit must be"),
        (["--prompt-set", "nope"], "no prompt set 'nope'"),
        (["--prompts", "/nonexistent/p.json"], "not found"),
        (["--chat-template-config", "{nope"], "not valid JSON"),
        (["--temperature", "-1"], "temperature must be"),
    ],
)
def test_bad_inputs_are_one_line_and_exit_2(world, extra, words, capsys):
    root, _ = world
    assert dspark(["diagnose", "--target", str(root / "target"), "--drafter", str(root / "native"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dspark: error:") and words in err and "\n" not in err


def test_a_missing_drafter_or_a_damaged_profile_is_one_line(world, tmp_path, capsys):
    root, _ = world
    assert dspark(["diagnose", "--target", str(root / "target"), "--drafter", str(tmp_path / "none")]) == 2
    assert "drafter directory not found" in capsys.readouterr().err
    drafter = tmp_path / "native"
    shutil.copytree(root / "native", drafter)
    (drafter / PROFILE_FILE).write_text('{"version": 1, "per_position_acceptance": [2.0]}')
    assert dspark(["diagnose", "--target", str(root / "target"), "--drafter", str(drafter)]) == 2
    err = capsys.readouterr().err.strip()
    assert "is not a drafter profile" in err and "\n" not in err


def test_a_bad_convention_flag_is_one_line(world, tmp_path, capsys):
    root, _ = world
    drafter = tmp_path / "published"
    shutil.copytree(root / "published", drafter)
    config = json.loads((drafter / "config.json").read_text())
    config["dspark"]["conventions"] = {"anchor_predicts": "yes"}
    (drafter / "config.json").write_text(json.dumps(config))
    assert dspark(["diagnose", "--target", str(root / "target"), "--drafter", str(drafter)]) == 2
    assert 'anchor_predicts is "yes", expected true or false' in capsys.readouterr().err


# ----------------------------------------------------------------------------- the pure parts
def test_figures_follow_their_definitions():
    assert conditional([0.8, 0.4, 0.0, 0.0]) == [0.8, 0.5, 0.0, None]
    # positions 3-4 reached by 0.4 and 0.2 of the rounds, kept by 0.2 and 0.1: pooled 0.3 / 0.6
    assert pooled_conditional([0.8, 0.4, 0.2, 0.1], 2, 4) == pytest.approx(0.5)
    assert pooled_conditional([0.0, 0.0], 1) is None


def _facts(**kw) -> C.Facts:
    m = Measurement(rounds=50, tau=1.02, per_position=(0.02, 0.0), by_context=(), max_position=90)
    base = dict(
        main=m,
        greedy=m,
        temperature=0.0,
        block_size=2,
        trained_block=2,
        target_fingerprint="a",
        recorded_fingerprint="a",
        profile=None,
        has_template=False,
        templated=None,
        thinking=None,
    )
    return C.Facts(**{**base, **kw})


def test_low_acceptance_speaks_only_when_nothing_else_explains_it():
    assert [f.code for f in C.run_checks(_facts())] == ["low_acceptance"]
    few = Measurement(rounds=3, tau=1.0, per_position=(0.0,), by_context=(), max_position=9)
    assert C.run_checks(_facts(main=few, greedy=few)) == []  # too few rounds to judge
    sampled = Measurement(rounds=50, tau=1.0, per_position=(0.0, 0.0), by_context=(), max_position=90)
    greedy = Measurement(rounds=50, tau=3.0, per_position=(1.0, 1.0), by_context=(), max_position=90)
    assert [f.code for f in C.run_checks(_facts(main=sampled, greedy=greedy, temperature=1.0))] == ["sampling"]


def test_findings_are_ordered_most_severe_first():
    found = [
        Finding("sampling", "info", "x"),
        Finding("low_acceptance", "error", "y"),
        Finding("chat_template_off", "warn", "z"),
        Finding("target_mismatch", "error", "w"),
    ]
    assert [f.code for f in ordered(found)] == ["target_mismatch", "low_acceptance", "chat_template_off", "sampling"]


def test_a_block_past_the_trained_one_is_judged_only_on_enough_rounds():
    """Positions 3-4 past a trained block of 2: judged from the rounds that reached them (rounds x
    a_2), which must be at least MIN_ROUNDS; a few lucky rounds make no verdict either way."""

    def verdict(rounds, per_position):
        m = Measurement(
            rounds=rounds, tau=1 + sum(per_position), per_position=per_position, by_context=(), max_position=90
        )
        return C.block_beyond_trained(_facts(main=m, greedy=m, block_size=4))

    holds = verdict(50, (0.9, 0.8, 0.7, 0.6))  # 40 rounds reach position 3, which keeps 0.7/0.8
    assert holds.severity == "info" and holds.evidence["rounds_past"] == 40 and "hold up" in holds.sentence
    falls = verdict(50, (0.9, 0.8, 0.1, 0.0))
    assert falls.severity == "warn" and "greedy" in falls.sentence
    few = verdict(50, (0.5, 0.1, 0.1, 0.1))  # 5 rounds reach position 3: all kept, but too few to say so
    assert few.severity == "info" and "too few to judge" in few.sentence and "hold up" not in few.sentence

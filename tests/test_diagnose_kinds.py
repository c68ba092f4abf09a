"""``dspark diagnose`` on every drafter kind: the block-only checks (block_beyond_trained) stay
silent for autoregressive drafters (EAGLE-3, the Gemma-4 assistant), whose tokens a round are a
setting and not a trained block, and still speak for block drafters (DFlash, DFlash 2); an
assistant with the chat template off is told its drafts were trained on chat text
(chat_template_off); an assistant made for another Gemma-4 size is a finding (target_refused),
not a failed command.

The kinds are the miniature writers' (``assistant_checkpoints``, ``eagle3_checkpoints``,
``dflash2_checkpoints``, ``drafter_checkpoints``): on ``drafter_checkpoints``' tiny target for the
block checks, on an instruction-tuned miniature (``miniatures``, with its chat template) for the
assistant's template.
"""

from __future__ import annotations

import json

import assistant_checkpoints as ac
import dflash2_checkpoints as d2
import drafter_checkpoints as ckpt
import eagle3_checkpoints as e3
import miniatures as mini
import pytest

from dspark import load_drafter, load_target
from dspark.cli import main as dspark
from dspark.config import GenerationConfig
from dspark.diagnose import diagnose
from dspark.diagnose.findings import describe

PROMPTS = [ckpt.PROMPT, ckpt.PROMPT[5:] + [9, 9, 31]]


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    root = tmp_path_factory.mktemp("kinds")
    model = ckpt.target_model()
    t = ckpt.write_target(root / "target", model)
    table = model.model.embed_tokens.weight
    return {
        "target": t,
        "assistant": ac.write(root / "assistant", t),
        "eagle3": e3.write_eagle3(root / "eagle3", table, ckpt.PROMPT * 4, num_target_layers=6, aux_ids=[2, 4, 6]),
        "dflash2": d2.write_dflash2(root / "dflash2"),
        "zlab": ckpt.write_zlab(root / "zlab"),
        "other_size": ac.write(root / "other_size", t, backbone=128),
    }


@pytest.fixture(scope="module")
def target(kinds):
    return load_target(kinds["target"])


def codes(target, path, **config) -> set[str]:
    drafter = load_drafter(path, target)
    try:
        d = diagnose(
            target,
            drafter,
            PROMPTS,
            GenerationConfig(max_tokens=40, stop_at_eos=False, **{"policy": "fixed", **config}),
        )
    finally:
        drafter.dispose()
    assert d.rounds > 0 and len(d.per_position_acceptance) == config.get("block_size", drafter.block_size)
    return {f.code for f in d.findings}


@pytest.mark.parametrize("name", ["assistant", "eagle3"])
def test_more_tokens_a_round_is_no_block_past_training_for_an_autoregressive_drafter(kinds, target, name):
    """Past the default tokens a round (4 for the assistant, 5 for the head) no block was trained:
    the block check stays silent, and every other check runs on the rounds."""
    assert "block_beyond_trained" not in codes(target, kinds[name], block_size=9)


@pytest.mark.parametrize(("name", "trained"), [("zlab", 7), ("dflash2", 7)])
def test_a_block_drafter_past_its_trained_block_is_still_named(kinds, target, name, trained):
    """The same question asked of block drafters: the check speaks, so its silence above is the kind's."""
    assert "block_beyond_trained" in codes(target, kinds[name], block_size=trained + 2)
    assert "block_beyond_trained" not in codes(target, kinds[name], block_size=trained)


def test_an_assistant_for_another_size_is_a_finding_not_a_failure(kinds, capsys):
    args = ["diagnose", "--target", str(kinds["target"]), "--drafter", str(kinds["other_size"]), "--limit", "1"]
    capsys.readouterr()
    assert dspark(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("nothing measured: the drafter does not load for this target")
    assert "error  target_refused: the assistant was made for a Gemma-4 of hidden size 128" in out
    assert dspark([*args, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["findings"]
    assert [(f["code"], f["severity"]) for f in found] == [("target_refused", "error")]
    assert "use the assistant published for this size" in found[0]["sentence"]
    assert dspark([*args, "--record"]) == 2  # nothing to record: the refusal stays an error there


@pytest.fixture(scope="module")
def instructed(tmp_path_factory):
    """An instruction-tuned miniature (its tokenizer has the chat template) and its assistant."""
    root = tmp_path_factory.mktemp("it")
    t = mini.write_hf(root / "target", "31b", seed=5)
    return load_target(t), ac.write(root / "assistant", t)


def test_an_assistant_with_the_chat_template_off_is_told_it_was_trained_on_chat_text(instructed):
    target, path = instructed
    assert target.has_chat_template
    drafter = load_drafter(path, target)
    prompts = ["def fib(n):", "The capital of France is"]
    try:
        off = diagnose(target, drafter, prompts, GenerationConfig(policy="fixed", max_tokens=24, chat_template=False))
        on = diagnose(target, drafter, prompts, GenerationConfig(policy="fixed", max_tokens=24))
    finally:
        drafter.dispose()
    found = {f.code: f for f in off.findings}
    assert found["chat_template_off"].severity == "warn"
    assert "a Gemma-4 assistant is trained on chat-formatted text" in found["chat_template_off"].sentence
    assert found["chat_template_off"].evidence["trained_templated"] is True
    assert "chat_template_off" not in {f.code for f in on.findings}
    assert "chat_template_off" in describe(off)

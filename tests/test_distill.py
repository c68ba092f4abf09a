"""Self-distillation survives being stopped: the batches the target finished are kept after each
one, and a run started again decodes only the rest, ending with exactly the sequences of a run
that was never stopped (dspark.training.distill)."""

import numpy as np
import pytest
from tiny import tiny_target

import dspark.training.distill as distill
from dspark import DflashConfig
from dspark.training.data import Sequences
from dspark.training.distill import PARTIAL_GLOB, greedy_continuations
from dspark.training.resume import DATA_FILE
from dspark.training.train import train_drafter
from dspark.training.trainer import TrainSettings

CFG = DflashConfig(block_size=4, num_layers=1, tap_layers=(1, 3), markov_rank=16)


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0, vocab=96)


def _prompts(seed=0, n=10):
    rng = np.random.default_rng(seed)
    return [[int(x) for x in rng.integers(5, 96, size=int(rng.integers(4, 7)))] for _ in range(n)]


def _decoding(monkeypatch, stop_after: int | None = None) -> list[int]:
    """Count the rows the target decodes, batch by batch; with ``stop_after``, raise
    KeyboardInterrupt (a Ctrl-C) once that many batches have finished."""
    real, rows = distill._greedy_batch, []

    def batch(target, prompts, new):
        if len(rows) == stop_after:
            raise KeyboardInterrupt
        out = real(target, prompts, new)
        rows.append(len(prompts))
        return out

    monkeypatch.setattr(distill, "_greedy_batch", batch)
    return rows


def _same(a: Sequences, b: Sequences) -> None:
    for field in ("tokens", "lengths", "first_anchor"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field


def _texts():
    """Prompts of two lengths (6 tokens, and 4 at each document's end): two batches to decode."""
    rng = np.random.default_rng(2)
    return [[int(x) for x in rng.integers(5, 96, size=100)] for _ in range(20)]


SETTINGS = TrainSettings(
    steps=2, batch_anchors=8, seq_len=32, prompt_len=6, self_distill=True, eval_prompts=0, compile=False
)


def test_a_stopped_self_distillation_continues_after_its_last_batch(target, tmp_path, monkeypatch):
    prompts = _prompts()
    straight = greedy_continuations(target, prompts, 20, batch=2)
    before = _decoding(monkeypatch, stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        greedy_continuations(target, prompts, 20, batch=2, keep_in=tmp_path)
    monkeypatch.undo()
    assert len(before) == 2 and len(list(tmp_path.glob(PARTIAL_GLOB))) == 1
    after, said = _decoding(monkeypatch), []
    _same(greedy_continuations(target, prompts, 20, batch=2, keep_in=tmp_path, say=said.append), straight)
    assert sum(after) == len(prompts) - sum(before)  # the finished batches are not decoded again
    assert len(said) == 1 and said[0].startswith("self-distillation: continuing after 2 of")


def test_a_record_of_another_targets_continuations_is_not_resumed(target, tmp_path, monkeypatch):
    """Two targets of one architecture whose norms are all ones (the check drafters use cannot
    tell them apart) write different continuations: neither resumes from the other's record."""
    other, prompts = tiny_target(seed=1, vocab=96), _prompts(seed=3)
    assert other.target_id == target.target_id and other.weights_fingerprint == target.weights_fingerprint
    _decoding(monkeypatch, stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        greedy_continuations(target, prompts, 20, batch=2, keep_in=tmp_path)
    monkeypatch.undo()
    rows = _decoding(monkeypatch)
    _same(
        greedy_continuations(other, prompts, 20, batch=2, keep_in=tmp_path),
        greedy_continuations(other, prompts, 20, batch=2),
    )
    assert sum(rows) == 2 * len(prompts)  # both runs decoded every row: nothing was taken from target's record


def test_a_damaged_record_is_set_aside_and_the_job_starts_over(target, tmp_path, monkeypatch):
    prompts = _prompts(seed=1)
    straight = greedy_continuations(target, prompts, 16, batch=3)
    _decoding(monkeypatch, stop_after=1)
    with pytest.raises(KeyboardInterrupt):
        greedy_continuations(target, prompts, 16, batch=3, keep_in=tmp_path)
    monkeypatch.undo()
    (record,) = tmp_path.glob(PARTIAL_GLOB)
    record.write_bytes(record.read_bytes()[:40])  # cut short, as by a full disk
    after, said = _decoding(monkeypatch), []
    _same(greedy_continuations(target, prompts, 16, batch=3, keep_in=tmp_path, say=said.append), straight)
    assert sum(after) == len(prompts)
    assert len(said) == 1 and "is not a readable record" in said[0] and said[0].endswith("starts over")


def test_train_drafter_stopped_while_the_target_writes_resumes_to_the_same_data(target, tmp_path, monkeypatch):
    quiet = dict(progress=False, log=lambda m: None)
    train_drafter(target, _texts(), tmp_path / "straight", CFG, settings=SETTINGS, **quiet)
    straight, _ = Sequences.load(tmp_path / "straight" / DATA_FILE, 96)

    out = tmp_path / "stopped"
    _decoding(monkeypatch, stop_after=1)
    with pytest.raises(KeyboardInterrupt):
        train_drafter(target, _texts(), out, CFG, settings=SETTINGS, **quiet)
    monkeypatch.undo()
    assert list((out / ".train").glob(PARTIAL_GLOB)) and not (out / DATA_FILE).exists()
    said = []
    train_drafter(target, _texts(), out, CFG, settings=SETTINGS, resume=True, progress=False, log=said.append)
    resumed, _ = Sequences.load(out / DATA_FILE, 96)
    _same(resumed, straight)
    assert not list((out / ".train").glob(PARTIAL_GLOB))  # gone once the data is whole
    assert any(m.startswith("self-distillation: continuing after 1 of") for m in said)
    assert not any("nothing to resume" in m for m in said)


def test_a_run_without_resume_starts_its_self_distillation_over(target, tmp_path, monkeypatch):
    _decoding(monkeypatch, stop_after=1)
    with pytest.raises(KeyboardInterrupt):
        train_drafter(target, _texts(), tmp_path, CFG, settings=SETTINGS, progress=False, log=lambda m: None)
    monkeypatch.undo()
    rows, said = _decoding(monkeypatch), []
    train_drafter(target, _texts(), tmp_path, CFG, settings=SETTINGS, progress=False, log=said.append)
    assert not any("continuing" in m for m in said)
    assert sum(rows) == len(Sequences.load(tmp_path / DATA_FILE, 96)[0])  # every row decoded anew


def test_new_tokens_bounds_each_continuation_after_its_own_prompt(target):
    """The prompt-set filter's use: 5 tokens after every prompt, whatever its length, are the first
    5 of the unbounded continuation, and nothing is decoded past them."""
    prompts = _prompts(seed=4)
    straight = greedy_continuations(target, prompts, 20, batch=4)
    bounded = greedy_continuations(target, prompts, 20, batch=4, new_tokens=5)
    for p, row, n, full in zip(prompts, bounded.tokens, bounded.lengths, straight.tokens):
        assert n == len(p) + 5 and list(row[:n]) == list(full[: len(p) + 5])

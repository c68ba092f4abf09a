"""Google's Gemma-4 assistant (``dspark.formats.assistant``) round for round against mlx-vlm
0.7.10's own MTP loop (``peers/run_peer.py`` ``mlx-vlm-mtp``, in ``.venv-peers``), greedy, on a
miniature E2B (KV-shared layers, per-layer inputs; sliding window 16) as a text-only float32
target, and its assistant (``assistant_checkpoints.py``).

mlx-vlm's port departs from transformers (whose steps dspark computes, ``test_assistant.py``) in
two named places (docs/formats.md, "Gemma-4 assistant"), both read from its code and both
reproduced here by running ours under a test-only reading (never the default):

- where the queries sit: ``_mtp_rounds`` drafts at ``_mtp_draft_position(kv_offset)``, the
  cache's length - 1, the position of the last committed row; transformers' runtime drafts at
  ``input_ids.shape[1] - 1``, the anchor's (the bonus token's) position, one later;
- which sliding rows a step reads: mlx-vlm turns the target's sliding caches into
  ``BufferedRotatingKVCache`` (the window plus a buffer of ``max(32, min(128, 8 x block))`` rows)
  and its mask admits ``|q - k| < sliding_window`` with the query at ``min(query position,
  rows held)``: while the buffer holds every row from position 0 that is the last window rows;
  once a verify has overflowed it (the oldest rows dropped) the query sits one past the last row
  held and the step reads the last window - 1. transformers (and dspark) read window + 1.

Under that reading our draft logits equal mlx-vlm's in every round (float tolerance); under
transformers' they differ from the first step of the first round. The planted assistant's
choices follow its input token (``assistant_checkpoints.py``), so neither departure changes a
draft or an accepted length on this miniature: the same output and rounds either way."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import assistant_checkpoints as ac
import miniatures as mini
import numpy as np
import pytest

from dspark import GenerationConfig, generate, generate_plain, load_target, run_to_summary
from dspark.events import RoundEvent, Summary
from dspark.loading import load_drafter

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / ".venv-peers" / "bin" / "python"
PROMPT = [2, 17, 40, 33, 91]  # short, so that a few rounds run before the window of 16 fills
N, DRAFTS = 80, 4

pytestmark = pytest.mark.skipif(os.environ.get("DSPARK_SKIP_PEERS") is not None, reason="DSPARK_SKIP_PEERS is set")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("assistant_peers")
    mini.write_hf(root / "hf", "e2b", seed=3)
    target = ac.text_only(root / "hf", root / "target")  # mlx-lm and mlx-vlm load the very same weights
    return target, ac.write(root / "assistant", target, dtype="float32", block=DRAFTS)


def mlx_vlm(target: Path, assistant: Path) -> dict:
    assert PEERS.exists(), "the peer environment is missing: run `make peers` (make test does)"
    cmd = [
        str(PEERS),
        str(ROOT / "tests" / "peers" / "run_peer.py"),
        f"mlx-vlm-mtp:{DRAFTS}",
        str(target),
        str(assistant),
        str(N),
        *map(str, PROMPT),
    ]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


#: mlx-vlm's MTP buffer for its sliding caches (``_buffer_mtp_target_cache``): 8 x the larger of
#: the assistant config's ``block_size`` (its default 4 here) and the block asked for (drafts + bonus)
BUFFER = max(32, min(128, 8 * max(4, DRAFTS + 1)))


class EarlierQuery:
    """The assistant's network with its queries RoPE'd one position before the anchor, where
    mlx-vlm's ``_mtp_draft_position`` puts them (the K/V read stays the committed rows)."""

    def __init__(self, net):
        self.net = net

    def step(self, x, shared, position):
        return self.net.step(x, shared, position - 1)


def ours(target, assistant: Path, first: int, *, mlx_vlm_query: bool = False, mlx_vlm_rows: bool = False):
    """Our run aligned with mlx-vlm's, which takes the first token from the target's prefill and
    drafts from there (so the prompt here includes it), fixed at ``DRAFTS`` drafts a round:
    (tokens, {anchor position: (drafts, accepted, each step's logits)}). ``mlx_vlm_query``: the
    queries where mlx-vlm puts them; ``mlx_vlm_rows``: the sliding rows mlx-vlm reads (the window
    until a verify overflows its buffer, then window - 1)."""
    drafter = load_drafter(assistant, target)
    window = target.lm.args.sliding_window
    start_session, logits = drafter.start, {}

    def recording(t, *, cache=None):
        session = start_session(t, cache=cache)
        if mlx_vlm_query:
            session.net = EarlierQuery(session.net)
        propose, overflowed = session.propose, False

        def recorded(anchor, position, **kwargs):
            nonlocal overflowed
            if mlx_vlm_rows:
                session.window = window - 1 if overflowed else window
            rows = propose(anchor, position, **kwargs)
            logits[position] = np.array(rows.logits[0])
            # the verify that follows writes drafts + bonus rows after the anchor's position
            overflowed = overflowed or position + kwargs["block_size"] + 1 > window + BUFFER
            return rows

        session.propose = recorded
        return session

    drafter.start = recording
    config = GenerationConfig(max_tokens=N - 1, stop_at_eos=False, policy="fixed")
    rounds, summary = {}, None
    for ev in generate(target, drafter, PROMPT + [first], config):
        if isinstance(ev, Summary):
            summary = ev
        elif isinstance(ev, RoundEvent) and not ev.plain_step:
            rounds[ev.position] = (list(ev.drafted), ev.accepted, logits[ev.position])
    return [first, *summary.tokens], rounds


def theirs_by_position(ref: dict) -> dict:
    """mlx-vlm's rounds by their anchor's position: the first anchor is the token after the
    prompt, and each round moves it by the tokens it committed."""
    out, position = {}, len(PROMPT)
    for drafts, tau, logits in zip(ref["drafts"], ref["tau"], ref["logits"]):
        out[position] = (drafts, tau - 1, np.array(logits))
        position += tau
    return out


def differing(mine: dict, theirs: dict, last: int) -> list[int]:
    """Anchor positions both ran a round at (before mlx-vlm's last, which the token budget may
    clip) where the drafts or the accepted length differ."""

    def same(a, b) -> bool:
        return a[0][: len(b[0])] == b[0] and a[1] == b[1]

    return [p for p in sorted(set(mine) & set(theirs)) if p < last and not same(mine[p], theirs[p])]


def logit_gap(mine: dict, theirs: dict, positions: list[int]) -> float:
    """The largest difference of any step's draft logits over the rounds at ``positions``."""
    return max(float(np.abs(mine[p][2][: len(theirs[p][2])] - theirs[p][2]).max()) for p in positions)


def test_the_assistant_drafts_what_mlx_vlm_s_loop_drafts_round_for_round(pair):
    target_dir, assistant = pair
    target = load_target(target_dir)
    window = target.lm.args.sliding_window
    plain = run_to_summary(
        generate_plain(target, PROMPT, GenerationConfig(policy="fixed", max_tokens=N, stop_at_eos=False))
    )
    ref = mlx_vlm(target_dir, assistant)
    assert ref["kind"] == "mtp" and ref["tokens"] == list(plain.tokens)
    tokens, mine = ours(target, assistant, plain.tokens[0])
    assert tokens == ref["tokens"] and target.decode(tokens) == target.decode(ref["tokens"])  # the same text
    theirs = theirs_by_position(ref)
    last = max(theirs)
    # the window has not filled while a round's anchor has fewer than window rows before it
    before = [p for p in sorted(set(mine) & set(theirs)) if p < window]
    assert len(before) >= 3 and set(before) == {p for p in theirs if p < window} == {p for p in mine if p < window}
    assert sum(theirs[p][1] for p in before) > 0, "the planted assistant should have drafts accepted there"
    assert not differing(mine, theirs, last + 1), "the planted assistant's drafts follow their input token"
    common = sorted(set(mine) & set(theirs))
    assert set(mine) >= set(theirs) - {last} and common[-1] >= window + BUFFER + DRAFTS, "past the buffer's overflow"
    after = [p for p in common if p >= window]
    # mlx-vlm's reading: the queries one position earlier and its sliding rows; every step's logits
    _, as_mlx_vlm = ours(target, assistant, plain.tokens[0], mlx_vlm_query=True, mlx_vlm_rows=True)
    assert set(as_mlx_vlm) == set(mine) and not differing(as_mlx_vlm, theirs, last + 1)
    assert logit_gap(as_mlx_vlm, theirs, common) < 1e-3, "mlx-vlm's two departures explain its logits"
    # each departure shows: the queries' from the first round, the rows' once the window is full
    assert logit_gap(mine, theirs, before[:1]) > 0.5
    _, query_only = ours(target, assistant, plain.tokens[0], mlx_vlm_query=True)
    assert logit_gap(query_only, theirs, before) < 1e-3 < 0.1 < logit_gap(query_only, theirs, after)
    print(
        f"{len(common)} rounds at the same position ({len(before)} before the window filled), the same "
        f"drafts and accepted lengths; largest draft-logit difference from mlx-vlm's: "
        f"{logit_gap(mine, theirs, common):.2f} as transformers reads, "
        f"{logit_gap(query_only, theirs, common):.2f} with mlx-vlm's query position, "
        f"{logit_gap(as_mlx_vlm, theirs, common):.1e} with its sliding rows too"
    )

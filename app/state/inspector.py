"""The rejection inspector's words and figures, without Qt (issue #25): a draft-grid cell's story
(what the drafter proposed there, what the target thought of it, and why it was kept or not), and
the data of the two views, acceptance by context length and what a drafter gets wrong, one entry
per drafter. Everything is read from the runs' recorded events (``RoundEvent.target_top``,
``draft_rank``, ``draft_tie``, ``position``) and counted by ``dspark.metrics``: no model math."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dspark import metrics

from .runs import PLAIN_LABEL, Run, complete_prompts

#: What became of a drafted token, by its place in the round (the draft grid's colours).
STATES = ("accepted", "rejected", "discarded", "unverified")
#: The most frequent (drafted -> target) pairs the second view shows.
WRONG_PAIRS = 10


def cell_state(k: int, accepted: int, width: int) -> str:
    """Draft k (0-based) of a round that verified ``width`` drafts and accepted ``accepted``."""
    if k < accepted:
        return "accepted"
    if k == accepted and k < width:
        return "rejected"
    if k < width:
        return "discarded"
    return "unverified"


def visible(text: str) -> str:
    """A token's text with its whitespace visible (· space, ⏎ newline, ⇥ tab; ∅ no text of its own)."""
    return text.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "·") or "∅"


def prob(p: float | None) -> str:
    """A probability as the inspector writes it: three decimals, or two digits when it is smaller."""
    if p is None or p != p:  # None or NaN: not computed (a run without a screen)
        return "–"
    return f"{p:.3f}" if p >= 0.001 or p == 0 else f"{p:.1e}"


@dataclass(frozen=True, kw_only=True)
class Story:
    """One cell of the draft grid: a drafted token (``draft`` = k, 1-based) or, with ``draft`` 0,
    the target's own token of the round."""

    round: int
    draft: int
    token: int
    text: str  # its text, whitespace visible
    state: str  # one of STATES, or the target token's source (correction, bonus, target)
    verdict: str  # the headline: "accepted", "rejected", ...
    why: str  # one sentence: why it was kept or not
    q: float | None  # the drafter's probability of the drafted token (None for the target's token)
    p: float | None  # the target's probability of it, where recorded
    top: tuple[tuple[int, str, float], ...]  # the target's best tokens (id, text, probability), best first
    rank: int | None  # the drafted token's rank in the target's distribution (0: its choice); None: not recorded
    tie: bool  # rejected only at a numerical tie of the target's two best
    position: int  # tokens before this one in the sequence


def story(run: Run, row: int, col: int) -> Story | None:
    """The story of cell (``row``, ``col``) of ``run``'s draft grid (col = len(drafted): the
    target's token); None outside the grid."""
    if not 0 <= row < len(run.rounds):
        return None
    r = run.rounds[row]
    if col == len(r.drafted) and r.committed:
        return _target_story(r)
    if not 0 <= col < len(r.drafted):
        return None
    texts = run.drafted_text[row] if row < len(run.drafted_text) else ()
    text = texts[col] if col < len(texts) else f"#{r.drafted[col]}"
    state = cell_state(col, r.accepted, r.verify_width)
    top, rank, tie = (), None, False
    if r.target_top is not None and col < len(r.target_top):
        names = run.top_text[row][col] if row < len(run.top_text) and col < len(run.top_text[row]) else ()
        top = tuple(
            (t, visible(names[i]) if i < len(names) else f"#{t}", p) for i, (t, p) in enumerate(r.target_top[col])
        )
        rank = r.draft_rank[col] if r.draft_rank is not None else None
        tie = bool(r.draft_tie and r.draft_tie[col])
    p = next((pr for t, _n, pr in top if t == r.drafted[col]), None)
    if p is None and col < r.accepted and col < len(r.committed):
        p = r.committed[col].target_prob
    verdict, why = _why(run, r, col, state, tie=tie)
    q = r.draft_probs[col] if col < len(r.draft_probs) else None
    return Story(
        round=r.index,
        draft=col + 1,
        token=r.drafted[col],
        text=visible(text),
        state=state,
        verdict=verdict,
        why=why,
        q=q,
        p=p,
        top=top,
        rank=rank,
        tie=tie,
        position=r.position + col + 1,
    )


def _target_story(r) -> Story:
    tok = r.committed[-1]
    src = getattr(tok.source, "value", tok.source)
    why = {
        "correction": f"the target's own token where draft {r.accepted + 1} was rejected",
        "bonus": "every verified draft was accepted, so the target's next token comes with them",
        "target": "the round verified no draft: the target's token alone",
    }.get(src, src)
    return Story(
        round=r.index,
        draft=0,
        token=tok.id,
        text=visible(tok.text),
        state=src,
        verdict=f"the target's token ({src})",
        why=why,
        q=None,
        p=tok.target_prob,
        top=(),
        rank=None,
        tie=False,
        position=r.position + len(r.committed),
    )


def _why(run: Run, r, col: int, state: str, *, tie: bool) -> tuple[str, str]:
    """(verdict, one sentence) for drafted token ``col`` of round ``r``, by the engine's cases."""
    a = r.accepted
    if state == "accepted":
        if col >= len(r.committed):
            return "accepted, not kept", "the output had already ended at an end-of-sequence token before it"
        if run.greedy:
            return "accepted", "the target's own choice here (greedy: its most likely token)"
        return "accepted", "kept by the ratio test: accepted with probability min(1, p / q)"
    if state == "rejected":
        if len(r.committed) <= a:
            return "rejected", "the output had already ended at an end-of-sequence token before it"
        fix = r.committed[a]
        if not run.greedy:
            return "rejected", (
                f"by the ratio test; the target drew “{visible(fix.text)}” instead from what "
                "remained of its distribution"
            )
        if tie:
            return "rejected at a tie", (
                f"the target scored “{visible(fix.text)}” and this draft the same (a "
                "numerical tie); mlx-lm's rule takes the lower token id"
            )
        return "rejected", f"the target preferred “{visible(fix.text)}” (p {prob(fix.target_prob)})"
    if state == "discarded":
        return "after a rejection", (
            f"scored in the same verify forward, but discarded: the round ended at draft {a + 1}, rejected"
        )
    return "not verified", _unverified(run, r)


def _unverified(run: Run, r) -> str:
    """Why a round verified fewer drafts than it drafted: max tokens, or the verify policy."""
    w, g = r.verify_width, len(r.drafted)
    made_before = r.tokens_generated - len(r.committed)
    left = int(run.config.get("max_tokens", 0) or 0) - made_before
    if left > 0 and w == left - 1:
        return (
            f"only {left} token{'s' * (left > 1)} were left to max tokens, so the round verified "
            f"{w} of its {g} drafts (one more token is the target's own)"
        )
    policy = str(run.config.get("policy", "fixed"))
    return f"the verify policy {policy} sent {w} of the {g} drafts to the target"


# --------------------------------------------------------------------------- the two views' data
def drafter_runs(runs, kind: str, speculative: Run | None) -> dict[str, list[Run]]:
    """The runs each view describes, by drafter label in the order they first ran: after a
    comparison (``kind`` "compare") every drafter's runs of the prompts every arm finished
    (``runs.complete_prompts``, as the comparison's table pools them; before any prompt finished,
    every run so far); else the run the Run tab shows."""
    if kind != "compare":
        return {speculative.label: [speculative]} if speculative is not None and speculative.rounds else {}
    runs = list(runs)
    complete = set(complete_prompts(runs))
    out: dict[str, list[Run]] = {}
    for r in runs:
        if r.method == "speculative" and r.label != PLAIN_LABEL and (not complete or r.prompt_index in complete):
            out.setdefault(r.label, []).append(r)
    return out


@dataclass(frozen=True, kw_only=True)
class Pooled:
    """What the Rejections tab's header says: the figures of exactly the runs its charts pool
    (:func:`drafter_runs`), and plain decoding of the same prompts."""

    drafters: int
    prompts: int
    figures: metrics.Figures | None  # every pooled round (None: none drafted)
    speculative_tps: float  # over comparable work (metrics.comparable_rates), 0 without plain runs
    plain_tps: float
    compared: int  # tokens compared


def pooled(groups: dict[str, list[Run]], runs) -> Pooled:
    runs = list(runs)
    pooled_runs = [r for rs in groups.values() for r in rs]
    rounds = [e for r in pooled_runs for e in r.rounds]
    f = metrics.summarize(rounds) if rounds else None
    plain = {r.prompt_index: r for r in runs if r.method == "plain" and r.done and not r.stopped}
    pairs = [(r.rounds, plain[r.prompt_index].rounds) for r in pooled_runs if r.done and r.prompt_index in plain]
    s, b, n = metrics.comparable_rates(pairs)
    return Pooled(
        drafters=len(groups),
        prompts=len({r.prompt_index for r in pooled_runs}),
        figures=f if f is not None and f.rounds else None,
        speculative_tps=s,
        plain_tps=b,
        compared=n,
    )


def drafter_names(groups: dict[str, list[Run]]) -> dict[str, str]:
    """Label -> the drafter directory's name, which picks its colour (``app.panes.theme.drafter_colours``)."""
    return {label: Path(rs[0].drafter).name if rs[0].drafter else label for label, rs in groups.items()}


def context_view(groups: dict[str, list[Run]]) -> tuple[tuple[int, ...], dict[str, list[dict]]]:
    """(bucket edges, label -> ``metrics.by_context`` of its rounds): the same edges for every
    drafter (``metrics.context_edges`` over the furthest position any of them reached)."""
    last = max((e.position for rs in groups.values() for r in rs for e in r.rounds), default=0)
    edges = metrics.context_edges(last)
    return edges, {label: metrics.by_context([e for r in rs for e in r.rounds], edges) for label, rs in groups.items()}


def wrong_view(groups: dict[str, list[Run]], top: int = WRONG_PAIRS) -> tuple[list, dict[str, list[dict]]]:
    """(the pairs shown, label -> its counts of them): the ``top`` (drafted, target) pairs most
    frequent over every drafter's rejections together, most first, and for each drafter those of
    its ``metrics.rejections`` (all its pairs counted, so a drafter's count is never left out for
    being outside its own top), each with the text of both tokens. One drafter: its top pairs."""
    every = {label: metrics.rejections([e for r in rs for e in r.rounds], None) for label, rs in groups.items()}
    totals: dict[tuple[int, int], int] = {}
    for pairs in every.values():
        for p in pairs:  # in each drafter's order, so equal totals keep the order first seen
            totals[(p["drafted"], p["target"])] = totals.get((p["drafted"], p["target"]), 0) + p["count"]
    shown = sorted(totals, key=lambda k: -totals[k])[:top]
    kept, out = set(shown), {}
    for label, rs in groups.items():
        drafted, committed = token_texts(rs)
        out[label] = [
            {
                **p,
                "drafted_text": drafted.get(p["drafted"], committed.get(p["drafted"], f"#{p['drafted']}")),
                "target_text": committed.get(p["target"], drafted.get(p["target"], f"#{p['target']}")),
            }
            for p in every[label]
            if (p["drafted"], p["target"]) in kept
        ]
    return shown, out


def token_texts(runs: list[Run]) -> tuple[dict[int, str], dict[int, str]]:
    """(drafted token id -> its text as the draft rows show it, committed token id -> its text as
    the generated text shows it), from what the runs recorded."""
    drafted: dict[int, str] = {}
    committed: dict[int, str] = {}
    for run in runs:
        for i, r in enumerate(run.rounds):
            for t in r.committed:
                committed.setdefault(t.id, t.text)
            for t, text in zip(r.drafted, run.drafted_text[i] if i < len(run.drafted_text) else ()):
                drafted.setdefault(t, text)
    return drafted, committed


def bucket_name(b: dict) -> str:
    """A context bucket (``metrics.by_context``: positions after its lower edge up to its upper
    one) as its axis shows it: "0–50", "50–100", "1k–1.5k", "35k+"."""

    def short(n: int) -> str:
        return f"{n / 1000:g}k" if n >= 1000 and n % 100 == 0 else f"{n:,}"

    low = b["from"] - 1 if b["from"] else 0
    return f"{short(low)}+" if b["to"] is None else f"{short(low)}–{short(b['to'])}"

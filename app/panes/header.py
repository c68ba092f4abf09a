"""The header strip: the figures a person looks at first, each defined in its tooltip.

It always describes the tab on screen, and its headline says what that is: on the Run tab the
run shown there (which drafter, which prompt of how many), on the Compare tab the comparison's
focused drafter pooled over its prompts (the row selected in the table). A replay says so at
the right. Compact (presentation mode) leaves out first-token time and memory, so the rest
stays large on a 13-inch screen."""

from __future__ import annotations

from html import escape

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from ..state.inspector import drafter_runs, pooled
from ..state.runs import (
    MIN_COMPARED,
    PLAIN_LABEL,
    busy_note,
    compared_rates,
    machine,
    pause_note,
    same_as_plain,
    speedup,
)
from ..state.session import COMPARE_TAB, REJECTIONS_TAB, View
from .flow import FlowLayout

SPEEDUP_TIP = (
    "speculative ÷ plain decode tokens/sec over comparable work: both runs are measured over the\n"
    "first N tokens, N = the shorter output (to the end of the speculative round that reached N),\n"
    "so a sampled run that stopped at EOS early is not compared with a long one. Greedy runs make\n"
    f"the same tokens, so N is the whole output. Fewer than {MIN_COMPARED} tokens in common: not shown."
)
FIELDS = [
    (
        "speculative",
        "speculative tok/s",
        "Decode tokens/sec of the speculative run (tokens / seconds after the prompt).",
    ),
    ("plain", "plain tok/s", "Decode tokens/sec of plain mlx-lm decoding, same prompt, same loaded target."),
    ("speedup", "speedup", SPEEDUP_TIP),
    (
        "tau",
        "τ (accept length)",
        "Mean acceptance length: committed tokens per round, the target's\n"
        "correction or bonus token included (a round accepting nothing counts 1).",
    ),
    (
        "rate",
        "acceptance",
        "Accepted drafted tokens ÷ verified drafted tokens (drafts that were\n"
        "never sent to the target are not counted).",
    ),
    (
        "ttft",
        "first token",
        "Time to first token: from the start of the run (prompt processing\n"
        "included) to the first committed token (the mean over a comparison's prompts).",
    ),
    ("mem", "peak memory", "Peak MLX memory during the speculative run (mx.get_peak_memory)."),
    ("same", "same as plain", "SAME"),
]
SAME_TIP = (
    "✓: the greedy run's output equals plain mlx-lm decoding token for token.\n"
    "≈ tie at token N: it first differs where the target's two best tokens are equal within the\n"
    "rounding of its dtype (bf16 / quantised targets; the many-row verify and one-row decoding round\n"
    "differently), which is not a bug. ✗: a real difference. Hover after a run for the numbers."
)
FIELDS[-1] = ("same", "same as plain", SAME_TIP)
BUSY_TIP = (
    "Other programs kept this machine busy while it ran (the load average, less what this app used),\n"
    "or plain decoding's own rate varied from window to window: every tokens/sec, and so the\n"
    "speedup, depends on what else ran. Recorded with each run, so a replay says it too."
)


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


class HeaderStrip(QFrame):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("panel")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(6, 2, 6, 2)
        outer.setSpacing(0)
        top = QHBoxLayout()
        self.headline = QLabel()  # which drafter, which prompts: what the figures below describe
        self.headline.setObjectName("headline")
        self.headline.setWordWrap(True)
        self.mode = QLabel()  # "replay …": what is on screen did not run on this machine now
        self.mode.setObjectName("badge")
        self.mode.setWordWrap(True)
        self.mode.hide()
        # the machine's load and a pause, said in the headline's row, where there is room: beside
        # the speedup it wrapped to three lines presenting, or pushed the figures to a second row
        self.busy = QLabel()
        self.busy.setObjectName("note")
        self.busy.setWordWrap(True)
        self.busy.setToolTip(BUSY_TIP)
        self.busy.hide()
        top.addWidget(self.headline, 1)
        top.addWidget(self.busy, 1)
        top.addWidget(self.mode)
        outer.addLayout(top)
        flow = FlowLayout(h_spacing=18, v_spacing=2)  # wraps to a second row in a narrow window
        outer.addLayout(flow)
        self.values: dict[str, QLabel] = {}
        self.captions: dict[str, QLabel] = {}
        self.fields: dict[str, QWidget] = {}
        for key, caption, tip in FIELDS:
            field = QWidget()
            fl = QVBoxLayout(field)
            fl.setContentsMargins(0, 0, 0, 0)
            fl.setSpacing(0)
            v, c = QLabel("–"), QLabel(caption)
            v.setObjectName("value")
            c.setObjectName("caption")
            for w in (v, c):
                w.setToolTip(tip)
                fl.addWidget(w)
            flow.addWidget(field)
            self.values[key], self.captions[key], self.fields[key] = v, c, field

    def set_compact(self, compact: bool) -> None:
        for key in ("ttft", "mem"):
            self.fields[key].setVisible(not compact)

    def plots(self) -> dict:
        return {}

    def set_theme(self, t) -> None:
        pass  # styled by the window's stylesheet

    def _say_busy(self, busy: str) -> None:
        """The machine's load and any pause, beside the headline (the figures' row keeps one row)."""
        text = f"⚠ {busy}" if busy else ""
        self.busy.setText(text)
        self.busy.setVisible(bool(busy))

    def show_view(self, view: View) -> None:
        badge = view.compare_replay if view.tab == COMPARE_TAB else view.replay
        if view.tab == COMPARE_TAB and view.bench is not None:  # measured elsewhere, maybe on another machine
            badge = f"BENCHMARK · {view.bench.get('_path', '')} · {view.bench['environment'].get('cpu', '')}"
        head, _, rest = badge.partition(" · ")
        self.mode.setText(f"{escape(head)}<br><small>{escape(rest)}</small>" if rest else escape(head))
        self.mode.setToolTip(badge)
        self.mode.setVisible(bool(badge))
        if view.tab == COMPARE_TAB:
            self._show_comparison(view)
        elif view.tab == REJECTIONS_TAB and view.kind == "compare":
            self._show_pooled(view)
        else:
            self._show_run(view)

    def _show_pooled(self, view: View) -> None:
        """The Rejections tab after a comparison: the figures of exactly the runs its charts pool
        (every drafter's runs of the prompts the comparison finished), not the last run."""
        groups = drafter_runs(view.runs, view.kind, view.speculative)
        p = pooled(groups, view.runs)
        f = p.figures
        headline = (
            f"rejections of {plural(p.drafters, 'drafter')} over {plural(p.prompts, 'prompt')}, pooled"
            + (f": {plural(f.rounds, 'round')}" if f else "")
            if p.drafters
            else "Rejections: no prompt finished yet"
        )
        ratio = p.speculative_tps / p.plain_tps if p.plain_tps else 0.0
        self._show(
            {
                "speculative": f"{p.speculative_tps:.1f}" if p.compared else "",
                "plain": f"{p.plain_tps:.1f}" if p.compared else "",
                "speedup": f"{ratio:.2f}×" if ratio else "",
                "tau": f"{f.tau:.2f}" if f else "",
                "rate": f"{f.acceptance_rate:.0%}" if f else "",
            },
            headline,
            speedup_tip=f"Pooled over the runs the charts below pool: {p.compared} tokens compared."
            if p.compared
            else "",
            busy=busy_note(machine([r for rs in groups.values() for r in rs])),
        )
        self.values["same"].setToolTip(SAME_TIP)

    def _show(
        self,
        values: dict[str, str],
        headline: str,
        *,
        speedup_tip: str = "",
        basis: str = "",
        busy: str = "",
        speedup_basis: str = "",
    ) -> None:
        """``basis``: said under both tok/s when they are not whole-run rates but the two the
        speedup divides (the runs made different numbers of tokens); ``speedup_basis``: said
        under the speedup when it is not their quotient (a benchmark's median of per-trial
        ratios); ``busy``: the machine's load said beside the speedup (``app.state.runs.busy_note``)."""
        self.headline.setText(headline)
        self._say_busy(busy)
        for key, caption, _tip in FIELDS:
            self.values[key].setText(values.get(key) or "–")
            both_rates = basis and key in ("speculative", "plain")
            said = basis if both_rates else speedup_basis if key == "speedup" else ""
            self.captions[key].setText(f"{caption} · {said}" if said else caption)
        self.values["speedup"].setToolTip(SPEEDUP_TIP + ("\n\n" + speedup_tip if speedup_tip else ""))

    def _show_run(self, view: View) -> None:
        speculative, plain = view.speculative, view.plain
        speculative_tps = speculative.tokens_per_sec() if speculative and speculative.rounds else 0.0
        plain_tps = plain.tokens_per_sec() if plain and plain.rounds else 0.0
        shown = speculative if speculative is not None else plain
        where = f" · prompt {shown.prompt_index + 1} of {view.prompts}" if shown and view.prompts > 1 else ""
        if speculative is not None:
            kind = f" ({speculative.drafter_kind})" if speculative.drafter_kind else ""
            headline = f"{speculative.label}{kind} vs plain decoding{where}"
        else:
            headline = f"plain decoding only{where}" if plain is not None else "Run: the figures of a run appear here"
        headline += stopped_note(speculative, plain, view.busy)
        ratio, compared = speedup(speculative, plain)
        basis = ""
        if ratio:  # the two rates the speedup divides: over the same tokens, a pause of the machine left out
            speculative_tps, plain_tps = compared_rates(speculative, plain)
            if len(speculative.summary.tokens) != len(plain.summary.tokens):  # e.g. one met EOS early
                basis = f"first {compared} tokens"
        paused = pause_note(speculative, plain)
        f = speculative.figures() if speculative and speculative.rounds else None
        if f is not None and not f.rounds:  # auto decoded plainly throughout: nothing drafted, nothing measured
            f = None
        none = "–" if speculative is not None and speculative.done else ""
        first = speculative if speculative is not None else plain
        mem = first.summary.peak_memory_bytes if first and first.done else 0
        verdict = speculative.verdict if speculative is not None else None
        self._show(
            {
                "speculative": f"{speculative_tps:.1f}" if speculative_tps else "",
                "plain": f"{plain_tps:.1f}" if plain_tps else "",
                "speedup": f"{ratio:.2f}×" if ratio else "",
                "tau": f"{f.tau:.2f}" if f else none,
                "rate": f"{f.acceptance_rate:.0%}" if f else none,
                "ttft": f"{first.summary.ttft_seconds * 1000:.0f} ms" if first and first.done else "",
                "mem": f"{mem / 2**20:.0f} MiB" if mem else "",
                "same": same_as_plain([verdict]) or "",
            },
            headline,
            speedup_tip=_compared_note(compared, speculative, plain),
            basis=basis,
            busy="; ".join(
                x for x in (paused, busy_note(machine([r for r in (speculative, plain) if r is not None]))) if x
            ),
        )
        self.values["same"].setToolTip(verdict.explain() if verdict else SAME_TIP)

    def _show_comparison(self, view: View) -> None:
        row, plain = view.row(view.focus), view.row(PLAIN_LABEL)
        n = view.compare_prompts
        if row is not None and view.bench is not None:
            headline = f"{row['label']} vs plain mlx-lm decoding · dspark bench: medians over {row['runs_text']} trials"
        elif row is not None:
            kind = f" ({row['kind']})" if row.get("kind") else ""
            headline = f"{row['label']}{kind} vs plain decoding · {coverage(row, view.busy)}"
        elif plain is not None:
            headline = f"plain decoding only · {coverage(plain, view.busy)}"
        else:
            headline = "Compare: the figures of the drafter selected in the table appear here"
        r = row or {}
        ttft, mem = r.get("ttft_seconds"), r.get("peak_memory_bytes")
        speculative_tps = r.get("tokens_per_sec") or 0.0
        plain_tps = plain.get("tokens_per_sec") or 0.0 if plain else 0.0
        basis = ""
        if r.get("speedup") and not r.get("same_length", True):  # sampled runs of different lengths
            speculative_tps, plain_tps = r["compared_rates"]
            basis = f"{r['compared_tokens']} tokens compared"
        self._show(
            {
                "speculative": f"{speculative_tps:.1f}" if speculative_tps else "",
                "plain": f"{plain_tps:.1f}" if plain_tps else "",
                "speedup": f"{r['speedup']:.2f}×" if r.get("speedup") else "",
                "tau": f"{r['tau']:.2f}" if r.get("rounds") else ("–" if row is not None else ""),
                "rate": f"{r['acceptance_rate']:.0%}" if r.get("rounds") else ("–" if row is not None else ""),
                "ttft": f"{ttft * 1000:.0f} ms" if ttft is not None else "",
                "mem": f"{mem / 2**20:.0f} MiB" if mem else "",
                "same": r.get("identical") or "",
            },
            headline,
            speedup_tip=_pooled_note(view, r, n) if row is not None else "",
            basis=basis,
            # a benchmark's speedup is the median of its trials' ratios, beside medians of rates:
            # they need not divide, so it says which it is
            speedup_basis="median of trials" if view.bench is not None and r.get("speedup") else "",
            busy=busy_note((row or plain or {}).get("machine")),
        )
        self.values["same"].setToolTip(SAME_TIP)


def stopped_note(speculative, plain, busy: bool) -> str:
    """ " · stopped: dspark kept 71 tokens, plain decoding not run": a Stop said where the figures
    are (the status bar's "stopped" went with the next message)."""
    runs = [r for r in (speculative, plain) if r is not None]
    if not any(r.stopped for r in runs):
        return ""
    kept = [
        f"{'plain decoding' if r.method == 'plain' else r.label} kept {plural(len(r.summary.tokens), 'token')}"
        for r in runs
        if r.stopped
    ]
    if plain is None and not busy:
        kept.append("plain decoding not run")
    return " · stopped: " + ", ".join(kept)


def coverage(row: dict, busy: bool) -> str:
    """Which prompts a comparison's figures pool: the ones every arm finished
    (``app.state.runs.complete_prompts``), or before there is one, the unfinished runs, said so."""
    done, planned = row.get("finished", 0), row.get("planned", 0)
    if row.get("partial"):
        return (
            f"prompt 1 of {planned} running"
            if busy
            else "stopped before a prompt finished: the figures are of unfinished runs"
        )
    if done >= planned:
        return f"pooled over {plural(planned, 'prompt')}"
    return f"pooled over {done} of {planned} prompts" + (" (the rest running)" if busy else " · stopped")


def _pooled_note(view: View, row: dict, n: int) -> str:
    if view.bench is not None:
        s = view.bench["settings"]
        return (
            f"dspark bench: the median over {row['runs_text']} trials (prompts × repeats) of each trial's "
            f"speedup over plain mlx-lm decoding of the same prompt; {s['max_tokens']} tokens each, EOS ignored."
        )
    if row.get("partial"):
        return "No prompt has finished yet: nothing to compare."
    return (
        f"Pooled over the {plural(row['finished'], 'prompt')} every drafter and plain decoding finished: "
        f"{row.get('compared_tokens', 0)} tokens compared."
    )


#: The speedup's tooltip when the speculative run never drafted (auto found no round paying).
NO_ROUND_NOTE = (
    "No round drafted: auto decoded plainly throughout, so nothing of the drafter was measured. "
    "The speedup compares this engine's plain steps with mlx-lm's plain decoding: the same "
    "forwards, so it differs from 1 by the loop's own cost and the machine's noise. "
)


def _compared_note(compared: int, speculative, plain) -> str:
    if not compared:
        return ""
    if speculative.done and speculative.rounds and not speculative.figures().rounds:
        return NO_ROUND_NOTE + _lengths_note(compared, speculative, plain)
    return _lengths_note(compared, speculative, plain)


def _lengths_note(compared: int, speculative, plain) -> str:
    if compared < MIN_COMPARED:
        return f"This run: only {compared} tokens in common (one run stopped at EOS): too few to compare."
    lengths = (len(speculative.summary.tokens), len(plain.summary.tokens))
    if lengths[0] == lengths[1]:
        return f"This run: both made {compared} tokens."
    return (
        f"This run: speculative made {lengths[0]} tokens, plain decoding {lengths[1]}; "
        f"both measured over the first {compared}."
    )

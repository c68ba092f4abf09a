"""The header strip: the figures a person looks at first, each defined in its tooltip."""

from __future__ import annotations

from PySide6.QtWidgets import QFrame, QGridLayout, QLabel

from dspark import metrics

from ..runs import same_as_plain
from ..session import View

FIELDS = [
    ("spec", "speculative", "Decode tokens/sec of the speculative run (tokens / seconds after the prompt)."),
    ("base", "plain decoding", "Decode tokens/sec of plain mlx-lm decoding, same prompt, same loaded target."),
    ("speedup", "speedup", "speculative tok/s ÷ plain tok/s, measured in the same run."),
    ("tau", "τ (accept length)", "Mean acceptance length: committed tokens per round, the target's\n"
                                 "correction or bonus token included (a round accepting nothing counts 1)."),
    ("rate", "acceptance", "Accepted drafted tokens ÷ verified drafted tokens (drafts that were\n"
                           "never sent to the target are not counted)."),
    ("ttft", "first token", "Time to first token: from the start of the run (prompt processing\n"
                            "included) to the first committed token."),
    ("mem", "peak memory", "Peak MLX memory during the speculative run (mx.get_peak_memory)."),
    ("same", "same as plain", "SAME"),
]
SAME_TIP = ("✓: the greedy run's output equals plain mlx-lm decoding token for token.\n"
            "≈ tie at token N: it first differs where the target's two best tokens are equal within the\n"
            "rounding of its dtype (bf16 / quantised targets; the many-row verify and one-row decoding round\n"
            "differently), which is not a bug. ✗: a real difference. Hover after a run for the numbers.")
FIELDS[-1] = ("same", "same as plain", SAME_TIP)


class HeaderStrip(QFrame):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("panel")
        lay = QGridLayout(self)
        lay.setContentsMargins(6, 2, 6, 2)
        lay.setHorizontalSpacing(18)
        lay.setVerticalSpacing(0)
        self.values: dict[str, QLabel] = {}
        self.captions: dict[str, QLabel] = {}
        for col, (key, caption, tip) in enumerate(FIELDS):
            v, c = QLabel("–"), QLabel(caption)
            v.setObjectName("value")
            c.setObjectName("caption")
            for w in (v, c):
                w.setToolTip(tip)
            lay.addWidget(v, 0, col)
            lay.addWidget(c, 1, col)
            self.values[key] = v
            self.captions[key] = c
        lay.setColumnStretch(len(FIELDS), 1)

    def plots(self) -> dict:
        return {}

    def set_theme(self, _theme) -> None:
        pass  # styled by the window's stylesheet

    def show_view(self, view: View) -> None:
        spec, base = view.spec, view.base
        v = self.values
        spec_tps = spec.tokens_per_sec() if spec and spec.rounds else 0.0
        base_tps = base.tokens_per_sec() if base and base.rounds else 0.0
        v["spec"].setText(f"{spec_tps:.1f} tok/s" if spec_tps else "–")
        self.captions["spec"].setText(f"speculative · {spec.label}" if spec is not None else "speculative")
        v["base"].setText(f"{base_tps:.1f} tok/s" if base_tps else "–")
        both_done = spec is not None and base is not None and spec.done and base.done
        v["speedup"].setText(f"{metrics.speedup(spec_tps, base_tps):.2f}×" if both_done and base_tps else "–")
        f = spec.figures() if spec and spec.rounds else None
        v["tau"].setText(f"{f.tau:.2f}" if f else "–")
        v["rate"].setText(f"{f.acceptance_rate:.0%}" if f else "–")
        first = spec if spec is not None else base
        v["ttft"].setText(f"{first.summary.ttft_seconds * 1000:.0f} ms" if first and first.done else "–")
        mem = first.summary.peak_memory_bytes if first and first.done else 0
        v["mem"].setText(f"{mem / 2**20:.0f} MB" if mem else "–")
        verdict = spec.verdict if spec is not None else None
        v["same"].setText(same_as_plain([verdict]) or "–")
        v["same"].setToolTip(verdict.explain() if verdict else SAME_TIP)

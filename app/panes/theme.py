"""Colours and type sizes: a normal (light) theme and a high-contrast presentation theme."""

from __future__ import annotations

from dataclasses import dataclass, replace

from PySide6.QtGui import QColor, QPalette


@dataclass(frozen=True, kw_only=True)
class Theme:
    name: str
    font_pt: int  # base font size of the whole window
    big_pt: int  # header strip values
    bg: str
    panel: str
    fg: str
    muted: str
    grid: str
    accent: str
    error: str
    # how a token came to be (text view) / what became of a draft (draft grid)
    accepted: str
    correction: str
    bonus: str
    rejected: str
    discarded: str  # verified after the first rejection: scored, thrown away
    unverified: str
    cell_fg: str
    speculative: str  # speculative curve
    plain: str  # plain decoding curve
    series: tuple[str, ...]  # comparison curves, one per drafter


NORMAL = Theme(
    name="normal",
    font_pt=10,
    big_pt=17,
    bg="#f6f7f9",
    panel="#ffffff",
    fg="#1d2230",
    muted="#5b6373",
    grid="#d5d9e0",
    accent="#2f6fdb",
    error="#b3261e",
    accepted="#b9e6c3",
    correction="#ffd3a6",
    bonus="#b8d4ff",
    rejected="#e8575a",
    discarded="#f2b8b9",
    unverified="#d9dce1",
    cell_fg="#111111",
    speculative="#0072b2",
    plain="#7a7f8a",
    series=("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9"),
)

PRESENTATION = Theme(
    name="presentation",
    font_pt=17,
    big_pt=30,
    bg="#000000",
    panel="#0d0d0d",
    fg="#ffffff",
    muted="#c8c8c8",
    grid="#444444",
    accent="#4dabf7",
    error="#ff6b6b",
    accepted="#1f8f3a",
    correction="#c25e00",
    bonus="#1c5fc9",
    rejected="#e03131",
    discarded="#6b2323",
    unverified="#3a3a3a",
    cell_fg="#ffffff",
    speculative="#56b4e9",
    plain="#e9ecef",
    series=("#56b4e9", "#e69f00", "#2fd6a0", "#f0e442", "#e08fc0", "#ff7a3d"),
)


def drafter_colours(
    t: Theme, names: list[str], given: dict[str, str] | None = None, order: tuple[str, ...] = ()
) -> dict[str, str]:
    """One colour per drafter (``given`` ones kept): the same drafter is the same colour in the
    table, every plot and every export, whatever its arms. ``order``: the drafters in the order the
    session first met them (``View.colour_order``), so a drafter keeps its colour when another is
    unticked; a name not in it takes the next colour after those."""
    out = dict(given or {})
    place = {name: i for i, name in enumerate(order)}
    for name in out:
        place.setdefault(name, len(place))
    for name in names:
        if name not in out:
            out[name] = t.series[place.setdefault(name, len(place)) % len(t.series)]
    return out


def policy_style(policy: str | None) -> str:
    """One line style per verify policy (``app.panes.plots.LINE_STYLES``): fixed solid, fixed:K
    dash-dot-dot, threshold:C dash-dot, auto dotted (plain decoding is dashed)."""
    p = (policy or "fixed").strip()
    return (
        "solid"
        if p == "fixed"
        else "dot"
        if p == "auto"
        else "dashdot"
        if p.startswith("threshold")
        else "dashdotdot"
        if p.startswith("fixed:")
        else "solid"
    )


#: The window size the presentation theme's type sizes are chosen for (a 13-inch laptop at 2x).
PRESENTATION_SIZE = (1280, 800)


def scaled(t: Theme, width: int, height: int) -> Theme:
    """``t`` with every type size in proportion to a ``width`` x ``height`` window (from the
    back of a room, a projector's 1920x1080 needs larger type than a laptop's 1280x800)."""
    k = max(0.8, min(width / PRESENTATION_SIZE[0], height / PRESENTATION_SIZE[1]))
    return replace(t, font_pt=max(9, round(t.font_pt * k)), big_pt=max(14, round(t.big_pt * k)))


#: The focus frame's width: a keyboard user must see at a glance where the keys go.
FOCUS_PX = 2


def stylesheet(t: Theme) -> str:
    """The window's style. The Compare table selects in the grid's grey, not the accent: a
    selected drafter's colour swatch vanished into the accent (presentation's blues are alike)."""
    return f"""
    QWidget {{ font-size: {t.font_pt}pt; color: {t.fg}; }}
    QMainWindow, QDialog {{ background: {t.bg}; }}
    QWidget#panel, QScrollArea#controls, QWidget#controlsInner {{ background: {t.bg}; }}
    QGroupBox {{ font-weight: bold; border: 1px solid {t.grid}; border-radius: 6px;
                 margin-top: 1.1em; padding: 6px 4px 4px 4px; background: {t.panel}; }}
    QGroupBox::title {{ subcontrol-origin: margin; left: 8px; padding: 0 3px; color: {t.muted}; }}
    QTextEdit, QPlainTextEdit, QListWidget, QTableWidget {{ background: {t.panel};
        border: 1px solid {t.grid}; border-radius: 4px;
        selection-background-color: {t.accent}; selection-color: #ffffff; }}
    QTableWidget {{ selection-background-color: {t.grid}; selection-color: {t.fg}; }}
    QHeaderView::section {{ background: {t.bg}; color: {t.muted}; border: none;
                             border-bottom: 1px solid {t.grid}; padding: 3px {max(6, t.font_pt)}px; }}
    QPushButton {{ padding: 5px 12px; border: 1px solid {t.grid}; border-radius: 5px;
                   background: {t.panel}; }}
    QPushButton:hover {{ border-color: {t.accent}; }}
    QPushButton:disabled {{ color: {t.muted}; }}
    QPushButton#primary {{ background: {t.accent}; color: #ffffff; border-color: {t.accent};
                           font-weight: bold; }}
    QPushButton#primary:disabled {{ background: {t.grid}; border-color: {t.grid}; }}
    QTabWidget::pane {{ border: 1px solid {t.grid}; background: {t.bg}; }}
    QTabBar::tab {{ padding: 5px 14px; background: {t.bg}; color: {t.muted};
                    border: 1px solid {t.grid}; border-bottom: none; }}
    QTabBar::tab:selected {{ background: {t.panel}; color: {t.fg}; font-weight: bold; }}
    QLabel#message {{ background: {t.error}; color: #ffffff; padding: 5px 8px; border-radius: 4px; }}
    QLabel#caption {{ color: {t.muted}; }}
    QLabel#value {{ font-size: {t.big_pt}pt; font-weight: bold; }}
    QLabel#prompt {{ font-size: {t.font_pt + 2}pt; color: {t.muted}; }}
    QLabel#note {{ color: {t.error}; }}
    QLabel#placeholder {{ color: {t.muted}; background: {t.panel}; }}
    QWidget#actions {{ background: {t.bg}; }}
    QLabel#headline {{ font-size: {t.font_pt + 3}pt; font-weight: bold; color: {t.accent}; }}
    QLabel#badge {{ background: {t.accent}; color: #ffffff; font-weight: bold; padding: 4px 10px;
                    border-radius: 4px; }}
    QStatusBar {{ color: {t.muted}; }}
    QPlainTextEdit:focus, QTextEdit:focus, QListWidget:focus, QTableWidget:focus, QLineEdit:focus,
    QComboBox:focus, QSpinBox:focus, QDoubleSpinBox:focus {{ border: {FOCUS_PX}px solid {t.accent}; }}
    QPushButton:focus, QToolButton:focus {{ border: {FOCUS_PX}px solid {t.accent}; }}
    QCheckBox:focus {{ color: {t.accent}; font-weight: bold; }}
    QTabBar::tab:focus {{ border: {FOCUS_PX}px solid {t.accent}; }}
    """


def palette(t: Theme):
    """A Fusion palette in the theme's colours, for the inputs the stylesheet leaves alone."""
    p = QPalette()
    for role, colour in (
        (QPalette.Window, t.bg),
        (QPalette.WindowText, t.fg),
        (QPalette.Base, t.panel),
        (QPalette.AlternateBase, t.bg),
        (QPalette.Text, t.fg),
        (QPalette.Button, t.panel),
        (QPalette.ButtonText, t.fg),
        (QPalette.Highlight, t.accent),
        (QPalette.HighlightedText, "#ffffff"),
        (QPalette.ToolTipBase, t.panel),
        (QPalette.ToolTipText, t.fg),
        (QPalette.PlaceholderText, t.muted),
    ):
        p.setColor(role, QColor(colour))
    p.setColor(QPalette.Disabled, QPalette.Text, QColor(t.muted))
    p.setColor(QPalette.Disabled, QPalette.ButtonText, QColor(t.muted))
    return p

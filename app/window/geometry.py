"""Window geometry that fits the screen it opens on. A geometry saved on a big monitor, the
default size on a 13-inch laptop at 2x scale (1280x800 logical), or what is left after full
screen never ends up larger than the screen's available area or off it."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QRect, QSize
from PySide6.QtGui import QGuiApplication

DEFAULT = QSize(1400, 900)
#: Room for the window's title bar when its frame is not known yet (before it is shown).
TITLE_BAR = 32


def fit(rect: QRect, avail: QRect) -> QRect:
    """``rect`` shrunk to ``avail`` where it is larger, then moved inside it."""
    w, h = min(rect.width(), avail.width()), min(rect.height(), avail.height())
    x = min(max(rect.x(), avail.left()), avail.left() + avail.width() - w)
    y = min(max(rect.y(), avail.top()), avail.top() + avail.height() - h)
    return QRect(x, y, w, h)


def default_rect(avail: QRect) -> QRect:
    """The default size (or 95% x 92% of a smaller screen), centred."""
    size = DEFAULT.boundedTo(QSize(int(avail.width() * 0.95), int(avail.height() * 0.92)))
    return QRect(
        avail.left() + (avail.width() - size.width()) // 2,
        avail.top() + (avail.height() - size.height()) // 2,
        size.width(),
        size.height(),
    )


def client_area(avail: QRect, frame: QRect, inner: QRect) -> QRect:
    """The part of ``avail`` a window's inside may use, given its frame and inner geometry
    (equal before it is shown: then a title bar is assumed)."""
    top, left = inner.top() - frame.top(), inner.left() - frame.left()
    right = frame.right() - inner.right()
    bottom = frame.bottom() - inner.bottom()
    if frame == inner:
        top = TITLE_BAR
    return avail.adjusted(left, top, -right, -bottom)


def available_area(window) -> QRect:
    """Where ``window``'s inside may go: its screen's available area less the frame."""
    screen = window.screen() or QGuiApplication.primaryScreen()
    return client_area(screen.availableGeometry(), window.frameGeometry(), window.geometry())


def place(window, saved, avail: QRect) -> None:
    """``window`` at its ``saved`` geometry (else the default size), fitted to ``avail``."""
    if saved is None or saved.isEmpty() or not window.restoreGeometry(saved):
        window.setGeometry(default_rect(avail))
    fit_window(window, avail)


def fit_window(window, avail: QRect) -> None:
    if not (window.isMaximized() or window.isFullScreen()):
        window.setGeometry(fit(window.geometry(), avail))


def leave_full_screen(window, rect: QRect, was_maximized: bool, full_screen: bool) -> None:
    """Back from presentation mode to ``rect`` (or maximized, as it was)."""
    if full_screen:
        window.showMaximized() if was_maximized else window.showNormal()
    if not was_maximized:
        # The minimum size is the large type's until the pending layout requests run and the
        # window's layout recomputes it; restoring before would be clamped to it.
        QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
        window.layout().activate()
        window.setGeometry(rect)
        fit_window(window, window.available_area())

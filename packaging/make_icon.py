"""Render resources/icons/dspark-studio.svg into the app's icons, with Qt's own SVG renderer
(offscreen, no display needed) and no other tool:

- ``dspark-studio.png`` (256 px): the window icon on Linux, found through ``dspark.resources``;
- ``dspark-studio.icns``: the macOS app icon, PNG renders at 16..1024 px in Apple's container.

Run it from the project's venv after changing the SVG:  .venv/bin/python packaging/make_icon.py
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

ICONS = Path(__file__).resolve().parent.parent / "resources" / "icons"
SVG = ICONS / "dspark-studio.svg"
WINDOW_ICON_PX = 256

# icns element types that hold PNG data, and their pixel size (ic11..ic14 are the @2x variants
# of 16..256); the same set Apple's iconutil writes for a full iconset.
ICNS_TYPES = {
    b"icp4": 16,
    b"ic11": 32,
    b"icp5": 32,
    b"ic12": 64,
    b"icp6": 64,
    b"ic07": 128,
    b"ic13": 256,
    b"ic08": 256,
    b"ic14": 512,
    b"ic09": 512,
    b"ic10": 1024,
}


def render(size: int) -> bytes:
    """The SVG as a PNG of size x size pixels."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    image = QImage(size, size, QImage.Format_ARGB32)
    image.fill(Qt.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.Antialiasing)
    QSvgRenderer(str(SVG)).render(painter)
    painter.end()
    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.WriteOnly)
    image.save(buf, "PNG")
    return bytes(data)


def icns(pngs: dict[int, bytes]) -> bytes:
    """Apple's icon container: 'icns', total length, then (type, length, PNG data) elements."""
    body = b"".join(t + struct.pack(">I", 8 + len(pngs[px])) + pngs[px] for t, px in ICNS_TYPES.items())
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 (QImage/QPainter need it)
    pngs = {px: render(px) for px in sorted(set(ICNS_TYPES.values()) | {WINDOW_ICON_PX})}
    (ICONS / "dspark-studio.png").write_bytes(pngs[WINDOW_ICON_PX])
    (ICONS / "dspark-studio.icns").write_bytes(icns(pngs))
    for name in ("dspark-studio.png", "dspark-studio.icns"):
        print(f"{ICONS / name}: {(ICONS / name).stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

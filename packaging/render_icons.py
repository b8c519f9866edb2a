"""Render the conch shell (resources/icons/conch.svg) into every icon file a package needs.

    python packaging/render_icons.py

writes, next to this script:
    linux/icons/<size>/conch.png   16 … 512 px (installed as hicolor/<size>x<size>/apps/conch.png)
    windows/conch.ico              16 … 256 px, PNG-compressed entries (Windows Vista and later)
    macos/conch.icns               16 … 1024 px, PNG entries (with the @2x retina variants)

Only Qt is needed (QtSvg ships in PySide6-Essentials); it runs offscreen, on any machine.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "resources" / "icons" / "conch.svg"
LINUX_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# ICNS entry types that hold a PNG, with their pixel size (ic11…ic14 are the @2x variants).
ICNS_TYPES = (
    (b"icp4", 16),
    (b"icp5", 32),
    (b"ic11", 32),
    (b"icp6", 64),
    (b"ic12", 64),
    (b"ic07", 128),
    (b"ic08", 256),
    (b"ic13", 256),
    (b"ic09", 512),
    (b"ic14", 512),
    (b"ic10", 1024),
)


def render(renderer: QSvgRenderer, size: int) -> QImage:
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    return image


def png_bytes(image: QImage) -> bytes:
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, "PNG"):
        raise OSError("Qt could not encode a PNG")
    buffer.close()
    return bytes(data.data())


def ico_bytes(images: list[QImage]) -> bytes:
    """An .ico holding one PNG entry per size (the format's header, then a directory)."""
    pngs = [png_bytes(img) for img in images]
    header = struct.pack("<HHH", 0, 1, len(images))  # reserved, type 1 = icon, count
    offset = len(header) + 16 * len(images)
    directory = b""
    for img, png in zip(images, pngs, strict=True):
        side = img.width()
        byte = 0 if side >= 256 else side  # 0 means 256 in the directory
        directory += struct.pack("<BBBBHHII", byte, byte, 0, 0, 1, 32, len(png), offset)
        offset += len(png)
    return header + directory + b"".join(pngs)


def icns_bytes(renderer: QSvgRenderer) -> bytes:
    """An .icns: the magic and total length, then (type, length, PNG) entries."""
    body = b""
    for kind, size in ICNS_TYPES:
        png = png_bytes(render(renderer, size))
        body += kind + struct.pack(">I", 8 + len(png)) + png
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    app = QGuiApplication.instance() or QGuiApplication([sys.argv[0]])
    renderer = QSvgRenderer(str(SOURCE))
    if not renderer.isValid():
        print(f"cannot read {SOURCE}", file=sys.stderr)
        return 1

    for size in LINUX_SIZES:
        folder = HERE / "linux" / "icons" / str(size)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / "conch.png"
        if not render(renderer, size).save(str(target), "PNG"):
            print(f"cannot write {target}", file=sys.stderr)
            return 1
        print(f"wrote {target.relative_to(HERE.parent)}")

    ico = HERE / "windows" / "conch.ico"
    ico.parent.mkdir(parents=True, exist_ok=True)
    ico.write_bytes(ico_bytes([render(renderer, s) for s in ICO_SIZES]))
    print(f"wrote {ico.relative_to(HERE.parent)}")

    icns = HERE / "macos" / "conch.icns"
    icns.parent.mkdir(parents=True, exist_ok=True)
    icns.write_bytes(icns_bytes(renderer))
    print(f"wrote {icns.relative_to(HERE.parent)}")
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())

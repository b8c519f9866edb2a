"""Icons from ``resources/icons/*.svg``, drawn in the current theme's colours.

The line icons are drawn with ``currentColor``. ``icon(name)`` returns a QIcon whose engine
fills that colour in when the icon is painted, from the application palette (or a fixed colour
or palette role the caller picks), so a theme switch recolours every icon without anyone
re-setting it. ``app_icon()`` is the full-colour conch shell.
"""

from __future__ import annotations

import functools
import logging

from PySide6.QtCore import QByteArray, QPoint, QRect, QSize, Qt
from PySide6.QtGui import (
    QColor,
    QGuiApplication,
    QIcon,
    QIconEngine,
    QImage,
    QPainter,
    QPalette,
    QPixmap,
)
from PySide6.QtSvg import QSvgRenderer

from ui.resources import resource_path

log = logging.getLogger("conch.ui.icons")

APP_ICON = "conch"
# The palette role ui/theme.py fills with the text colour used on accent (primary) buttons.
ON_ACCENT = QPalette.ColorRole.BrightText
MUTED = QPalette.ColorRole.PlaceholderText
# Named in the brief; tests check each exists and renders.
ICON_NAMES: tuple[str, ...] = (
    "send",
    "stop",
    "attach",
    "new-chat",
    "settings",
    "search",
    "memory",
    "summary",
    "warning",
    "copy",
    "model",
    "check",
    "chevron-down",
    "chevron-right",
    "close",
    "trash",
    "edit",
    "undo",
    "health",
    "sun",
    "moon",
    "monitor",
    "command",
    "export",
    "providers",
    "appearance",
    "file",
    "picture",
    "folder",
    "pin",
    "fork",
)


@functools.lru_cache(maxsize=64)
def svg_source(name: str) -> str:
    """The SVG text of an icon; empty (and logged once) when the file is missing."""
    path = resource_path("icons", f"{name}.svg")
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        log.warning("icon %s not found at %s", name, path)
        return ""


def render_svg(source: str, size: QSize, color: QColor | None = None) -> QImage:
    """Rasterise SVG text at ``size`` (device pixels), ``currentColor`` filled with ``color``."""
    image = QImage(size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    if not source:
        return image
    if color is not None:
        # QtSvg reads #rrggbb only; a translucent colour becomes the painter's opacity.
        source = source.replace("currentColor", color.name(QColor.NameFormat.HexRgb))
    renderer = QSvgRenderer(QByteArray(source.encode("utf-8")))
    if not renderer.isValid():
        return image
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    if color is not None and color.alpha() < 255:
        painter.setOpacity(color.alphaF())
    renderer.render(painter)
    painter.end()
    return image


class _ThemedSvgEngine(QIconEngine):
    """Renders one line icon in a colour decided at paint time (so themes apply live)."""

    def __init__(self, name: str, color: QColor | None, role: QPalette.ColorRole | None) -> None:
        super().__init__()
        self._name = name
        self._color = color
        self._role = role
        self._cache: dict[tuple[int, int, str], QPixmap] = {}

    def _color_for(self, mode: QIcon.Mode) -> QColor:
        palette = QGuiApplication.palette()
        if mode == QIcon.Mode.Disabled:
            return palette.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText)
        if self._color is not None:
            return self._color
        # Selected rows use a soft tint with normal text (see the stylesheets), so a selected
        # icon keeps the text colour rather than the palette's highlighted-text colour.
        return palette.color(self._role or QPalette.ColorRole.WindowText)

    def pixmap(self, size: QSize, mode: QIcon.Mode, state: QIcon.State) -> QPixmap:
        return self.scaledPixmap(size, mode, state, 1.0)

    def scaledPixmap(
        self, size: QSize, mode: QIcon.Mode, state: QIcon.State, scale: float
    ) -> QPixmap:
        color = self._color_for(mode)
        w = max(1, round(size.width() * scale))
        h = max(1, round(size.height() * scale))
        key = (w, h, color.name(QColor.NameFormat.HexArgb))
        cached = self._cache.get(key)
        if cached is None:
            cached = QPixmap.fromImage(render_svg(svg_source(self._name), QSize(w, h), color))
            cached.setDevicePixelRatio(scale)
            if len(self._cache) > 32:
                self._cache.clear()
            self._cache[key] = cached
        return cached

    def paint(self, painter: QPainter, rect: QRect, mode: QIcon.Mode, state: QIcon.State) -> None:
        scale = painter.device().devicePixelRatioF() if painter.device() else 1.0
        pm = self.scaledPixmap(rect.size(), mode, state, scale)
        painter.drawPixmap(QPoint(rect.x(), rect.y()), pm)

    def actualSize(self, size: QSize, mode: QIcon.Mode, state: QIcon.State) -> QSize:
        return size

    def clone(self) -> QIconEngine:
        return _ThemedSvgEngine(self._name, self._color, self._role)

    def key(self) -> str:
        return "conch-themed-svg"

    def isNull(self) -> bool:
        return not svg_source(self._name)


def icon(
    name: str,
    color: QColor | str | None = None,
    role: QPalette.ColorRole | None = None,
) -> QIcon:
    """A line icon that follows the theme.

    ``color`` pins one colour; ``role`` picks a palette role instead of the text colour:
    ``ON_ACCENT`` for an icon on a primary (accent) button, ``MUTED`` for a quiet one.
    """
    fixed = QColor(color) if color is not None else None
    return QIcon(_ThemedSvgEngine(name, fixed, role))


def pixmap(name: str, size: int, color: QColor | str) -> QPixmap:
    """A one-off pixmap of a line icon in a fixed colour (for labels and screenshots)."""
    return QPixmap.fromImage(render_svg(svg_source(name), QSize(size, size), QColor(color)))


def app_icon() -> QIcon:
    """The conch shell, in its own colours, at the sizes window managers ask for."""
    result = QIcon()
    source = svg_source(APP_ICON)
    for size in (16, 24, 32, 48, 64, 128, 256, 512):
        result.addPixmap(QPixmap.fromImage(render_svg(source, QSize(size, size))))
    return result


__all__ = [
    "APP_ICON",
    "ICON_NAMES",
    "MUTED",
    "ON_ACCENT",
    "app_icon",
    "icon",
    "pixmap",
    "render_svg",
    "svg_source",
]

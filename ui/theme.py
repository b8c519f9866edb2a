"""Light and dark themes: one stylesheet per theme, applied live, or following the system.

A theme is ``resources/styles/<scheme>.qss``: colour tokens (``@name: value;`` lines) plus rules
only that theme needs. The shared rules are in ``base.qss`` and use the same ``@names``, so the
spacing and type scale cannot drift between themes. ``ThemeManager`` sets the application's
stylesheet *and* its QPalette from the tokens, so widgets styled by QSS, widgets painted from the
palette and icons drawn by ui/icons.py (which read the palette at paint time) all change at once,
without a restart.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory, QWidget

from ui.resources import read_text, resource_path

log = logging.getLogger("conch.ui.theme")

ThemeChoice = Literal["system", "light", "dark"]
Scheme = Literal["light", "dark"]
CHOICES: tuple[ThemeChoice, ...] = ("system", "light", "dark")

_TOKEN_LINE = re.compile(r"^\s*@([a-z][a-z0-9-]*)\s*:\s*([^;]+);\s*$", re.MULTILINE)
_TOKEN_USE = re.compile(r"@([a-z][a-z0-9-]*)")
_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)


@dataclass(frozen=True)
class Theme:
    """One scheme's colours and its finished stylesheet (tokens already replaced)."""

    scheme: Scheme
    tokens: Mapping[str, str]
    stylesheet: str
    missing: frozenset[str] = field(default_factory=frozenset)  # tokens the rules use, undefined

    def color(self, name: str) -> QColor:
        """A token's colour; the text colour when the token is unknown (never crashes)."""
        return QColor(self.tokens.get(name) or self.tokens.get("text", "#000000"))


def parse_tokens(text: str) -> tuple[dict[str, str], str]:
    """Split a theme file into its tokens and the rules that remain (comments dropped)."""
    text = _COMMENT.sub("", text)
    tokens = {m.group(1): m.group(2).strip() for m in _TOKEN_LINE.finditer(text)}
    return tokens, _TOKEN_LINE.sub("", text)


def load_theme(scheme: Scheme) -> Theme:
    """Read ``base.qss`` plus the scheme's file and replace every ``@token``."""
    tokens, own_rules = parse_tokens(read_text("styles", f"{scheme}.qss"))
    # Paths in url() must use forward slashes on every OS.
    tokens["styles"] = resource_path("styles").as_posix()
    tokens["scheme"] = scheme
    missing: set[str] = set()

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        value = tokens.get(name)
        if value is None:
            missing.add(name)
            return match.group(0)
        return value

    body = _COMMENT.sub("", read_text("styles", "base.qss")) + "\n" + own_rules
    sheet = _TOKEN_USE.sub(substitute, body)
    if missing:
        log.warning("theme %s leaves tokens undefined: %s", scheme, ", ".join(sorted(missing)))
    return Theme(scheme=scheme, tokens=tokens, stylesheet=sheet, missing=frozenset(missing))


def build_palette(theme: Theme) -> QPalette:
    """A QPalette from the theme's tokens, for everything QSS does not paint."""
    c = theme.color
    pal = QPalette()
    roles: dict[QPalette.ColorRole, str] = {
        QPalette.ColorRole.Window: "window",
        QPalette.ColorRole.WindowText: "text",
        QPalette.ColorRole.Base: "surface",
        QPalette.ColorRole.AlternateBase: "surface-2",
        QPalette.ColorRole.Text: "text",
        QPalette.ColorRole.Button: "surface",
        QPalette.ColorRole.ButtonText: "text",
        QPalette.ColorRole.BrightText: "on-accent",
        QPalette.ColorRole.Highlight: "accent",
        QPalette.ColorRole.HighlightedText: "on-accent",
        QPalette.ColorRole.PlaceholderText: "faint",
        QPalette.ColorRole.ToolTipBase: "tooltip",
        QPalette.ColorRole.ToolTipText: "tooltip-text",
        QPalette.ColorRole.Link: "accent-text",
        QPalette.ColorRole.LinkVisited: "accent-text",
        QPalette.ColorRole.Light: "surface",
        QPalette.ColorRole.Midlight: "border",
        QPalette.ColorRole.Mid: "border-strong",
        QPalette.ColorRole.Dark: "faint",
        QPalette.ColorRole.Shadow: "border-strong",
        QPalette.ColorRole.Accent: "accent",
    }
    for role, token in roles.items():
        pal.setColor(role, c(token))
    disabled = QPalette.ColorGroup.Disabled
    for role in (
        QPalette.ColorRole.WindowText,
        QPalette.ColorRole.Text,
        QPalette.ColorRole.ButtonText,
    ):
        pal.setColor(disabled, role, c("faint"))
    pal.setColor(disabled, QPalette.ColorRole.Highlight, c("border-strong"))
    return pal


def scheme_from_qt(value: Qt.ColorScheme) -> Scheme:
    """The system's scheme; an unknown one (offscreen, old desktops) counts as light."""
    return "dark" if value == Qt.ColorScheme.Dark else "light"


def set_style_property(widget: QWidget, name: str, value: object) -> None:
    """Set a property a stylesheet selects on, and repolish so the change shows at once."""
    if widget.property(name) == value:
        return
    widget.setProperty(name, value)
    style = widget.style()
    style.unpolish(widget)
    style.polish(widget)
    widget.update()


class ThemeManager(QObject):
    """Applies the chosen theme to the whole application and follows the system when asked.

    Signals:
        changed(str): the scheme now showing ("light" or "dark"), after every restyle.
    """

    changed = Signal(str)

    def __init__(
        self,
        app: QApplication,
        choice: str = "system",
        parent: QObject | None = None,
        *,
        use_fusion: bool = True,
    ) -> None:
        super().__init__(parent)
        self._app = app
        self._choice: ThemeChoice = _as_choice(choice)
        self._system: Scheme = scheme_from_qt(app.styleHints().colorScheme())
        self._theme: Theme | None = None
        self._cache: dict[Scheme, Theme] = {}
        self._closed = False
        if use_fusion and app.style().name().lower() != "fusion":
            # Native styles ignore parts of a stylesheet (macOS, windows11): Fusion draws it all.
            fusion = QStyleFactory.create("Fusion")
            if fusion is not None:
                app.setStyle(fusion)
        app.styleHints().colorSchemeChanged.connect(self._on_system_scheme)
        self.apply(self._choice)

    # --- reading ----------------------------------------------------------------------------

    @property
    def choice(self) -> ThemeChoice:
        """What the person chose: "system", "light" or "dark"."""
        return self._choice

    @property
    def scheme(self) -> Scheme:
        """What is showing now: "light" or "dark"."""
        return self._system if self._choice == "system" else self._choice

    @property
    def theme(self) -> Theme:
        if self._theme is None:
            self._theme = self._load(self.scheme)
        return self._theme

    def color(self, token: str) -> QColor:
        """A colour of the current theme by token name ("accent", "muted", ...)."""
        return self.theme.color(token)

    def close(self) -> None:
        """Stop following the system (at shutdown, or when another manager takes over)."""
        # A flag rather than disconnect(): PySide6 6.12's disconnect() drops a reference to
        # True on every call, which Python 3.11 eventually punishes with a crash at exit.
        self._closed = True

    # --- changing ---------------------------------------------------------------------------

    def apply(self, choice: str) -> None:
        """Show ``choice`` ("system", "light" or "dark") now; unknown values mean "system"."""
        self._choice = _as_choice(choice)
        self._hint_native_scheme()
        theme = self._load(self.scheme)
        self._theme = theme
        # Palette first: the stylesheet's polish pass then sees the new palette.
        palette = build_palette(theme)
        self._app.setPalette(palette)
        QGuiApplication.setPalette(palette)
        self._app.setStyleSheet(theme.stylesheet)
        self.changed.emit(theme.scheme)

    def _load(self, scheme: Scheme) -> Theme:
        if scheme not in self._cache:
            self._cache[scheme] = load_theme(scheme)
        return self._cache[scheme]

    def _hint_native_scheme(self) -> None:
        """Tell the platform too, so title bars and native dialogs match (Qt 6.8+)."""
        hints = self._app.styleHints()
        try:
            if self._choice == "system":
                hints.unsetColorScheme()
                current = hints.colorScheme()
                if current != Qt.ColorScheme.Unknown:  # the override may have hidden a change
                    self._system = scheme_from_qt(current)
            else:
                hints.setColorScheme(
                    Qt.ColorScheme.Dark if self._choice == "dark" else Qt.ColorScheme.Light
                )
        except AttributeError:  # Qt before 6.8 has no override: the stylesheet still applies
            pass

    def _on_system_scheme(self, value: Qt.ColorScheme) -> None:
        if self._closed or self._choice != "system":
            return  # our own override echoing back, or the system changing under a fixed choice
        scheme = scheme_from_qt(value)
        if scheme == self._system:
            return
        self._system = scheme
        self.apply("system")


def _as_choice(value: str) -> ThemeChoice:
    for choice in CHOICES:
        if value == choice:
            return choice
    return "system"


__all__ = [
    "CHOICES",
    "Scheme",
    "Theme",
    "ThemeChoice",
    "ThemeManager",
    "build_palette",
    "load_theme",
    "parse_tokens",
    "scheme_from_qt",
    "set_style_property",
]

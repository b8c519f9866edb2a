"""Which tool servers a chat may use: a small button by the model picker, with a tick per server.

Settings → Tools lists the servers for every chat; here the person chooses, for the chat in
front of them, which of them it may use. A chat that was never changed uses every server that
is on (``ChatSettings.tool_servers`` None), so a server added later is there too; once a tick
is changed the chat keeps its own list. A tick takes effect from the next message. The button
says how many servers the chat uses ("Tools: 2 of 3") and hides when there are none.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QToolButton, QWidget
from shiboken6 import Shiboken

from app.sqlite import StorageError
from app.store import ChatStore
from app.tools import ToolSettings
from ui.icons import icon
from ui.plain import button_words, plain_tip, shown_name

log = logging.getLogger("conch.ui.chat_tools")

SETTINGS_ENTRY = "Tool servers in Settings…"


def button_text(used: int, total: int) -> str:
    """ "Tools: 2 of 3", "Tools: all 3", "Tools: off"."""
    if used == 0:
        return "Tools: off"
    if used == total:
        return f"Tools: all {total}" if total > 1 else "Tools: on"
    return f"Tools: {used} of {total}"


class ChatToolsButton(QToolButton):
    """The chat's tool servers, each a tick in the button's menu.

    Signals:
        settings_requested(): the person wants Settings → Tools.
        changed(str): the chat's choice was saved (its id).
    """

    settings_requested = Signal()
    changed = Signal(str)

    def __init__(
        self, tools: ToolSettings, store: ChatStore, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("ChatToolsButton")
        self.setIcon(icon("plug"))
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setAutoRaise(True)
        # The menu's arrow is part of the words ("Tools: on ▾"), not drawn under them.
        self.setStyleSheet("QToolButton::menu-indicator { image: none; width: 0px; }")
        self.setToolTip("Which tool servers this chat may use")
        self._tools = tools
        self._store = store
        self.chat_id = ""
        self.menu_ = QMenu(self)
        self.menu_.setObjectName("ChatToolsMenu")
        self.setMenu(self.menu_)
        self.actions_: dict[str, QAction] = {}
        self._shown: tuple[object, ...] = ()  # the servers the menu was built for
        stop = tools.on_change(self._servers_changed)
        self.destroyed.connect(lambda *_: stop())
        self.show_chat("")

    def _servers_changed(self) -> None:
        # A server's state changes often; the menu is built again only when the list does.
        if not Shiboken.isValid(self):
            return
        if self._signature() != self._shown:
            self.show_chat(self.chat_id)
        else:
            self._show_failures()

    def _signature(self) -> tuple[object, ...]:
        return tuple((c.id, c.name, c.enabled) for c in self._tools.configs)

    def chosen(self) -> set[str]:
        """The ids of the servers the chat may use now (of those that are on)."""
        if not self.chat_id:
            return set()
        mine = self._store.chat_settings(self.chat_id).tool_servers
        return set(self._tools.usable(mine))

    def show_chat(self, chat_id: str) -> None:
        """Show ``chat_id``'s choice ("" hides the button)."""
        self.chat_id = chat_id
        configs = self._tools.configs
        self._shown = self._signature()
        self.menu_.clear()
        self.actions_ = {}
        on = [c for c in configs if c.enabled]
        if not chat_id or not configs:
            self.setVisible(False)
            return
        chosen = self.chosen()
        for config in configs:
            action = QAction(button_words(shown_name(config.name)), self.menu_)
            action.setCheckable(True)
            if config.enabled:
                action.setChecked(config.id in chosen)
                action.toggled.connect(lambda ticked, s=config.id: self.set_used(s, ticked))
            else:  # off for every chat: turned on in Settings, not here
                action.setText(button_words(f"{shown_name(config.name)} (off in Settings)"))
                action.setEnabled(False)
            self.actions_[config.id] = action
            self.menu_.addAction(action)
        self.menu_.addSeparator()
        self.menu_.addAction(SETTINGS_ENTRY, self.settings_requested.emit)
        self._say(len(chosen), len(on))
        self._show_failures()
        self.setVisible(True)

    def _show_failures(self) -> None:
        """A server the chat uses that failed says so in the menu and on the button, so a
        chat whose tools are missing tells why before anyone looks in Settings."""
        failed: list[str] = []
        chosen = self.chosen()
        for config in self._tools.configs:
            action = self.actions_.get(config.id)
            if action is None or not config.enabled:
                continue
            state = self._tools.state(config.id)
            if state.phase == "failed":
                action.setText(button_words(f"{shown_name(config.name)} (failed)"))
                action.setToolTip(plain_tip(state.text))
                if config.id in chosen:
                    failed.append(f"{shown_name(config.name)}: {state.text}")
            else:
                action.setText(button_words(shown_name(config.name)))
                action.setToolTip("")
        base = "Which tool servers this chat may use"
        self.setToolTip(plain_tip("\n".join([base, *failed])) if failed else base)
        self.setProperty("failed", bool(failed))
        self.setIcon(icon("warning" if failed else "plug"))

    def _say(self, used: int, total: int) -> None:
        words = button_text(used, total)
        self.setText(f"{words} ▾")
        self.setAccessibleName(words)

    def set_used(self, server_id: str, used: bool) -> bool:
        """Let the chat use ``server_id`` or not, from its next message; False when the
        choice could not be saved (the tick goes back)."""
        if not self.chat_id:
            return False
        chosen = self.chosen()
        if used:
            chosen.add(server_id)
        else:
            chosen.discard(server_id)
        every = {c.id for c in self._tools.configs if c.enabled}
        # Every server that is on: follow Settings again, so a server added later is used too.
        keep = None if chosen == every else tuple(c for c in self._tools.usable() if c in chosen)
        try:
            self._store.update_chat_settings(self.chat_id, tool_servers=keep)
        except StorageError as exc:
            log.warning("the chat's tool servers could not be saved: %s", exc)
            action = self.actions_.get(server_id)
            if action is not None:  # the tick goes back; the menu stays as it is
                action.blockSignals(True)
                action.setChecked(not used)
                action.blockSignals(False)
            return False
        self._say(len(self.chosen()), len(every))
        self.changed.emit(self.chat_id)
        return True

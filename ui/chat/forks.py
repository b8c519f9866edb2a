"""The window's side of forking: "Fork from here" on a message, "New chat from summary" on a
chat, and the line under the title saying where a copied chat came from (a link back).

The chat log does the copying (app/forks.py); this opens the new chat. A chat with no summary
yet gets one written first (as ``/compact`` would), and the new chat is made when it is done.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QWidget

from app.forks import fork_from, from_summary, origin_words
from app.store import ChatStore, StoreError
from engines.base import Compacted, TurnProblem
from ui.chat.bridge import ConversationBridge
from ui.plain import PlainLabel


class OriginLink(PlainLabel):
    """ "Forked from “Trip”" under a copied chat's title; a click opens that chat.

    Signals:
        open_requested(str): the chat it came from.
    """

    open_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("", parent)
        self.setObjectName("ChatOrigin")
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        self.setMinimumWidth(1)
        self._source = ""
        self.setVisible(False)

    def show_for(self, store: ChatStore, chat_id: str) -> None:
        chat = store.get_chat(chat_id) if chat_id else None
        words = origin_words(chat, store) if chat is not None else ""
        link = chat.forked_from if chat is not None else None
        self._source = link.chat_id if link is not None else ""
        source = store.get_chat(self._source) if self._source else None
        reachable = source is not None and source.deleted_at is None
        self.setText(words)
        self.setToolTip("Open that chat" if reachable else "")
        self.setEnabled(reachable)
        self.setVisible(bool(words))

    def mouseReleaseEvent(self, ev: QMouseEvent) -> None:
        if ev.button() == Qt.MouseButton.LeftButton and self._source and self.isEnabled():
            self.open_requested.emit(self._source)
        super().mouseReleaseEvent(ev)


class ForkActions(QObject):
    """Makes the new chats and hands them to ``open_chat``; says how it went with ``status``."""

    def __init__(
        self,
        store: ChatStore,
        *,
        open_chat: Callable[[str], object],
        status: Callable[[str], None],
        bridge_for: Callable[[str], ConversationBridge | None],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._store = store
        self._open = open_chat
        self._status = status
        self._bridge_for = bridge_for
        self._waiting: set[str] = set()  # chats whose summary is being written for a copy

    def fork(self, chat_id: str, seq: int) -> str | None:
        """A new chat from ``chat_id``'s messages up to ``seq``, opened; its id."""
        try:
            chat = fork_from(self._store, chat_id, seq)
        except (StoreError, LookupError) as exc:
            self._status(f"The chat could not be forked: {exc}")
            return None
        self._open(chat.id)
        self._status("Forked: a new chat with the messages up to that one.")
        return chat.id

    def from_summary(self, chat_id: str) -> str | None:
        """A new chat from ``chat_id``'s latest summary and the messages after it, opened; its
        id. With no summary yet, one is written first and the chat is made after (None now)."""
        try:
            chat = from_summary(self._store, chat_id)
        except StoreError as exc:
            self._status(f"The new chat could not be made: {exc}")
            return None
        if chat is not None:
            self._open(chat.id)
            self._status("A new chat that starts from the summary.")
            return chat.id
        self._summarise_first(chat_id)
        return None

    def _summarise_first(self, chat_id: str) -> None:
        bridge = self._bridge_for(chat_id)
        if chat_id in self._waiting:
            return
        if bridge is None or not bridge.compact():
            self._status(
                "This chat has no summary yet, and one cannot be written now "
                "(wait for the answer to finish, or choose a model); then try again."
            )
            return
        self._waiting.add(chat_id)
        self._status("Summarising the chat first…")

        def finished() -> None:
            bridge.compacted.disconnect(made)
            bridge.problem.disconnect(failed)
            bridge.done.disconnect(ended)
            self._waiting.discard(chat_id)

        def made(_event: Compacted) -> None:
            finished()
            self.from_summary(chat_id)

        def failed(problem: TurnProblem) -> None:
            finished()
            self._status(f"No summary was written, so no new chat: {problem.message}")

        def ended(_reason: str) -> None:
            finished()
            self._status(
                "No summary was written: the chat is still short enough to keep whole. "
                "“Fork from here” on its last message copies it."
            )

        bridge.compacted.connect(made)
        bridge.problem.connect(failed)
        bridge.done.connect(ended)

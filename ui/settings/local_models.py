"""The window's side of models on this computer: bigger windows, loading lines, downloads.

- **Reload with a bigger window.** For the chat's model, when its server can load it with a
  window clearly bigger than the one it has (``engines.local.reload``), the picker shows
  "Reload with 16K" and the chat's latest too-long card "Reload <model> with a 16K window",
  each with the memory that takes. Pressing either loads the model again ("Loading <model> into
  memory…" on the card and beside the picker), lists the models again (the chat takes the new
  window from the list) and, from a card, sends the question again in place.
- **Loading line.** A message to a local model that is not in memory yet shows "Loading
  <model> into memory…" beside the picker until the first word of the answer arrives.
- **Downloads.** The picker's "Download a model…" opens the pull dialog; a model downloaded
  there is listed at once.

The controller only wires the main window's parts together; the work is the services'.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject

from app.background import Background
from engines.base import ModelInfo, NextStep, ProblemKind
from engines.local.reload import ReloadOffer
from engines.providers.base import ProviderError
from ui.cards.problem_card import ProblemCard
from ui.chat.bridge import ConversationBridge
from ui.chat.chat_model import RowKind
from ui.chat.model_picker import window_label
from ui.settings.pull_dialog import PullDialog

if TYPE_CHECKING:
    from ui.main_window import MainWindow

log = logging.getLogger("conch.ui.local_models")


def loading_text(model: ModelInfo, window: int | None = None) -> str:
    if window is None:
        return f"Loading {model.name} into memory…"
    return f"Loading {model.name} into memory with a {window_label(window)} window…"


def loading_short(window: int | None = None) -> str:
    """The same beside the picker, which names the model already."""
    if window is None:
        return "Loading into memory…"
    return f"Loading with a {window_label(window)} window…"


class LocalModelsController(QObject):
    """See the module doc. Made by the main window, once, after its parts exist."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.local = window.services.local_models
        self.offer: ReloadOffer | None = None
        self.reloading: ReloadOffer | None = None
        self.dialog: PullDialog | None = None
        self._tasks = Background(log, "local model work failed")
        self._learning: set[str] = set()
        self._watched: weakref.WeakSet[ConversationBridge] = weakref.WeakSet()
        self._loading: ConversationBridge | None = None  # waiting for its first word
        self._closed = False

        picker = window.picker
        picker.reload_requested.connect(lambda offer: self.reload(offer))
        picker.pull_requested.connect(self.open_pull)
        picker.model_chosen.connect(lambda _model: self.refresh())
        window.chat_opened.connect(lambda _chat: self._chat_opened())
        window.composer.submitted.connect(lambda _sent: self._watch(self._bridge()))
        rows = window.chat_view.chat_model
        rows.rowsInserted.connect(lambda *_args: self._offer_to_card())
        rows.modelReset.connect(self._offer_to_card)
        self._unsubscribe = window.services.catalogue.on_change(lambda _models: self.refresh())
        window.closed.connect(self.close)
        self._chat_opened()

    # --- which model, what offer ----------------------------------------------------------

    def _bridge(self) -> ConversationBridge | None:
        bridge = self.window.chat_view.bridge
        if bridge is None and self.window.current_chat_id:
            bridge = self.window.bridge(quiet=True)
        return bridge

    def current_model(self) -> ModelInfo | None:
        """The current chat's model (else the picker's), as the latest list has it."""
        services = self.window.services
        bridge = self.window.chat_view.bridge
        model: ModelInfo | None = bridge.conversation.model if bridge is not None else None
        if model is None and self.window.current_chat_id:
            chat = services.store.get_chat(self.window.current_chat_id)
            model = services.model_for(chat) if chat is not None else None
        if model is None:  # no chat open: the model the picker shows for the next one
            return services.catalogue.find(self.window.picker.current_key())
        return services.catalogue.find(model.key) or model

    def refresh(self) -> None:
        """Offer what the current model allows now (asking its server first, once)."""
        if self._closed:
            return
        catalogue = self.window.services.catalogue
        # Only with Ollama running: a download needs it to answer.
        self.window.picker.set_can_pull(
            self.local.can_pull() and "ollama" not in catalogue.unreachable
        )
        model = self.current_model()
        offer = self.local.offer(model) if model is not None else None
        self._show_offer(offer)
        if model is not None and model.local and offer is None:
            self._learn(model)

    def _learn(self, model: ModelInfo) -> None:
        if model.key in self._learning or self.local.loader(model.provider) is None:
            return  # asked already, or a server that cannot reload models
        self._learning.add(model.key)

        async def learn() -> None:
            try:
                await self.local.learn(model)
            finally:
                self._learning.discard(model.key)
            current = self.current_model()
            if current is not None and current.key == model.key and not self._closed:
                self._show_offer(self.local.offer(current))

        self._spawn(learn())

    def _show_offer(self, offer: ReloadOffer | None) -> None:
        self.offer = offer
        if self.reloading is None:
            self.window.picker.set_reload_offer(offer)
        self._offer_to_card()

    def _latest_too_long(self) -> tuple[ProblemCard, int] | None:
        """The chat's latest too-long card and the seq of its failed answer."""
        view = self.window.chat_view
        rows = view.chat_model.rows()
        for i in range(len(rows) - 1, -1, -1):
            row = rows[i]
            if row.kind is not RowKind.PROBLEM or row.message is None:
                continue
            problem = row.message.problem
            widget = view.indexWidget(view.chat_model.index(i, 0))
            if (
                problem is not None
                and problem.kind is ProblemKind.TOO_LONG
                and isinstance(widget, ProblemCard)
            ):
                return widget, row.message.seq
            return None  # a later problem of another kind: nothing to offer there
        return None

    def _offer_to_card(self) -> None:
        found = self._latest_too_long()
        if found is None or self._closed:
            return
        card, seq = found
        if card.property("reloaded"):
            return  # its message is on its way again
        if not card.property("reload_wired"):
            card.setProperty("reload_wired", True)
            card.reload_requested.connect(lambda offer, s=seq, c=card: self.reload(offer, s, c))
        if self.reloading is None:
            card.offer_reload(self.offer)

    # --- reloading ------------------------------------------------------------------------

    def reload(
        self, offer: ReloadOffer, seq: int | None = None, card: ProblemCard | None = None
    ) -> None:
        """Load the offer's model again with its window; from a card, then send again."""
        if self.reloading is not None:
            return
        bridge = self.window.chat_view.bridge
        if bridge is not None and bridge.busy:
            self.window.show_status("Wait for the answer to finish, or stop it first.")
            return
        self.reloading = offer
        text = loading_text(offer.model, offer.window)
        self.window.picker.set_loading(text, short=loading_short(offer.window))
        if card is not None:
            card.show_loading(text)
        self._spawn(self._reload(offer, seq, card))

    async def _reload(self, offer: ReloadOffer, seq: int | None, card: ProblemCard | None) -> None:
        size = window_label(offer.window)
        try:
            got = await self.local.reload(offer)
        except ProviderError as exc:
            said = exc.detail or exc.kind.value
            sentence = (
                f"{offer.model.name} could not be loaded with a {size} window ({said}); "
                "it keeps the window it had."
            )
            self.window.services.health.add("local-model", sentence, model=offer.model.name)
            self._reloaded(card, failed=sentence)
            return
        except BaseException:
            self._reloaded(card, failed="")
            raise
        for bridge in list(self._watched):
            # A window a refusal named in these chats is stale now.
            forget = getattr(bridge.conversation.engine, "forget_window", None)
            if callable(forget):
                forget(offer.model.key)
        if card is not None and seq is not None:
            with contextlib.suppress(RuntimeError):
                card.setProperty("reloaded", True)
                card.show_loading(f"Sending your message again to {offer.model.name}…")
        try:
            await self.window.services.catalogue.refresh()
        finally:
            self._reloaded(card)
        self.window.show_status(f"{offer.model.name} now reads {window_label(got)} tokens at once.")
        if seq is not None and not self._closed:
            self.window.take_step(NextStep(kind="retry", label="Try again"), seq)

    def _reloaded(self, card: ProblemCard | None, *, failed: str | None = None) -> None:
        self.reloading = None
        if self._closed:
            return
        self.window.picker.set_loading(None)
        with contextlib.suppress(RuntimeError):  # the card may have gone with its chat
            if card is not None and failed is not None:
                card.reload_failed(failed)
        if failed:
            self.window.show_status(failed)
        self.refresh()

    # --- the first answer of a model not in memory ----------------------------------------

    def _chat_opened(self) -> None:
        self._watch(self.window.chat_view.bridge)
        self.refresh()

    def _watch(self, bridge: ConversationBridge | None) -> None:
        if bridge is None:
            return
        if bridge not in self._watched:
            self._watched.add(bridge)
            bridge.busy_changed.connect(lambda busy, b=bridge: self._busy(b, busy))
            bridge.text_delta.connect(lambda _text, b=bridge: self._answering(b))
            bridge.thinking_delta.connect(lambda _text, b=bridge: self._answering(b))
            bridge.problem.connect(lambda _problem, b=bridge: self._answering(b))
        if bridge.busy:
            self._busy(bridge, True)

    def _busy(self, bridge: ConversationBridge, busy: bool) -> None:
        if not busy:
            self._answering(bridge)
            return
        if self.reloading is not None or bridge.chat_id != self.window.current_chat_id:
            return
        model = bridge.conversation.model
        listed = self.window.services.catalogue.find(model.key)
        if model.local and listed is not None and not listed.loaded:
            self._loading = bridge
            self.window.picker.set_loading(loading_text(model), short=loading_short())

    def _answering(self, bridge: ConversationBridge) -> None:
        if self._loading is bridge:
            self._loading = None
            if self.reloading is None and not self._closed:
                self.window.picker.set_loading(None)

    # --- downloads ------------------------------------------------------------------------

    def open_pull(self) -> PullDialog:
        """Show the download dialog (the one already open, if any)."""
        if self.dialog is None:
            self.dialog = PullDialog(self.local.pull, self.window)
            self.dialog.pulled.connect(lambda name: self._spawn(self._pulled(name)))
        self.dialog.show()
        self.dialog.raise_()
        self.dialog.activateWindow()
        return self.dialog

    async def _pulled(self, name: str) -> None:
        await self.window.services.catalogue.refresh()
        if not self._closed:
            self.window.show_status(f"{name} is downloaded; choose it in the model list.")

    # --- plumbing -------------------------------------------------------------------------

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self._tasks.start(work)

    def close(self) -> None:
        """The window closed: stop listening, stop what runs (a download included)."""
        if self._closed:
            return
        self._closed = True
        self._unsubscribe()
        if self.dialog is not None:
            self.dialog.stop()
        self._tasks.cancel()

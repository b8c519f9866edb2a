"""Download a model into Ollama by its name, with a progress bar and Stop.

The picker's "Download a model…" opens it (not modal: the chat goes on beside it). The download
is an asyncio task reading Ollama's streamed progress (``pull``, injected); Stop cancels the
task, which closes the stream. Ollama keeps what it already fetched, so downloading the same
name again goes on from there; the dialog says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from PySide6.QtCore import Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from engines.local.reload import PullError, PullProgress
from engines.providers.base import ProviderError
from ui.chat.model_picker import memory_label
from ui.plain import PlainLabel

log = logging.getLogger("conch.ui.pull")

Pull = Callable[[str], AsyncIterator[PullProgress]]

# Ollama's status words, as a person would say them (its layer lines are "pulling <digest>").
_SAID = {
    "pulling manifest": "Asking Ollama's library for {name}…",
    "verifying sha256 digest": "Checking the download…",
    "writing manifest": "Finishing…",
    "removing any unused layers": "Finishing…",
    "success": "{name} is ready to chat with.",
}


def progress_text(name: str, step: PullProgress) -> str:
    """One line for a step: "Downloading gemma3:1b… 0.5 of 1.1 GB", "Checking the download…"."""
    said = _SAID.get(step.status)
    if said is not None:
        return said.format(name=name)
    if step.total:
        done, total = memory_label(step.completed), memory_label(step.total)
        return f"Downloading {name}… {done.removesuffix(' GB')} of {total}"
    return f"Downloading {name}…"


class PullDialog(QDialog):
    """Name a model, download it, watch it come, stop it.

    Signals:
        pulled(str): the model is in Ollama now (the catalogue should list it).
    """

    pulled = Signal(str)

    def __init__(self, pull: Pull, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("PullDialog")
        self.setWindowTitle("Download a model")
        self._pull = pull
        self._task: asyncio.Task[None] | None = None
        self._name = ""

        intro = PlainLabel(
            "Ollama fetches it from its library and keeps it on this computer. "
            "Names look like llama3.2 or qwen3:8b.",
            self,
        )
        intro.setWordWrap(True)
        self.name = QLineEdit(self)
        self.name.setObjectName("PullName")
        self.name.setPlaceholderText("Model name, for example llama3.2")
        self.name.setAccessibleName("Name of the model to download")
        self.name.returnPressed.connect(self.start)
        self.name.textChanged.connect(self._name_changed)
        self.download = QPushButton("Download", self)
        self.download.setObjectName("NextStepButton")
        self.download.setProperty("variant", "primary")
        self.download.setEnabled(False)
        self.download.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setObjectName("PullStop")
        self.stop_button.setVisible(False)
        self.stop_button.clicked.connect(self.stop)
        self.status = PlainLabel(self)
        self.status.setObjectName("PullStatus")
        self.status.setWordWrap(True)
        self.status.setVisible(False)
        self.progress = QProgressBar(self)
        self.progress.setObjectName("PullProgress")
        self.progress.setAccessibleName("Download progress")
        self.progress.setTextVisible(False)  # the line below says how far, in words
        self.progress.setVisible(False)
        for shown_later in (self.progress, self.status):
            # Room kept from the start: the dialog does not have to grow when they show.
            policy = shown_later.sizePolicy()
            policy.setRetainSizeWhenHidden(True)
            shown_later.setSizePolicy(policy)
        self.status.setText(" ")

        row = QHBoxLayout()
        row.addWidget(self.name, 1)
        row.addWidget(self.download)
        row.addWidget(self.stop_button)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(row)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        self.resize(460, self.sizeHint().height())

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def _name_changed(self, text: str) -> None:
        self.download.setEnabled(bool(text.strip()) and not self.running)

    def start(self) -> None:
        """Download the named model (nothing happens while a download runs)."""
        name = self.name.text().strip()
        if not name or self.running:
            return
        self._name = name
        self.name.setEnabled(False)
        self.download.setVisible(False)  # Stop takes its place while it runs
        self.stop_button.setVisible(True)
        self.progress.setVisible(True)
        self.progress.setRange(0, 0)
        self._say(f"Asking Ollama's library for {name}…")
        self._task = asyncio.ensure_future(self._run(name))

    def stop(self) -> None:
        """Stop the download: the stream closes; what arrived stays with Ollama."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _run(self, name: str) -> None:
        ended = ""
        ok = False
        try:
            async for step in self._pull(name):
                self._show(name, step)
                ok = step.status == "success"
            if not ok:
                ended = f"Ollama stopped sending {name} before it was complete."
        except asyncio.CancelledError:
            ended = (
                f"Stopped. Ollama keeps what it fetched: downloading {name} again goes on "
                "from there."
            )
        except (PullError, ProviderError) as exc:
            ended = str(exc) if isinstance(exc, PullError) else exc.detail or str(exc)
        except Exception:  # a bug here must not take the window down
            log.exception("downloading %s failed", name)
            ended = f"Downloading {name} failed; Settings → Health may say more."
        finally:
            self._finished(name, ok, ended)

    def _show(self, name: str, step: PullProgress) -> None:
        fraction = step.fraction
        if fraction is None:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(fraction * 1000))
        self._say(progress_text(name, step))

    def _finished(self, name: str, ok: bool, ended: str) -> None:
        self._task = None
        with contextlib.suppress(RuntimeError):  # the dialog may be gone already
            self.stop_button.setVisible(False)
            self.download.setVisible(True)
            self.name.setEnabled(True)
            self._name_changed(self.name.text())
            if ok:
                self.progress.setRange(0, 1000)
                self.progress.setValue(1000)
            else:
                self.progress.setVisible(False)
                self._say(ended)
        if ok:
            self.pulled.emit(name)

    def _say(self, text: str) -> None:
        self.status.setText(text)
        self.status.setVisible(True)

    def closeEvent(self, event: QCloseEvent) -> None:
        # Closing the window stops the download: nothing runs unseen.
        self.stop()
        super().closeEvent(event)

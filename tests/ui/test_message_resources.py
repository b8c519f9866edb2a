"""A message never makes the window load anything: not a file, not a device, not a FIFO, not
a URL. Markdown keeps raw HTML as text and pictures as their names; under that, every
document a message is drawn in refuses to load whatever its HTML might name."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtGui import QImage
from pytestqt.qtbot import QtBot

from app.services import AppServices
from tests.fakes.http import LoopbackServer
from tests.ui.windows import shown
from tests.waits import HANG_MS, HANG_SECONDS
from ui.chat.chat_model import RowKind
from ui.chat.chat_view import ChatView
from ui.main_window import MainWindow

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as running:
        yield running


def attacks(url: str, fifo: Path) -> list[str]:
    """Message texts that would make a careless renderer read a file or fetch a URL."""
    return [
        '<img src="/dev/zero"> hi',
        "![x](/dev/zero)",
        "![x](file:///etc/passwd)",
        f"![x]({url}/md.png)",
        f'<img src="{url}/raw.png">',
        f"![x]({fifo})",
        f'<link rel="stylesheet" href="{url}/sheet.css">',
    ]


def test_a_message_document_loads_nothing_even_from_raw_html(
    tmp_path: Path, server: LoopbackServer
) -> None:
    """The last line of defence, fed raw HTML (which Markdown never lets through): a real
    picture beside it shows that a plain document would have loaded it. Run in a child
    process, so a regression (Qt aborts on /dev/zero, blocks for good on a FIFO) fails this
    test instead of killing or hanging the suite."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    picture = tmp_path / "big.png"
    image = QImage(300, 200, QImage.Format.Format_RGB32)
    image.fill(0xFF3366)
    assert image.save(str(picture))
    markup = f'<html><head><link rel="stylesheet" href="{server.url}/sheet.css"></head><body>'
    for src in ("/dev/zero", str(fifo), "file:///etc/passwd", f"{server.url}/raw.png", "pipe"):
        markup += f'<p><img src="{src}"></p>'
    markup += "<p>after</p></body></html>"
    script = textwrap.dedent(
        f"""
        from PySide6.QtCore import QUrl
        from PySide6.QtGui import QGuiApplication, QImage, QPainter, QTextDocument
        from ui.chat.markdown import MessageDocument
        app = QGuiApplication([])
        plain = QTextDocument()
        plain.setHtml({f'<img src="{picture}">'!r})
        print("plain", plain.idealWidth())
        safe = MessageDocument()
        safe.setHtml({f'<img src="{picture}">'!r})
        print("safe", safe.idealWidth())
        doc = MessageDocument()
        doc.setBaseUrl(QUrl.fromLocalFile({str(tmp_path) + "/"!r}))
        doc.setHtml({markup!r})
        doc.setTextWidth(400)
        image = QImage(400, int(doc.size().height()) + 1, QImage.Format.Format_ARGB32)
        painter = QPainter(image)
        doc.drawContents(painter)
        painter.end()
        print("drawn", "after" in doc.toPlainText(), image.width())
        """
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": os.getcwd()}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    widths = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert float(widths["plain"]) >= 300  # a plain document reads the picture from disk
    assert float(widths["safe"]) < 10  # ours shows an empty placeholder instead
    assert widths["drawn"] == "True 400"  # laid out and painted to the end
    assert server.requests == []


def test_pictures_and_html_in_messages_reach_nothing_through_the_window(
    qtbot: QtBot, services: AppServices, server: LoopbackServer, tmp_path: Path
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    store = services.store
    texts = attacks(server.url, fifo)
    chat = store.create_chat(title="Pictures")
    for n, text in enumerate(texts):
        store.append_message(chat.id, "user" if n % 2 == 0 else "assistant", text)
    # A long answer too: it is laid out in pieces, by another path.
    long = "\n\n".join([f"Paragraph {n} of the long one." for n in range(600)] + texts)
    store.append_message(chat.id, "assistant", long)
    with shown(qtbot, services) as win:
        qtbot.waitExposed(win, timeout=HANG_MS)
        assert win.open_chat(chat.id)
        view = win.chat_view
        model = view.chat_model
        last = model.find(RowKind.MESSAGE, len(texts))
        assert model.toggle_expanded(last)  # "Show all"
        qtbot.waitUntil(lambda: settled(view), timeout=HANG_MS)
        for i in range(model.rowCount()):
            view.scrollTo(model.index(i, 0))
            view.viewport().grab()  # painted, as on screen
        shown_texts = [view.delegate.shown_text(row) for row in model.rows()]
        assert_window_alive(win)
    # Every attack shows as the words it is: raw HTML as text, a picture as its name.
    everything = "\n".join(shown_texts)
    assert '<img src="/dev/zero"> hi' in everything
    assert "[picture: x]" in everything
    assert server.requests == []


def settled(view: ChatView) -> bool:
    view.doItemsLayout()  # Qt queues the layout with the real heights; run it here
    return not view.delegate.laying_out


def assert_window_alive(win: MainWindow) -> None:
    grabbed = win.grab()
    assert grabbed.width() > 0 and grabbed.height() > 0

"""How long the window takes to open a long chat: 100, 1,000 and 10,000 messages, offscreen.

``python -m bench.ui_open`` builds mock-mode services in a temporary data dir, writes three
chats through the chat log's own API (Markdown answers with lists, tables and code, like a real
chat), then opens each in the real ``MainWindow`` and times it until the chat is laid out and
painted. The goal is ≤ 300 ms for 10,000 messages. Prints one JSON line; peak memory is the
process's maximum resident set size.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

SIZES = (100, 1_000, 10_000)
GOAL_MS = 300.0

_ANSWERS = (
    "Here is a plan:\n\n1. **Measure** the lot.\n2. Draw the beds.\n3. Order the wood.\n",
    "| Item | Cost |\n|---|---|\n| Larch | €2,100 |\n| Soil | €1,300 |\n",
    "```python\nfor bed in range(24):\n    print(bed)\n```\n\nThat prints every bed.",
    "Short answer: yes. Untreated larch lasts 8–10 years without chemicals.",
)


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return round(peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024, 1)


def _fill(services: object, n: int) -> str:
    from app.services import AppServices

    assert isinstance(services, AppServices)
    store = services.store
    chat = store.create_chat(title=f"{n} messages", model_key="mock/mock-model")
    for i in range(n):
        if i % 2 == 0:
            store.append_message(chat.id, "user", f"Question {i}: how about the beds?")
        else:
            text = _ANSWERS[(i // 2) % len(_ANSWERS)]
            store.append_message(chat.id, "assistant", text, model_key="mock/mock-model")
    return chat.id


def main() -> dict[str, object]:
    from PySide6.QtWidgets import QApplication

    from app.services import build_services
    from ui.main_window import MainWindow
    from ui.start import route_qt_messages

    route_qt_messages()
    logging.getLogger("conch.qt").setLevel(logging.ERROR)  # offscreen size-hint chatter
    app = QApplication.instance() or QApplication([sys.argv[0]])
    assert isinstance(app, QApplication)
    rss_start = _peak_rss_mb()
    with tempfile.TemporaryDirectory(prefix="conch-bench-") as tmp:
        services = build_services(Path(tmp), mock=True, seed_demo_chat=False)
        chats = {n: _fill(services, n) for n in SIZES}
        elsewhere = services.store.create_chat(title="elsewhere").id  # to switch away between tries
        window = MainWindow(services)
        window.resize(1100, 760)
        window.show()
        app.processEvents()
        opened: dict[str, float] = {}
        reopened: dict[str, float] = {}
        rows: dict[str, int] = {}
        for n in SIZES:
            times = []
            for attempt in range(3):
                if attempt:
                    window.open_chat(elsewhere)
                    app.processEvents()
                started = time.perf_counter()
                window.open_chat(chats[n])
                view = window.chat_view
                view.executeDelayedItemsLayout()
                # Painted for real (offscreen, repaint() may paint nothing): the rows on
                # screen are the ones whose code gets coloured.
                view.viewport().grab()
                app.processEvents()
                times.append((time.perf_counter() - started) * 1000)
            opened[str(n)] = round(times[0], 1)
            reopened[str(n)] = round(statistics.median(times[1:]), 1)
            rows[str(n)] = window.chat_view.chat_model.rowCount()
        window.close()
        app.processEvents()
        services.store.close()
        services.memories.close()
        services.health.close()
    worst = opened[str(SIZES[-1])]
    return {
        "bench": "ui_open",
        "open_ms": opened,
        "reopen_ms": reopened,
        "rows_loaded": rows,
        "goal_ms_at_10000": GOAL_MS,
        "meets_goal": worst <= GOAL_MS,
        "peak_rss_mb": _peak_rss_mb(),
        "rss_before_mb": rss_start,
    }


if __name__ == "__main__":
    print(json.dumps(main()))

"""How long "Show all" on a very large answer keeps the window from answering, offscreen.

``python -m bench.render`` stores four answers in a chat (a one-line 1 MB answer, 1 MB with no
space at all, a 3 MB code block and a 20,000-row table), then for each clicks "Show all" in a
real ``ChatView`` while a 10 ms timer on the event loop records the longest wait for its turn
(``max_gap_ms``: how long the window would ignore a key press), and times how long until the
whole answer is laid out and painted (``total_ms``). The goal is a gap of at most 100 ms on an
idle machine (the load average is printed beside the figures). ``--before`` also measures each
answer as one document, as before pieces (with this branch's wrapping), and prints the ratios.
Prints one JSON line.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

GOAL_GAP_MS = 100.0


def answers() -> dict[str, str]:
    line = "".join(f"w{n} " for n in range(150_000))[:1_000_000]
    code_lines = [f"    total += bed_{n} * width  # row {n}" for n in range(80_000)]
    code = "```python\n" + "\n".join(code_lines)[:3_000_000] + "\n```\n"
    rows = "\n".join(f"| {n} | bed {n} | €{n * 3} |" for n in range(20_000))
    table = f"| Row | Bed | Cost |\n|---|---|---|\n{rows}\n"
    token = "QUJD" * 250_000  # one line with no space to break at (base64, say)
    return {
        "one_line_1mb": line,
        "one_token_1mb": token,
        "code_3mb": code,
        "table_20000_rows": table,
    }


def _measure(app: Any, view: Any, seq: int) -> dict[str, float]:
    from PySide6.QtCore import QTimer

    from ui.chat.chat_model import RowKind

    model = view.chat_model
    i = model.find(RowKind.MESSAGE, seq)
    view.scrollTo(model.index(i, 0))
    view.executeDelayedItemsLayout()
    view.viewport().grab()
    app.processEvents()
    longest = 0.0
    last = time.perf_counter()

    def tick() -> None:
        nonlocal longest, last
        now = time.perf_counter()
        longest = max(longest, now - last)
        last = now

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(tick)
    timer.start()
    started = time.perf_counter()
    model.toggle_expanded(i)  # what "Show all" does
    while True:
        app.processEvents()  # the window's own turns: layout, paint, the timer
        if not view.delegate.laying_out:
            view.executeDelayedItemsLayout()  # a last pass may still estimate a piece
            if not view.delegate.laying_out:
                break
    view.viewport().grab()
    total = time.perf_counter() - started
    tick()
    timer.stop()
    model.toggle_expanded(i)  # "Show less" again, for the next answer
    view.delegate.forget()
    app.processEvents()
    return {"max_gap_ms": round(longest * 1000, 1), "total_ms": round(total * 1000, 1)}


def main(before: bool = False) -> dict[str, object]:
    from PySide6.QtWidgets import QApplication

    import ui.chat.chat_model as model_module
    from app.services import build_services
    from ui.chat.chat_view import ChatView
    from ui.chat.markdown import Piece
    from ui.start import route_qt_messages

    route_qt_messages()
    logging.getLogger("conch.qt").setLevel(logging.ERROR)
    app = QApplication.instance() or QApplication([sys.argv[0]])
    assert isinstance(app, QApplication)
    texts = answers()
    out: dict[str, object] = {"bench": "render", "goal_max_gap_ms": GOAL_GAP_MS}
    with tempfile.TemporaryDirectory(prefix="conch-bench-") as tmp:
        services = build_services(Path(tmp), mock=True, seed_demo_chat=False)
        store = services.store
        chat = store.create_chat(title="Large answers", model_key="mock/mock-model")
        seqs: dict[str, int] = {}
        for name, text in texts.items():
            store.append_message(chat.id, "user", f"Show me {name}.")
            seqs[name] = store.append_message(
                chat.id, "assistant", text, model_key="mock/mock-model"
            ).seq
        view = ChatView(store, services.memories)
        view.resize(900, 700)
        view.show()
        view.set_chat(chat.id)
        app.processEvents()
        after = {name: _measure(app, view, seq) for name, seq in seqs.items()}
        out["after"] = after
        if before:
            # One document per answer, as before pieces: the long-message path switched off.
            setattr(model_module, "pieces_of", lambda text: (Piece(text),))  # noqa: B010
            old = {name: _measure(app, view, seq) for name, seq in seqs.items()}
            out["before"] = old
            out["gap_ratio"] = {
                name: round(old[name]["max_gap_ms"] / max(after[name]["max_gap_ms"], 0.1), 1)
                for name in seqs
            }
        view.close()
        app.processEvents()
        services.store.close()
        services.memories.close()
        services.health.close()
    out["meets_goal"] = all(m["max_gap_ms"] <= GOAL_GAP_MS for m in after.values())
    # Gaps are wall-clock time: on a shared machine they grow with its load.
    out["load_average_1m"] = round(os.getloadavg()[0], 2)
    out["cpus"] = os.cpu_count()
    return out


if __name__ == "__main__":
    print(json.dumps(main(before="--before" in sys.argv[1:])))

"""The README's figures as pictures: each benchmark's JSON line drawn as a bar chart.

``python -m bench.figures`` runs the benchmarks that take seconds (fit, prefix, too_long,
tools), keeps each one's JSON line in ``docs/figures/data/<name>.json`` and draws
``docs/figures/<name>.png``. The benchmarks that take the bundled model and many minutes are
not run here: save a run's last line as ``docs/figures/data/ttft.json`` (or ``recall.json``)
and this draws it too. ``--no-run`` draws from the saved lines only. Drawn with Qt's own
painter offscreen, so it needs nothing the app does not already have.

Prints one JSON line: the pictures written and the figures they show.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
from collections.abc import Callable
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "figures"
QUICK = ("fit", "prefix", "too_long", "tools")


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    text: str  # what is written at the bar's end
    ours: bool = True  # Conch's own figure (drawn in the accent colour) or an alternative's


@dataclass(frozen=True)
class Chart:
    title: str
    axis: str  # what the bars measure
    bars: tuple[Bar, ...]
    goal: float | None = None  # a dashed line at the goal, in the bars' unit
    goal_text: str = ""


def _share(x: float) -> str:
    return f"{x * 100:.1f}%"


def _fit(d: dict[str, Any]) -> Chart:
    sizes = (100, 1_000, 10_000, 100_000)
    bars = tuple(
        Bar(f"{n:,} messages", float(d[f"plan_us_{n}"]), f"{d[f'plan_us_{n}']:.1f} µs")
        for n in sizes
    )
    return Chart(
        f"Planning a fold stays flat: 100,000 ÷ 100 messages = {d['ratio_100k_over_100']}×",
        "microseconds per plan",
        bars,
    )


def _prefix(d: dict[str, Any]) -> Chart:
    names = {"conch": "Conch", "drop_oldest": "drop oldest", "summarise_at_75": "summary at 75%"}
    bars: list[Bar] = []
    for window in ("8k", "16k", "32k", "128k"):
        row = d["mixed"][window]
        for key, name in names.items():
            if key in row:
                share = float(row[key]["cached_share"])
                bars.append(Bar(f"{window} · {name}", share, _share(share), key == "conch"))
    return Chart(
        f"Tokens a prompt cache can reuse, {d['turns']:,} turns",
        "cached share of tokens sent",
        tuple(bars),
        goal=float(d["goal_cached_share_16k"]),
        goal_text=f"goal at 16K: {_share(float(d['goal_cached_share_16k']))}",
    )


def _too_long(d: dict[str, Any]) -> Chart:
    bars = (
        Bar("recognised · Conch", float(d["recall"]), _share(float(d["recall"]))),
        Bar(
            "recognised · keywords",
            float(d["keyword_recall"]),
            _share(float(d["keyword_recall"])),
            False,
        ),
        Bar("window read · Conch", float(d["window_share"]), _share(float(d["window_share"]))),
        Bar(
            "window read · keywords",
            float(d["keyword_window_share"]),
            _share(float(d["keyword_window_share"])),
            False,
        ),
    )
    misses = d["near_misses"]
    return Chart(
        f"“Too long” refusals from {d['providers']} providers ({d['too_long']} bodies); false "
        f"alarms on {misses} near misses: Conch {d['false_positives']}, keywords "
        f"{d['keyword_false_positives']}",
        "share of refusal bodies",
        bars,
    )


def _tools(d: dict[str, Any]) -> Chart:
    bars = (
        Bar("every schema", float(d["full_share"]), _share(float(d["full_share"])), False),
        Bar("lean list", float(d["lean_share"]), _share(float(d["lean_share"]))),
        Bar(
            "lean, schemas fetched",
            float(d["lean_bound_share"]),
            _share(float(d["lean_bound_share"])),
        ),
    )
    return Chart(
        f"A tool list's cost at {d['window']:,} tokens ({d['tools']} tools)",
        "share of the budget",
        bars,
        goal=0.10,
        goal_text="goal: 10%",
    )


def _ttft(d: dict[str, Any]) -> Chart:
    names = {"conch": "Conch", "conch_unwarmed": "not read ahead"}
    bars: list[Bar] = []
    for window in sorted((k for k in d if k.isdigit()), key=int):
        for policy, name in names.items():
            figures = d[window].get(policy)
            matched = figures.get("matched") if isinstance(figures, dict) else None
            fold = matched.get("fold_vs_control") if isinstance(matched, dict) else None
            if not isinstance(fold, dict):
                continue
            for which, key in (("median", "median"), ("worst", "max")):
                value = fold.get(key)
                if isinstance(value, int | float):
                    label = f"{int(window):,} · {name} · {which}"
                    bars.append(Bar(label, float(value), f"{value:.2f}×", policy == "conch"))
    return Chart(
        "A fold turn's time to first token ÷ the same turn on a server that never folds",
        "ratio",
        tuple(bars),
        goal=1.5,
        goal_text="goal: 1.5×",
    )


CHARTS: dict[str, Callable[[dict[str, Any]], Chart]] = {
    "fit": _fit,
    "prefix": _prefix,
    "too_long": _too_long,
    "tools": _tools,
    "ttft": _ttft,
}


def run_quick(name: str) -> dict[str, Any]:
    """Run ``bench.<name>`` in this process; its last printed line is its figures."""
    module = importlib.import_module(f"bench.{name}")
    printed = io.StringIO()
    with redirect_stdout(printed):
        result = module.main()
    if isinstance(result, dict):
        return result
    return dict(json.loads(printed.getvalue().strip().splitlines()[-1]))


def draw(chart: Chart, path: Path) -> None:
    """``chart`` as a horizontal bar chart in a PNG, light theme, 2× for sharp text."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QRectF, Qt
    from PySide6.QtGui import QColor, QFont, QImage, QPainter, QPen
    from PySide6.QtWidgets import QApplication

    # A QApplication, not a bare QGuiApplication: one process holds one, and Qt's widgets
    # (pytest-qt's tests in the same run) need the full kind.
    app = QApplication.instance() or QApplication([])
    assert app is not None
    scale, width, row, top, left = 2, 900, 30, 70, 230
    height = top + row * len(chart.bars) + 50
    image = QImage(width * scale, height * scale, QImage.Format.Format_ARGB32)
    image.fill(QColor("#ffffff"))
    p = QPainter(image)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.scale(scale, scale)
    title = QFont()
    title.setPointSizeF(10.5)
    title.setBold(True)
    small = QFont()
    small.setPointSizeF(9)
    p.setFont(title)
    p.setPen(QColor("#1f2328"))
    flags = int(Qt.AlignmentFlag.AlignLeft) | int(Qt.TextFlag.TextWordWrap)
    p.drawText(QRectF(16, 10, width - 32, 44), flags, chart.title)
    top_value = max([b.value for b in chart.bars] + [chart.goal or 0.0]) or 1.0
    span = width - left - 90
    p.setFont(small)
    for n, bar in enumerate(chart.bars):
        y = top + n * row
        p.setPen(QColor("#57606a"))
        right = int(Qt.AlignmentFlag.AlignRight) | int(Qt.AlignmentFlag.AlignVCenter)
        p.drawText(QRectF(8, y, left - 16, row - 6), right, bar.label)
        length = span * bar.value / top_value
        p.fillRect(
            QRectF(left, y + 4, length, row - 14), QColor("#d1242f" if bar.ours else "#afb8c1")
        )
        p.setPen(QColor("#1f2328"))
        at = int(Qt.AlignmentFlag.AlignLeft) | int(Qt.AlignmentFlag.AlignVCenter)
        p.drawText(QRectF(left + length + 6, y, 90, row - 6), at, bar.text)
    if chart.goal is not None:
        x = left + span * chart.goal / top_value
        pen = QPen(QColor("#0969da"))
        pen.setStyle(Qt.PenStyle.DashLine)
        p.setPen(pen)
        p.drawLine(int(x), top - 4, int(x), top + row * len(chart.bars))
        p.drawText(
            QRectF(x - 80, top + row * len(chart.bars) + 2, 160, 18),
            int(Qt.AlignmentFlag.AlignHCenter),
            chart.goal_text,
        )
    p.setPen(QColor("#57606a"))
    p.drawText(QRectF(left, height - 24, span, 18), int(Qt.AlignmentFlag.AlignLeft), chart.axis)
    p.end()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not image.save(str(path)):
        raise OSError(f"could not write {path}")


def main(run: bool = True, out: Path = OUT) -> dict[str, Any]:
    data_dir = out / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    for name, make in CHARTS.items():
        saved = data_dir / f"{name}.json"
        if run and name in QUICK:
            saved.write_text(json.dumps(run_quick(name), indent=1) + "\n", "utf-8")
        if not saved.exists():
            continue
        chart = make(json.loads(saved.read_text("utf-8")))
        if not chart.bars:
            continue
        draw(chart, out / f"{name}.png")
        written[name] = chart.title
    return {"bench": "figures", "written": written}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-run", action="store_true", help="draw from the saved lines only")
    args = parser.parse_args()
    print(json.dumps(main(run=not args.no_run)))

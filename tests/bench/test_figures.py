"""The README's pictures are drawn from the benchmarks' own JSON lines."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import QApplication

from bench import figures

SAVED = Path(__file__).resolve().parents[2] / "docs" / "figures" / "data"


def test_each_saved_line_is_drawn_with_conch_s_bars_in_the_accent_colour(
    tmp_path: Path, qapp: QApplication
) -> None:
    shutil.copytree(SAVED, tmp_path / "data")
    result = figures.main(run=False, out=tmp_path)

    assert set(result["written"]) >= {"fit", "prefix", "too_long", "tools"}
    saved = json.loads((SAVED / "too_long.json").read_text("utf-8"))
    assert f"Conch {saved['false_positives']}" in result["written"]["too_long"]
    image = QImage(str(tmp_path / "too_long.png"))
    assert not image.isNull() and image.width() == 1800
    # Conch's bars are painted in the accent colour, the alternative's in grey.
    colours = {image.pixelColor(x, y).name() for x in range(0, 1800, 7) for y in range(0, 480, 7)}
    assert QColor("#d1242f").name() in colours and QColor("#afb8c1").name() in colours


def test_a_chart_scales_to_its_largest_bar_or_goal() -> None:
    chart = figures._tools(json.loads((SAVED / "tools.json").read_text("utf-8")))
    assert chart.goal == 0.10
    assert [b.ours for b in chart.bars] == [False, True, True]

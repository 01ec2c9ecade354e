"""The Server window's plots of the last minutes (pyqtgraph), from the service's stats samples as
server_data.ServerFeed.series reads them: tokens per second (prompt and generation), slots busy and queued under
the slot count, the prompt-cache hit rate over the last minute, and memory by kind (a curve per kind, added as
kinds appear). Covered by tests/gui/test_gui_server.py (the curves follow the feed, the background the palette)."""
from __future__ import annotations

import os

os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")      # pyqtgraph binds to the Qt this app uses

import pyqtgraph as pg  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QPalette  # noqa: E402

from app.gui.server.server_data import MEMORY_LABELS, MEMORY_ORDER  # noqa: E402

CURVE_COLORS = {"prompt tok/s": "#4c78a8", "generation tok/s": "#54a24b", "busy slots": "#f58518",
                "queued": "#e45756", "cache hit %": "#72b7b2"}
MEMORY_COLORS = {"weights": "#4c78a8", "kv": "#54a24b", "compute": "#f58518", "prompt cache": "#b279a2",
                 "checkpoints": "#9d755d", "draft": "#eeca3b", "projector": "#ff9da6"}


def _plot(layout, title: str, left: str):
    item = layout.addPlot(title=title)
    item.showGrid(x=True, y=True, alpha=0.25)
    item.setLabel("left", left)
    item.setLabel("bottom", "seconds ago")
    item.setMouseEnabled(x=False, y=False)
    item.setMenuEnabled(False)
    item.hideButtons()
    item.addLegend(offset=(4, 4), labelTextSize="8pt", colCount=2)
    return item


class ServerPlots(pg.GraphicsLayoutWidget):
    """Four plots over the feed's window (`window_s` seconds back to now), redrawn from a feed's series."""

    def __init__(self, window_s: float, parent=None):
        pg.setConfigOptions(antialias=True)
        super().__init__(parent)
        self.setMinimumHeight(220)
        self.tok_plot = _plot(self, "Tokens per second", "tok/s")
        self.slot_plot = _plot(self, "Slots", "slots")
        self.nextRow()
        self.hit_plot = _plot(self, "Prompt-cache hit rate (last minute)", "%")
        self.hit_plot.setYRange(0, 100)
        self.mem_plot = _plot(self, "Memory by kind", "bytes")
        self.mem_plot.getAxis("left").enableAutoSIPrefix(True)
        self.mem_plot.setLabel("left", "memory", units="B")
        self.curves: dict[str, pg.PlotDataItem] = {}
        for name, plot, label in (("prompt tok/s", self.tok_plot, "prompt"),
                                  ("generation tok/s", self.tok_plot, "generation"),
                                  ("busy slots", self.slot_plot, "busy"), ("queued", self.slot_plot, "queued"),
                                  ("cache hit %", self.hit_plot, "hit rate")):
            self.curves[name] = plot.plot([], [], name=label, pen=pg.mkPen(CURVE_COLORS[name], width=2),
                                          connect="finite")
        self.slots_line = pg.InfiniteLine(angle=0, pen=pg.mkPen("#888888", style=Qt.DashLine))
        self.slot_plot.addItem(self.slots_line)
        self.slots_line.setVisible(False)
        for plot in (self.tok_plot, self.slot_plot, self.hit_plot, self.mem_plot):
            plot.setXRange(-window_s, 0, padding=0)

    def restyle(self, palette: QPalette) -> None:
        """The window's base colour behind the plots (the system went light or dark)."""
        self.setBackground(palette.color(QPalette.Base))

    def refresh(self, series: dict) -> None:
        for name, curve in self.curves.items():
            xs, ys = series.get(name, ([], []))
            curve.setData(xs, ys)
        slots = series.get("slots", ([], []))[1]
        if slots and slots[-1] > 0:
            self.slots_line.setValue(slots[-1])
            self.slots_line.setVisible(True)
            self.slot_plot.setYRange(0, max(slots[-1], max(series["queued"][1] or [0])) + 0.5, padding=0)
        for key in [k for k in series if k.startswith("memory ")]:
            kind = key[len("memory "):]
            if key not in self.curves:
                color = MEMORY_COLORS.get(kind, "#888888")
                self.curves[key] = self.mem_plot.plot([], [], name=MEMORY_LABELS.get(kind, kind),
                                                      pen=pg.mkPen(color, width=2))
            self.curves[key].setData(*series[key])

    def memory_kinds(self) -> list[str]:
        return [k[len("memory "):] for k in self.curves if k.startswith("memory ")
                ] if self.curves else list(MEMORY_ORDER)

"""Memory visualizer widgets, painted with QPainter: stacked bars per device, a strip of the model's layers
coloured by device, and a legend. `LayoutView` puts them together for one (inventory, layout) pair."""
from __future__ import annotations

from PySide6.QtCore import QEvent, QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QSizePolicy, QToolTip, QVBoxLayout, QWidget

from app.gui.memory.memory_data import (
    DRAFT, DRAFT_NOTE, MAPPED, MAPPED_NOTE, MODEL_KINDS, OUR_KINDS, OVER, PROJECTOR, PROJECTOR_NOTE, PROMPT_CACHE,
    PROMPT_CACHE_NOTE,
    SEGMENT_COLORS, SEGMENT_LABELS, SEGMENT_ORDER, WEIGHTS,
    Column, LayerCell,
    device_colors, device_columns,
    exact_bytes, format_bytes, layer_cells, layout_device_ids, layout_summary,
)

BAR_WIDTH = 78
HEADER_H = 38
FOOTER_H = 22


class MemoryBars(QWidget):
    """One stacked bar per device. Heights are proportional within a column (each device fills its own bar)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.columns: list[Column] = []
        self.zoom = False        # True: show only the model's own bytes, one scale for all columns
        self.setMinimumHeight(220)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Expanding)
        self.setMouseTracking(True)

    def set_columns(self, columns: list[Column]) -> None:
        self.columns = columns
        self.updateGeometry()
        self.update()

    def set_zoom(self, on: bool) -> None:
        self.zoom = bool(on)
        self.update()

    def visible_kinds(self) -> tuple[str, ...]:
        return MODEL_KINDS if self.zoom else SEGMENT_ORDER

    def scale_of(self, i: int) -> int:
        """Bytes that fill the bar of column i: its own total, or (zoomed) the largest model footprint."""
        if self.zoom:
            return max(1, max(sum(c.get(k) for k in MODEL_KINDS) for c in self.columns))
        return max(1, self.columns[i].total)

    def sizeHint(self) -> QSize:
        return QSize(max(240, len(self.columns) * (BAR_WIDTH + 60)), 300)

    # geometry, shared by paint and tooltips ---------------------------------------------------------------------
    def column_rect(self, i: int) -> QRectF:
        n = max(1, len(self.columns))
        slot = self.width() / n
        w = min(BAR_WIDTH, slot - 16)
        x = slot * i + (slot - w) / 2
        return QRectF(x, HEADER_H, w, max(10, self.height() - HEADER_H - FOOTER_H))

    def segment_rects(self, i: int) -> list[tuple[str, int, QRectF]]:
        """(kind, bytes, rect) bottom to top for column i; zero-byte segments are left out."""
        col = self.columns[i]
        bar = self.column_rect(i)
        total = self.scale_of(i)
        y = bar.bottom()
        out = []
        for kind in self.visible_kinds():
            b = col.get(kind)
            if b <= 0:
                continue
            h = bar.height() * b / total
            out.append((kind, b, QRectF(bar.left(), y - h, bar.width(), h)))
            y -= h
        return out

    def over_rect(self, i: int) -> QRectF | None:
        """The part of column i above the device's capacity, when a plan does not fit."""
        col = self.columns[i]
        if col.fits or self.zoom:
            return None
        bar = self.column_rect(i)
        h = bar.height() * col.over / max(1, col.total)
        return QRectF(bar.left(), bar.top(), bar.width(), h)

    def hit(self, x: float, y: float) -> tuple[int, str, int] | None:
        for i in range(len(self.columns)):
            r = self.over_rect(i)
            if r is not None and r.contains(x, y):
                return i, OVER, self.columns[i].over
            for kind, b, r in self.segment_rects(i):
                if r.contains(x, y):
                    return i, kind, b
        return None

    # painting ------------------------------------------------------------------------------------------------
    def paintEvent(self, _event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.Antialiasing, False)
        if not self.columns:
            p.setPen(self.palette().color(self.foregroundRole()))
            p.drawText(self.rect(), Qt.AlignCenter, "No device information yet")
            return
        small = QFont(self.font())
        small.setPointSizeF(max(7.0, small.pointSizeF() - 1))
        for i, col in enumerate(self.columns):
            bar = self.column_rect(i)
            for kind, _b, r in self.segment_rects(i):
                p.fillRect(r, QColor(SEGMENT_COLORS[kind]))
            over = self.over_rect(i)
            if over is not None:       # hatch what exceeds the device and draw its capacity line
                p.fillRect(over, QBrush(QColor(SEGMENT_COLORS[OVER]), Qt.BDiagPattern))
                tint = QColor(SEGMENT_COLORS[OVER])
                tint.setAlpha(90)
                p.fillRect(over, tint)
                p.setPen(QPen(QColor(SEGMENT_COLORS[OVER]), 2))
                p.drawLine(over.bottomLeft(), over.bottomRight())
            p.setPen(QPen(QColor("#6c757d"), 1))
            p.drawRect(bar)
            slot = QRectF(self.width() / max(1, len(self.columns)) * i, 0,
                          self.width() / max(1, len(self.columns)), HEADER_H)
            p.setPen(self.palette().color(self.foregroundRole()))
            p.setFont(self.font())
            p.drawText(slot.adjusted(2, 0, -2, -HEADER_H / 2), Qt.AlignCenter, col.device_id)
            p.setFont(small)
            p.drawText(slot.adjusted(2, HEADER_H / 2 - 2, -2, 0), Qt.AlignCenter,
                       self.fontMetrics().elidedText(col.name, Qt.ElideRight, int(slot.width()) - 4))
            ours = sum(col.get(k) for k in OUR_KINDS)
            foot = QRectF(slot.left(), bar.bottom() + 2, slot.width(), FOOTER_H - 2)
            text = f"{format_bytes(ours)} / {format_bytes(col.capacity)}"
            scale = f" (bar = {format_bytes(self.scale_of(i))})" if self.zoom else ""
            if scale and p.fontMetrics().horizontalAdvance(text + scale) > foot.width() - 4:
                scale = ""                      # a narrow column: the bytes matter more than the bar's scale
            p.drawText(foot, Qt.AlignCenter, text + scale)
        p.end()

    def event(self, e) -> bool:
        if e.type() == QEvent.ToolTip:
            pos = e.position() if hasattr(e, "position") else e.pos()
            h = self.hit(pos.x(), pos.y())
            if h is None:
                QToolTip.hideText()
            else:
                QToolTip.showText(e.globalPos(), self.tooltip_text(*h), self)
            return True
        return super().event(e)

    def tooltip_text(self, i: int, kind: str, b: int) -> str:
        col = self.columns[i]
        if kind == OVER:
            return f"{col.device_id} — needs {exact_bytes(b)} more than it has"
        text = f"{col.device_id} — {SEGMENT_LABELS[kind]}\n{exact_bytes(b)}\nof {exact_bytes(col.capacity)}"
        if kind == MAPPED:
            text += f"\n{MAPPED_NOTE}" + (f"; all of them: {exact_bytes(col.mapped)}" if col.mapped > b else "")
        elif kind == PROMPT_CACHE:
            text += f"\n{PROMPT_CACHE_NOTE}"
        elif kind == PROJECTOR:
            text += f"\n{PROJECTOR_NOTE}"
        elif kind == DRAFT:
            text += f"\n{DRAFT_NOTE}"
        elif kind == WEIGHTS and col.mapped:
            text += f"\n+ {exact_bytes(col.mapped)} of {MAPPED_NOTE}"
        return text


class LayerStrip(QWidget):
    """The model's blocks left to right, each coloured by the device that holds it. A MoE layer whose experts sit
    on another device is split: top half its attention's device, bottom half its experts' device."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.cells: list[LayerCell] = []
        self.colors: dict[str, str] = {}
        self.setMinimumHeight(34)
        self.setMaximumHeight(44)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self.setMouseTracking(True)

    def set_cells(self, cells: list[LayerCell], colors: dict[str, str]) -> None:
        self.cells = cells
        self.colors = colors
        self.update()

    def sizeHint(self) -> QSize:
        return QSize(400, 40)

    def cell_rect(self, i: int) -> QRectF:
        n = max(1, len(self.cells))
        w = (self.width() - 2) / n
        return QRectF(1 + i * w, 2, w, self.height() - 4)

    def cell_at(self, x: float) -> LayerCell | None:
        if not self.cells:
            return None
        i = int((x - 1) / max(1e-6, (self.width() - 2) / len(self.cells)))
        return self.cells[i] if 0 <= i < len(self.cells) else None

    def color_of(self, device: str) -> QColor:
        return QColor(self.colors.get(device, "#cccccc"))

    def paintEvent(self, _event) -> None:
        p = QPainter(self)
        if not self.cells:
            p.setPen(self.palette().color(self.foregroundRole()))
            p.drawText(self.rect(), Qt.AlignCenter, "No model layout")
            return
        gap = 1 if self.width() / len(self.cells) > 4 else 0
        for i, c in enumerate(self.cells):
            r = self.cell_rect(i).adjusted(0, 0, -gap, 0)
            if c.split:
                top = QRectF(r.left(), r.top(), r.width(), r.height() / 2)
                bottom = QRectF(r.left(), r.top() + r.height() / 2, r.width(), r.height() / 2)
                p.fillRect(top, self.color_of(c.device))
                p.fillRect(bottom, self.color_of(c.expert_device))
            else:
                p.fillRect(r, self.color_of(c.device))
        p.end()

    def event(self, e) -> bool:
        if e.type() == QEvent.ToolTip:
            pos = e.position() if hasattr(e, "position") else e.pos()
            c = self.cell_at(pos.x())
            if c is None:
                QToolTip.hideText()
            else:
                QToolTip.showText(e.globalPos(), c.describe(), self)
            return True
        return super().event(e)


class Swatch(QWidget):
    def __init__(self, color: str, text: str, parent=None):
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 8, 0)
        lay.setSpacing(4)
        box = QLabel()
        box.setFixedSize(12, 12)
        box.setStyleSheet(f"background: {color}; border: 1px solid #6c757d;")
        lay.addWidget(box)
        lay.addWidget(QLabel(text))


def _legend_row(items: list[tuple[str, str]]) -> QLabel:
    """Colour squares and their names as one wrapping line of text: it takes the width it is given (two plans
    side by side each get half the window) instead of demanding the width of every entry in a row."""
    html = "&nbsp;&nbsp; ".join(f"<span style='color:{color}'>&#9632;</span>&nbsp;{text.replace(' ', '&nbsp;')}"
                               for color, text in items)
    label = QLabel(html)
    label.setObjectName("legend")
    label.setTextFormat(Qt.RichText)
    label.setWordWrap(True)
    return label


class LayoutView(QWidget):
    """Bars + layer strip + legends + a summary line for one inventory and (optional) layout."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.bars = MemoryBars()
        self.zoom = QCheckBox("Zoom to the model (hide free and others' memory)")
        self.zoom.toggled.connect(self.bars.set_zoom)
        self.strip = LayerStrip()
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setObjectName("layoutSummary")
        self._device_legend = QWidget()
        self._device_legend_lay = QHBoxLayout(self._device_legend)
        self._device_legend_lay.setContentsMargins(0, 0, 0, 0)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.zoom)
        lay.addWidget(self.bars, 1)
        lay.addWidget(_legend_row([(SEGMENT_COLORS[k], SEGMENT_LABELS[k]) for k in SEGMENT_ORDER]
                                  + [(SEGMENT_COLORS[OVER], "Above capacity (does not fit)")]))
        strip_title = QLabel("Layers (left = first block; split cells: attention above, experts below)")
        strip_title.setObjectName("sectionTitle")
        strip_title.setWordWrap(True)
        lay.addWidget(strip_title)
        lay.addWidget(self.strip)
        lay.addWidget(self._device_legend)
        lay.addWidget(self.summary)
        self.inventory: dict | None = None
        self.layout_dict: dict | None = None

    def show_layout(self, inventory: dict | None, layout: dict | None, resident: bool = False,
                    prompt_cache: int = 0) -> None:
        self.inventory, self.layout_dict = inventory, layout
        self.bars.set_columns(device_columns(inventory, layout, resident=resident, prompt_cache=prompt_cache))
        colors = device_colors(layout_device_ids(layout, inventory))
        self.strip.set_cells(layer_cells(layout), colors)
        while self._device_legend_lay.count():
            item = self._device_legend_lay.takeAt(0)
            if item.widget():
                item.widget().deleteLater()
        if layout:
            used = {c.device for c in layer_cells(layout)} | {c.expert_device for c in layer_cells(layout)}
            for dev, color in colors.items():
                if dev in used:
                    n = sum(1 for c in layer_cells(layout) if c.device == dev)
                    self._device_legend_lay.addWidget(Swatch(color, f"{dev} ({n} layers)"))
        self._device_legend_lay.addStretch(1)
        self.summary.setText(self.describe(layout))

    describe = staticmethod(layout_summary)

"""The memory window's Qt tables: the devices of the inventory, and predicted vs actual bytes per device after a
load (from `memory_data.predicted_vs_actual`)."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from app.format import format_bytes
from app.gui.common.item_models import TableModel
from app.gui.memory.memory_data import Comparison


class DeviceTableModel(TableModel):
    """Rows: system RAM, then each GPU. Columns: device, kind, total, free."""
    HEADERS = ("Device", "Kind", "Total", "Free")

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[tuple] = []

    def set_inventory(self, inv: dict | None) -> None:
        rows = []
        if inv:
            rows.append(("System RAM", "cpu", int(inv.get("host_ram_total") or 0),
                         int(inv.get("host_ram_available") or 0)))
            for d in inv.get("devices", []):
                rows.append((f"{d['id']}: {d.get('name', '')}", d.get("kind", ""), int(d.get("total") or 0),
                             int(d.get("free") or 0)))
        self.beginResetModel()
        self.rows = rows
        self.endResetModel()

    def _rows(self) -> list:
        return self.rows

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        value = self.rows[index.row()][index.column()]
        if role == Qt.DisplayRole:
            return format_bytes(value) if index.column() >= 2 else value
        if role == Qt.ToolTipRole and index.column() >= 2:
            return f"{value:,} bytes"
        if role == Qt.TextAlignmentRole and index.column() >= 2:
            return int(Qt.AlignRight | Qt.AlignVCenter)
        return None


class ComparisonTableModel(TableModel):
    """Predicted vs actual bytes per device after a load."""
    HEADERS = ("Device", "Predicted", "Actual", "Difference")

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[Comparison] = []
        self.lines: list[Comparison] = []      # what the table shows: device rows and their kinds

    def set_rows(self, rows: list[Comparison]) -> None:
        """`rows`: one per device (predicted_vs_actual); each is followed on screen by its per-kind parts."""
        self.beginResetModel()
        self.rows = list(rows)
        self.lines = [x for r in self.rows for x in (r, *r.parts)]
        self.endResetModel()

    def _rows(self) -> list:
        return self.lines

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        r = self.lines[index.row()]
        col = index.column()
        value = (r.label, r.predicted, r.actual, r.diff)[col]
        if role == Qt.DisplayRole:
            if col == 0:
                return value
            if value is None:
                return "—"
            sign = "+" if col == 3 and value > 0 else ""
            return sign + format_bytes(value)
        if role == Qt.ToolTipRole and col > 0:
            return r.tooltip(col)
        if role == Qt.ForegroundRole and r.kind:
            return QColor("#6c757d")          # kind rows: lighter than the device totals
        if role == Qt.TextAlignmentRole and col > 0:
            return int(Qt.AlignRight | Qt.AlignVCenter)
        return None

"""The Server window's list: one row per request, newest first, its cells from server_data.cell (no Qt there).
Covered by tests/gui/test_gui_server.py."""
from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt
from PySide6.QtGui import QColor

from app.gui.server.server_data import COLUMNS, cell, summary

IdRole = Qt.UserRole + 1


class RequestTableModel(QAbstractTableModel):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[dict] = []

    def set_rows(self, rows: list[dict]) -> None:
        if [r["id"] for r in rows] == [r["id"] for r in self.rows]:
            self.rows = rows
            if rows:
                self.dataChanged.emit(self.index(0, 0), self.index(len(rows) - 1, len(COLUMNS) - 1))
            return
        self.beginResetModel()
        self.rows = rows
        self.endResetModel()

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):
        if role == Qt.DisplayRole and orientation == Qt.Horizontal:
            return COLUMNS[section]
        return None

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid() or index.row() >= len(self.rows):
            return None
        rec = self.rows[index.row()]
        column = COLUMNS[index.column()]
        if role == Qt.DisplayRole:
            return cell(rec, column)
        if role == Qt.ToolTipRole:
            return summary(rec) if column != "Client" else rec.get("client") or "(no User-Agent)"
        if role == Qt.ForegroundRole and column == "Status" and (rec.get("status") or 0) >= 400:
            return QColor("#d62728")
        if role == Qt.ForegroundRole and column == "Reuse" and (rec.get("cache") or {}).get("flagged"):
            return QColor("#d6611f")
        if role == Qt.TextAlignmentRole and column in ("Prompt", "Cached", "Reply", "TTFT", "Tok/s", "Drafted",
                                                       "Accepted", "Duration"):
            return int(Qt.AlignRight | Qt.AlignVCenter)
        if role == IdRole:
            return rec["id"]
        return None

    def row_of(self, rid: int) -> int:
        return next((i for i, r in enumerate(self.rows) if r["id"] == rid), -1)

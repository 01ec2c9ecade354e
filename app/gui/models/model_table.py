"""The model manager's Qt table: one `ModelRow` (model_data.py) per installed model.
Covered by tests/gui/test_gui_manager.py (the table's rows, cells and states)."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from app.format import format_bytes
from app.gui.common.item_models import NameRole, TableModel
from app.gui.models.model_data import ModelRow


class ModelTableModel(TableModel):
    """The model manager's table: one `ModelRow` per installed model."""
    HEADERS = ("Model", "Size", "Quantization", "Architecture", "Parameters", "Capabilities", "Source", "State",
               "Pinned", "Keep-alive", "Unloads")

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[ModelRow] = []

    def set_rows(self, rows: list[ModelRow]) -> None:
        if rows == self.rows:
            return
        self.beginResetModel()
        self.rows = list(rows)
        self.endResetModel()

    def _rows(self) -> list:
        return self.rows

    def row_of(self, name: str) -> int:
        return next((i for i, r in enumerate(self.rows) if r.name == name), -1)

    @staticmethod
    def cell(r: ModelRow, col: int) -> str:
        state = r.state or "not loaded"
        params = r.parameters or (f"{r.parameter_count:,}" if r.parameter_count else "")
        return (r.name, format_bytes(r.size), r.quantization, r.architecture, params, ", ".join(r.capabilities),
                r.source_label + (" (read-only)" if r.read_only and r.source != "builtin" else ""), state,
                "pinned" if r.pinned else "", r.keep_alive_label, r.until)[col]

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid() or index.row() >= len(self.rows):
            return None
        r = self.rows[index.row()]
        if role == Qt.DisplayRole:
            return self.cell(r, index.column())
        if role == NameRole:
            return r.name
        if role == Qt.ToolTipRole:
            if index.column() == 1:
                return f"{r.size:,} bytes"
            if index.column() == 4 and r.parameter_count:
                return f"{r.parameter_count:,} parameters"
            return r.why_read_only() or r.path
        if role == Qt.TextAlignmentRole and index.column() in (1, 4):
            return int(Qt.AlignRight | Qt.AlignVCenter)
        if role == Qt.ForegroundRole and index.column() == 7 and r.state == "loaded":
            return QColor("#2b8a3e")
        return None

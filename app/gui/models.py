"""Qt item models: conversations, installed models (the chat's picker and the manager's table), devices, and
predicted-vs-actual memory. Views bind to these; the data comes from `ChatHistory` and `ServiceState`."""
from __future__ import annotations

from PySide6.QtCore import QAbstractListModel, QAbstractTableModel, QModelIndex, Qt
from PySide6.QtGui import QColor

from app.gui.history import ChatHistory, Conversation
from app.gui.memory_data import Comparison, format_bytes
from app.gui.model_data import ModelRow

NameRole = Qt.UserRole + 1
IdRole = Qt.UserRole + 2
StateRole = Qt.UserRole + 3


class ConversationListModel(QAbstractListModel):
    """Conversations, most recent first. Editing a row renames the chat in SQLite."""

    def __init__(self, history: ChatHistory, parent=None):
        super().__init__(parent)
        self.history = history
        self.query = ""                  # the search box's text: only the chats that contain it
        self.items: list[Conversation] = history.conversations()

    def reload(self) -> None:
        self.beginResetModel()
        self.items = self.history.search(self.query)
        self.endResetModel()

    def set_query(self, text: str) -> None:
        self.query = text
        self.reload()

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.items)

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid() or index.row() >= len(self.items):
            return None
        c = self.items[index.row()]
        if role in (Qt.DisplayRole, Qt.EditRole):
            return c.title
        if role == Qt.ToolTipRole:
            return f"{c.title}\nmodel: {c.model or '(default)'}"
        if role == IdRole:
            return c.id
        return None

    def flags(self, index):
        base = super().flags(index)
        return base | Qt.ItemIsEditable if index.isValid() else base

    def setData(self, index, value, role=Qt.EditRole) -> bool:
        if role != Qt.EditRole or not index.isValid():
            return False
        try:
            self.items[index.row()] = self.history.rename(self.items[index.row()].id, str(value))
        except ValueError:
            return False     # empty title: keep the old one
        self.dataChanged.emit(index, index, [Qt.DisplayRole, Qt.EditRole])
        return True

    def row_of(self, conversation_id: int) -> int:
        for i, c in enumerate(self.items):
            if c.id == conversation_id:
                return i
        return -1


class ModelListModel(QAbstractListModel):
    """Installed models from /api/tags joined with /api/ps state. Display: "name · 98.0 MiB · loaded"."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[dict] = []   # {"name", "size", "state", "progress"}

    def set_models(self, tags: list[dict], ps: list[dict], progress: dict[str, float] | None = None) -> None:
        progress = progress or {}
        running = {(m.get("name") or m.get("model")): m for m in ps}
        rows = []
        for t in tags:
            name = t.get("name") or t.get("model")
            state, prog = "", None
            if name in progress:
                state, prog = "loading", progress[name]
            elif name in running:
                st = running[name].get("strata") or {}
                state = st.get("state", "loaded")
                prog = st.get("progress")
            rows.append({"name": name, "size": int(t.get("size") or 0), "state": state, "progress": prog})
        if rows == self.rows:
            return
        self.beginResetModel()
        self.rows = rows
        self.endResetModel()

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    @staticmethod
    def describe(row: dict) -> str:
        parts = [row["name"], format_bytes(row["size"])]
        if row["state"] == "loading":
            parts.append(f"loading {int(100 * (row['progress'] or 0))}%")
        elif row["state"]:
            parts.append(row["state"])
        return " · ".join(parts)

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid() or index.row() >= len(self.rows):
            return None
        row = self.rows[index.row()]
        if role == Qt.DisplayRole:
            return self.describe(row)
        if role in (NameRole, Qt.EditRole):
            return row["name"]
        if role == StateRole:
            return row["state"]
        if role == Qt.ToolTipRole:
            return f"{row['name']}\n{row['size']:,} bytes\n{row['state'] or 'not loaded'}"
        return None

    def row_of(self, name: str) -> int:
        for i, r in enumerate(self.rows):
            if r["name"] == name:
                return i
        return -1


class _TableModel(QAbstractTableModel):
    """A flat table with fixed column titles: subclasses set HEADERS and say which list the rows come from."""
    HEADERS: tuple[str, ...] = ()

    def _rows(self) -> list:
        raise NotImplementedError

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._rows())

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.HEADERS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):
        if role == Qt.DisplayRole and orientation == Qt.Horizontal:
            return self.HEADERS[section]
        return None


class DeviceTableModel(_TableModel):
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


class ComparisonTableModel(_TableModel):
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


class ModelTableModel(_TableModel):
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

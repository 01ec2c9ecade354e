"""The chat window's Qt item models: its conversations (from `ChatHistory`) and the installed models of its picker
(from `ServiceState`'s tags and ps)."""
from __future__ import annotations

from PySide6.QtCore import QAbstractListModel, QModelIndex, Qt

from app.format import format_bytes
from app.gui.chat.history import ChatHistory, Conversation
from app.gui.common.item_models import IdRole, NameRole, StateRole


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

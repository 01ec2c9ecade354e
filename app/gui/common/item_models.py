"""What the rooms' Qt item models share: the item roles the views read beyond the display text, and the base of a
flat table with fixed column titles. Covered by tests/gui/test_gui_item_models.py (the chat's lists and the
memory tables) and tests/gui/test_gui_manager.py (the model table)."""
from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt

NameRole = Qt.UserRole + 1
IdRole = Qt.UserRole + 2
StateRole = Qt.UserRole + 3


class TableModel(QAbstractTableModel):
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

"""The Server window's selected request: its summary line, its time to scale, and three tabs: Cache (what the
prompt cache reused and why, the prompt's anatomy bar, its parts sortable by tokens or cost), Request and Reply
(the bodies as the service kept them: bounded, credentials masked).
Covered by tests/gui/test_gui_server.py."""
from __future__ import annotations

import json

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QAbstractItemView, QLabel, QPlainTextEdit, QSplitter, QTableWidget, QTableWidgetItem,
                               QTabWidget, QTextBrowser, QVBoxLayout, QWidget)

from app.gui.server.request_bars import AnatomyBar, TimelineView
from app.gui.server.server_data import _ms, cache_html, part_name, summary

EMPTY = "Select a request to see its timeline and bodies."


class RequestDetail(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.summary = QLabel(EMPTY)
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.timeline = TimelineView()
        self.request_text = QPlainTextEdit()
        self.request_text.setReadOnly(True)
        self.reply_text = QPlainTextEdit()
        self.reply_text.setReadOnly(True)
        self.cache_text = QTextBrowser()
        self.cache_text.setOpenLinks(False)
        self.anatomy = AnatomyBar()
        self.parts_table = QTableWidget(0, 4)
        self.parts_table.setHorizontalHeaderLabels(["Part", "Tokens", "Cached", "Cost"])
        self.parts_table.verticalHeader().setVisible(False)
        self.parts_table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.parts_table.setSortingEnabled(True)
        self.parts_table.horizontalHeader().setStretchLastSection(True)
        self.parts_table.horizontalHeader().resizeSection(0, 260)
        cache_tab = QWidget()
        cl = QVBoxLayout(cache_tab)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.addWidget(self.anatomy)
        cache_split = QSplitter(Qt.Horizontal)
        cache_split.addWidget(self.cache_text)
        cache_split.addWidget(self.parts_table)
        cache_split.setSizes([640, 420])
        cl.addWidget(cache_split, 1)
        self.bodies = QTabWidget()
        self.bodies.addTab(cache_tab, "Cache")
        self.bodies.addTab(self.request_text, "Request")
        self.bodies.addTab(self.reply_text, "Reply")
        dl = QVBoxLayout(self)
        dl.setContentsMargins(0, 0, 0, 0)
        dl.addWidget(self.summary)
        dl.addWidget(self.timeline)
        dl.addWidget(self.bodies, 1)

    def show_record(self, rec: dict, with_cache: bool) -> None:
        """The record as the feed has it (no bodies); its cache report too unless the fetched detail's is shown."""
        self.summary.setText(summary(rec))
        self.timeline.set_record(rec)
        if with_cache:
            self.show_cache(rec.get("cache"))

    def show_detail(self, d: dict) -> None:
        """The fetched request (`/api/requests/{id}`): its bodies and headers, or why they could not be fetched."""
        if "error_fetching" in d:
            self.request_text.setPlainText(d["error_fetching"])
            self.reply_text.setPlainText("")
            return
        self.show_cache(d.get("cache"))
        head = "\n".join(f"{k}: {v}" for k, v in (d.get("headers") or {}).items())
        self.request_text.setPlainText(f"{d.get('method', '')} {d.get('path', '')}\n{head}\n\n"
                                       + _pretty(d.get("request_body", ""), d.get("request_bytes", 0),
                                                 d.get("body_limit", 0)))
        reply = _pretty(d.get("reply_body", ""), d.get("reply_bytes", 0), d.get("body_limit", 0))
        if d.get("error"):
            reply = f"Error: {d['error']}\n\n{reply}"
        self.reply_text.setPlainText(reply)

    def show_cache(self, cache: dict | None) -> None:
        """The Cache tab: the explainer's text, the anatomy bar and its parts (sortable by tokens or cost)."""
        self.cache_text.setHtml(cache_html(cache))
        self.anatomy.set_report(cache)
        parts = (cache or {}).get("anatomy") or []
        table = self.parts_table
        table.setSortingEnabled(False)
        table.setRowCount(len(parts))
        for i, part in enumerate(parts):
            secs = part.get("seconds")
            cells = [(part.get("label") if part.get("kind") in ("message", "system") else part_name(part), None),
                     (f"{part['tokens']:,}", part["tokens"]), (f"{part.get('cached', 0):,}", part.get("cached", 0)),
                     (_ms(secs) if secs is not None else "", secs if secs is not None else -1.0)]
            for j, (text, key) in enumerate(cells):
                item = _SortItem(text, key)
                if j:
                    item.setTextAlignment(int(Qt.AlignRight | Qt.AlignVCenter))
                table.setItem(i, j, item)
        table.setSortingEnabled(True)
        # the costliest parts first (by tokens where no prefill rate was measured yet)
        table.sortItems(3 if any(p.get("seconds") is not None for p in parts) else 1, Qt.DescendingOrder)

    def clear(self) -> None:
        self.timeline.set_record(None)
        self.summary.setText(EMPTY)
        self.request_text.clear()
        self.reply_text.clear()
        self.show_cache(None)


class _SortItem(QTableWidgetItem):
    """A table cell sorted by its number (tokens, seconds) rather than its text."""

    def __init__(self, text: str, key=None):
        super().__init__(text)
        self.key = key

    def __lt__(self, other) -> bool:
        if isinstance(other, _SortItem) and self.key is not None and other.key is not None:
            return self.key < other.key
        return self.text() < other.text()          # (QTableWidgetItem.__lt__ would call this one again)


def _pretty(text: str, size: int, limit: int) -> str:
    """A body as indented JSON when it is whole JSON; a note when it was cut at the service's bound."""
    if not text:
        return "(no body)" if not size else ""
    out = text
    try:
        out = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        pass
    if limit and size > limit:
        out += f"\n\n… {size - limit} more bytes not kept (the log keeps the first {limit})"
    return out

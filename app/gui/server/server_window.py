"""The Server window: what the apps and agents talking to Strata are doing. Every API request live (newest first:
time, client, API, model, status with its error, prompt and cached tokens, reply tokens, time to first token,
tok/s, drafted/accepted, queued), the selected one's timeline to scale and its request and reply (bounded, with
credentials masked by the service), and plots of the last five minutes (tokens/s, busy slots, prompt-cache hit
rate, memory by kind; pyqtgraph).

Fed by the service's event stream only: while the window is open it holds its own `/api/events?include=request,
stats` subscription (the service builds request events and stats samples only for such a subscriber), and it
reads the service's ring of recent requests (`/api/requests`) when it opens. Closed, it costs the service nothing.
Nothing is written to disk unless the user exports.
Covered by tests/gui/test_gui_server.py."""
from __future__ import annotations

import json
import os

os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")      # pyqtgraph binds to the Qt this app uses

import pyqtgraph as pg  # noqa: E402
from PySide6.QtCore import QAbstractTableModel, QEvent, QModelIndex, QRectF, Qt, QTimer, Signal  # noqa: E402
from PySide6.QtGui import QBrush, QColor, QPainter, QPalette, QPen  # noqa: E402
from PySide6.QtWidgets import (  # noqa: E402
    QAbstractItemView, QApplication, QCheckBox, QComboBox, QFileDialog, QHBoxLayout, QHeaderView, QLabel, QLineEdit,
    QMainWindow, QPlainTextEdit,
    QPushButton, QSplitter, QTableView, QTableWidget, QTableWidgetItem, QTabWidget, QTextBrowser, QVBoxLayout,
    QWidget,
)

from app.gui.server.server_data import (  # noqa: E402
    COLUMNS, MEMORY_LABELS, MEMORY_ORDER, PART_COLORS, PHASE_COLORS, PHASE_HELP, ServerFeed, _ms, anatomy_segments,
    cache_html, cell, curl_command, memory_text, part_name, summary, timeline,
)
from app.gui.common.state import ServiceState  # noqa: E402

IdRole = Qt.UserRole + 1
RETRY_MS = 1000
CURVE_COLORS = {"prompt tok/s": "#4c78a8", "generation tok/s": "#54a24b", "busy slots": "#f58518",
                "queued": "#e45756", "cache hit %": "#72b7b2"}
MEMORY_COLORS = {"weights": "#4c78a8", "kv": "#54a24b", "compute": "#f58518", "prompt cache": "#b279a2",
                 "checkpoints": "#9d755d", "draft": "#eeca3b", "projector": "#ff9da6"}


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


class TimelineView(QWidget):
    """One request's time, to scale: a bar cut into its phases (prepare, load, queued, prefill, decode, finish),
    a mark at the first token, each part's name and length under it."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.record: dict | None = None
        self.setMinimumHeight(64)

    def set_record(self, rec: dict | None) -> None:
        self.record = rec
        parts = timeline(rec) if rec else []
        self.setToolTip("\n".join(f"{n}: {_ms(s)} ({PHASE_HELP.get(n, n)})" for n, _, s in parts))
        self.update()

    def parts(self) -> list[tuple[str, float, float]]:
        return timeline(self.record) if self.record else []

    def segment_rects(self) -> list[tuple[str, QRectF]]:
        """Where each phase is drawn: widths in proportion to its seconds (what tests measure)."""
        parts = self.parts()
        total = sum(s for _, _, s in parts)
        left, width = 8.0, max(1.0, self.width() - 16.0)
        out = []
        for name, start, secs in parts:
            x = left + (start / total * width if total > 0 else 0.0)
            w = secs / total * width if total > 0 else 0.0
            out.append((name, QRectF(x, 8.0, w, 22.0)))
        return out

    def paintEvent(self, _ev) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.Antialiasing)
        text = self.palette().color(QPalette.WindowText)
        if not self.record:
            p.setPen(text)
            p.drawText(self.rect(), Qt.AlignCenter, "Select a request to see where its time went.")
            return
        rects = self.segment_rects()
        fm = p.fontMetrics()
        for name, r in rects:
            p.fillRect(r, QColor(PHASE_COLORS.get(name, "#888888")))
        # the legend under the bar: each part's colour, name and length, in order (wrapping when narrow)
        x, y = 8, 36
        for name, _, secs in self.parts():
            label = f"{name} {_ms(secs)}"
            w = 14 + fm.horizontalAdvance(label) + 14
            if x + w > self.width() and x > 8:
                x, y = 8, y + fm.height() + 2
            p.fillRect(QRectF(x, y + (fm.height() - 10) / 2, 10, 10), QColor(PHASE_COLORS.get(name, "#888888")))
            p.setPen(text)
            p.drawText(x + 14, y + fm.ascent(), label)
            x += w
        ttft = self.record.get("ttft")
        total = sum(s for _, _, s in self.parts())
        if ttft is not None and total > 0:
            x = 8.0 + ttft / total * max(1.0, self.width() - 16.0)
            p.setPen(QPen(text, 2))
            p.drawLine(int(x), 4, int(x), 34)
            p.drawText(int(x) + 3, 4 + fm.ascent(), "first token")
        p.end()


class AnatomyBar(QWidget):
    """Where a prompt's tokens went, to scale: the system message, each tool's schema, the template's text and
    the history by turn, each segment's width in proportion to its tokens; the tokens this request computed (after
    its cached prefix) hatched."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.segments: list[dict] = []
        self.setMinimumHeight(44)

    def set_report(self, cache: dict | None) -> None:
        self.segments = anatomy_segments(cache)
        self.setToolTip("\n".join(f"{s['name']}: {s['tokens']:,} tokens" + (" computed" if s["computed"] else
                                                                            " from the cache")
                                   + (f", {_ms(s['seconds'])} to compute" if s.get("seconds") else "")
                                   for s in self.segments))
        self.update()

    def segment_rects(self) -> list[tuple[dict, QRectF]]:
        total = sum(s["tokens"] for s in self.segments)
        left, width = 8.0, max(1.0, self.width() - 16.0)
        out, x = [], left
        for seg in self.segments:
            w = seg["tokens"] / total * width if total else 0.0
            out.append((seg, QRectF(x, 6.0, w, 18.0)))
            x += w
        return out

    def paintEvent(self, _ev) -> None:
        p = QPainter(self)
        text = self.palette().color(QPalette.WindowText)
        if not self.segments:
            p.setPen(text)
            p.drawText(self.rect(), Qt.AlignCenter, "No prompt anatomy for this request.")
            return
        hatch = QBrush(QColor(255, 255, 255, 150), Qt.BDiagPattern)
        for seg, r in self.segment_rects():
            p.fillRect(r, QColor(PART_COLORS.get(seg["kind"], "#888888")))
            if seg["computed"]:
                p.fillRect(r, hatch)
            if r.width() >= 3:
                p.setPen(QPen(self.palette().color(QPalette.Base), 1))
                p.drawLine(r.topRight(), r.bottomRight())
        fm = p.fontMetrics()
        x, y = 8, 30
        totals: dict[str, int] = {}
        for seg in self.segments:
            totals[seg["kind"]] = totals.get(seg["kind"], 0) + seg["tokens"]
        names = {"system": "system", "tool": "tools", "template": "template", "message": "history"}
        legend = [(f"{names.get(k, k)} {n:,}", QColor(PART_COLORS.get(k, "#888888")), False)
                  for k, n in totals.items()]
        legend.append((f"computed {sum(s['tokens'] for s in self.segments if s['computed']):,}", QColor("#888888"),
                       True))
        for label, color, hatched in legend:
            box = QRectF(x, y + (fm.height() - 10) / 2, 10, 10)
            p.fillRect(box, color)
            if hatched:
                p.fillRect(box, hatch)
            p.setPen(text)
            p.drawText(x + 14, y + fm.ascent(), label)
            x += 14 + fm.horizontalAdvance(label) + 14
        p.end()


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


class ServerWindow(QMainWindow):
    feed_changed = Signal()          # a request event or a stats sample was taken in (tests wait on it)

    def __init__(self, state: ServiceState, parent=None):
        super().__init__(parent)
        self.state = state
        self.bridge = state.bridge
        self.setWindowTitle("Strata — Server")
        self.resize(1200, 860)
        self.feed = ServerFeed()
        self.listening = False
        self.connected = False
        self._stream = None
        self._detail_call = None
        self.detail: dict | None = None
        self.selected_id: int | None = None
        self.last_sample: dict | None = None
        self._reading = False

        # the controls
        self.pause = QCheckBox("Pause")
        self.pause.setToolTip("Stop updating the list and plots (the service keeps logging)")
        self.hide_own = QCheckBox("Hide this app's polling")
        self.hide_own.setChecked(True)
        self.hide_own.setToolTip("Leave out the GET requests the desktop app itself makes to keep its windows fresh")
        self.clear_button = QPushButton("Clear")
        self.clear_button.setToolTip("Empty the list in this window (the service's log stays)")
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip("Save the requests in the list, as JSON lines (or JSON, by the file's name)")
        self.status = QLabel("Connecting…")
        top = QHBoxLayout()
        for w in (self.pause, self.hide_own, self.clear_button, self.export_button):
            top.addWidget(w)
        top.addWidget(self.status, 1)
        # the search: the service's log (kept on disk, earlier runs included) by client, model and status
        self.filter_client = QLineEdit()
        self.filter_client.setPlaceholderText("client (e.g. claude-cli)")
        self.filter_model = QLineEdit()
        self.filter_model.setPlaceholderText("model")
        self.filter_status = QComboBox()
        self.filter_status.addItems(["any status", "ok", "error", "4xx", "5xx"])
        for w, name in ((self.filter_client, "filterClient"), (self.filter_model, "filterModel"),
                        (self.filter_status, "filterStatus")):
            w.setObjectName(name)
        self.copy_curl = QPushButton("Copy as curl")
        self.copy_curl.setToolTip("The selected request as a curl command line (credentials left out)")
        self.replay_button = QPushButton("Replay")
        self.replay_button.setToolTip("Send the selected request to the service again, as it was")
        for b in (self.copy_curl, self.replay_button):
            b.setEnabled(False)
        search = QHBoxLayout()
        search.addWidget(QLabel("Search:"))
        search.addWidget(self.filter_client, 2)
        search.addWidget(self.filter_model, 2)
        search.addWidget(self.filter_status)
        search.addStretch(1)
        search.addWidget(self.copy_curl)
        search.addWidget(self.replay_button)
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(300)
        self._search_timer.timeout.connect(self._search)
        self.filter_client.textChanged.connect(lambda _t: self._search_timer.start())
        self.filter_model.textChanged.connect(lambda _t: self._search_timer.start())
        self.filter_status.currentIndexChanged.connect(lambda _i: self._search_timer.start())
        self.copy_curl.clicked.connect(lambda: self.copy_as_curl())
        self.replay_button.clicked.connect(lambda: self.replay())
        self.replayed: dict | None = None

        # the plots
        pg.setConfigOptions(antialias=True)
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setMinimumHeight(220)
        self._style_plots()
        self.tok_plot = _plot(self.plots, "Tokens per second", "tok/s")
        self.slot_plot = _plot(self.plots, "Slots", "slots")
        self.plots.nextRow()
        self.hit_plot = _plot(self.plots, "Prompt-cache hit rate (last minute)", "%")
        self.hit_plot.setYRange(0, 100)
        self.mem_plot = _plot(self.plots, "Memory by kind", "bytes")
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
            plot.setXRange(-self.feed.window_s, 0, padding=0)

        # the list
        self.model = RequestTableModel(self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        self.table.setWordWrap(False)
        self.table.setAlternatingRowColors(True)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.Interactive)
        for i, name in enumerate(COLUMNS):
            header.resizeSection(i, {"Time": 64, "Client": 124, "API": 220, "Model": 120, "Status": 160,
                                     "Reuse": 150, "TTFT": 70, "Drafted": 60, "Accepted": 66, "Queued": 70,
                                     "Duration": 70}.get(name, 56))
        header.setStretchLastSection(True)

        # the selected request
        self.summary = QLabel("Select a request to see its timeline and bodies.")
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
        detail = QWidget()
        dl = QVBoxLayout(detail)
        dl.setContentsMargins(0, 0, 0, 0)
        dl.addWidget(self.summary)
        dl.addWidget(self.timeline)
        dl.addWidget(self.bodies, 1)

        split = QSplitter(Qt.Vertical)
        split.addWidget(self.plots)
        split.addWidget(self.table)
        split.addWidget(detail)
        split.setSizes([250, 230, 380])
        central = QWidget()
        lay = QVBoxLayout(central)
        lay.addLayout(top)
        lay.addLayout(search)
        lay.addWidget(split, 1)
        self.setCentralWidget(central)

        self._table_timer = QTimer(self)
        self._table_timer.setSingleShot(True)
        self._table_timer.setInterval(100)            # bursts of events: one refresh
        self._table_timer.timeout.connect(self.refresh_table)
        self._retry = QTimer(self)
        self._retry.setSingleShot(True)
        self._retry.setInterval(RETRY_MS)
        self._retry.timeout.connect(self._listen)
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._on_selection())
        self.hide_own.toggled.connect(lambda _on: self.refresh_table())
        self.pause.toggled.connect(lambda on: None if on else (self.refresh_table(), self.refresh_plots()))
        self.clear_button.clicked.connect(self.clear)
        self.export_button.clicked.connect(lambda: self.export())

    def _style_plots(self) -> None:
        pal = self.palette()
        self.plots.setBackground(pal.color(QPalette.Base))

    def changeEvent(self, ev) -> None:
        super().changeEvent(ev)
        if ev.type() == QEvent.PaletteChange:          # the system went light or dark: the plots follow
            self._style_plots()

    # listening only while shown -----------------------------------------------------------------------------------
    def showEvent(self, ev) -> None:
        super().showEvent(ev)
        self.start_listening()

    def start_listening(self) -> None:
        if not self.listening:
            self.listening = True
            self._listen()

    def closeEvent(self, ev) -> None:
        self.stop_listening()
        super().closeEvent(ev)

    def hideEvent(self, ev) -> None:
        self.stop_listening()
        super().hideEvent(ev)

    def stop_listening(self) -> None:
        self.listening = False
        self._retry.stop()
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.cancel()
        self._set_connected(False)

    def _listen(self) -> None:
        if not self.listening or self._stream is not None or self.bridge.closed:
            return
        stream = self.bridge.stream(lambda c: c.events(include="request,stats"))
        self._stream = stream
        stream.item.connect(self._on_event)
        for sig in (stream.failed, stream.finished):
            sig.connect(lambda *_a, s=stream: self._lost(s))

    def _lost(self, stream) -> None:
        if self._stream is stream:
            self._stream = None
            self._set_connected(False)
            if self.listening:
                self._retry.start()

    def _set_connected(self, up: bool) -> None:
        self.connected = up
        self._update_status()

    def _on_event(self, item) -> None:
        etype, data = item
        if etype == "connected":
            self._set_connected(True)
            self.read_log()                 # the ring, after subscribing: nothing falls between the two
            return
        if etype == "request":
            self.take(data)
        elif etype == "stats":
            self.take_sample(data)

    def filters(self) -> dict:
        status = self.filter_status.currentText()
        return {"client": self.filter_client.text().strip(), "model": self.filter_model.text().strip(),
                "status": "" if status == "any status" else status}

    def _search(self) -> None:
        self.refresh_table()
        if self.connected:
            self.read_log()

    def read_log(self) -> None:
        """Take in the service's log of recent requests (GET /api/requests, with the search's filters: the service
        looks in its history on disk too)."""
        self._reading = True
        filters = self.filters()
        call = self.bridge.call(lambda c: c.requests(**filters))
        call.finished.connect(self._on_snapshot)
        call.failed.connect(lambda _m: setattr(self, "_reading", False))

    def _on_snapshot(self, records) -> None:
        self._reading = False
        records = records or []
        for rec in reversed(records):
            self.feed.upsert(rec)
        if not any(self.filters().values()):      # a filtered answer does not list every request in the log
            self.feed.settle_missing({r["id"] for r in records if isinstance(r.get("id"), int)})
        self.refresh_table()
        self.feed_changed.emit()

    # what the feed brings -----------------------------------------------------------------------------------------
    def take(self, rec: dict) -> None:
        self.feed.upsert(rec)
        if not self.pause.isChecked() and not self._table_timer.isActive():
            self._table_timer.start()
        if rec.get("id") == self.selected_id:
            self._show_selected(refetch=rec.get("state") == "done")
        self.feed_changed.emit()

    def take_sample(self, sample: dict) -> None:
        self.feed.add_sample(sample)
        self.last_sample = sample
        # more requests running here than the service has: an end event was lost (a subscriber whose queue
        # overflowed loses the oldest events), so read the ring again
        if not self._reading and self.feed.running() > int(sample.get("running") or 0):
            self.read_log()
        if not self.pause.isChecked():
            self.refresh_plots()
            if self.feed.records and any(r.get("state") == "running" for r in self.model.rows):
                self.refresh_table()
        self._update_status()
        self.feed_changed.emit()

    def _update_status(self) -> None:
        if not self.connected:
            self.status.setText("Not connected to the service." if not self.listening or self._stream is None
                                else "Connecting…")
            return
        s = self.last_sample or {}
        self.status.setText(f"{s.get('requests', 0)} requests, {s.get('errors', 0)} errors, "
                            f"{s.get('running', 0)} running · {memory_text(s)}")

    # views ------------------------------------------------------------------------------------------------------
    def refresh_table(self) -> None:
        self.model.set_rows(self.feed.ordered(hide_own=self.hide_own.isChecked(), **self.filters()))
        if self.selected_id is not None:
            row = self.model.row_of(self.selected_id)
            current = self.table.selectionModel().selectedRows()
            if row >= 0 and (not current or current[0].row() != row):
                self.table.selectRow(row)           # the same id again: _on_selection leaves it be

    def refresh_plots(self) -> None:
        series = self.feed.series()
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

    def _on_selection(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return
        rid = self.model.data(rows[0], IdRole)
        if rid != self.selected_id:
            self.selected_id = rid
            self.detail = None
            self._show_selected(refetch=True)

    def select_request(self, rid: int) -> None:
        row = self.model.row_of(rid)
        if row < 0:                         # arrived since the last refresh
            self.refresh_table()
            row = self.model.row_of(rid)
        if row >= 0:
            self.table.selectRow(row)

    def _show_selected(self, refetch: bool) -> None:
        rec = self.feed.records.get(self.selected_id) if self.selected_id is not None else None
        if rec is None:
            return
        self.summary.setText(summary(rec))
        self.timeline.set_record(rec)
        if not (self.detail or {}).get("cache"):
            self._show_cache(rec.get("cache"))
        if refetch:
            rid = rec["id"]
            call = self.bridge.call(lambda c: c.request_detail(rid))
            self._detail_call = call
            call.finished.connect(lambda d, rid=rid: self._on_detail(rid, d))
            call.failed.connect(lambda msg, rid=rid: self._on_detail(rid, {"error_fetching": msg}))

    def _on_detail(self, rid: int, d: dict) -> None:
        if rid != self.selected_id:
            return
        self.detail = d
        self.copy_curl.setEnabled("error_fetching" not in d)
        self.replay_button.setEnabled("error_fetching" not in d and d.get("state") == "done")
        if "error_fetching" in d:
            self.request_text.setPlainText(d["error_fetching"])
            self.reply_text.setPlainText("")
            return
        self._show_cache(d.get("cache"))
        head = "\n".join(f"{k}: {v}" for k, v in (d.get("headers") or {}).items())
        self.request_text.setPlainText(f"{d.get('method', '')} {d.get('path', '')}\n{head}\n\n"
                                       + _pretty(d.get("request_body", ""), d.get("request_bytes", 0),
                                                 d.get("body_limit", 0)))
        reply = _pretty(d.get("reply_body", ""), d.get("reply_bytes", 0), d.get("body_limit", 0))
        if d.get("error"):
            reply = f"Error: {d['error']}\n\n{reply}"
        self.reply_text.setPlainText(reply)

    def _show_cache(self, cache: dict | None) -> None:
        """The Cache tab: the explainer's text, the anatomy bar and its parts (sortable by tokens or cost)."""
        self.cache_text.setHtml(cache_html(cache))
        self.anatomy.set_report(cache)
        parts = (cache or {}).get("anatomy") or []
        table = self.parts_table
        table.setSortingEnabled(False)
        table.setRowCount(len(parts))
        for i, part in enumerate(parts):
            secs = part.get("seconds")
            cells = [(part.get("label") if part.get("kind") in ("message", "system") else part_name(part), None), (f"{part['tokens']:,}", part["tokens"]), (f"{part.get('cached', 0):,}",
                                                                        part.get("cached", 0)),
                     (_ms(secs) if secs is not None else "", secs if secs is not None else -1.0)]
            for j, (text, key) in enumerate(cells):
                item = _SortItem(text, key)
                if j:
                    item.setTextAlignment(int(Qt.AlignRight | Qt.AlignVCenter))
                table.setItem(i, j, item)
        table.setSortingEnabled(True)
        # the costliest parts first (by tokens where no prefill rate was measured yet)
        table.sortItems(3 if any(p.get("seconds") is not None for p in parts) else 1, Qt.DescendingOrder)

    # actions ------------------------------------------------------------------------------------------------------
    def clear(self) -> None:
        self.feed.clear()
        self.selected_id = None
        self.detail = None
        self.timeline.set_record(None)
        self.summary.setText("Select a request to see its timeline and bodies.")
        self.request_text.clear()
        self.reply_text.clear()
        self._show_cache(None)
        self.refresh_table()

    def copy_as_curl(self) -> str:
        """The selected request as a curl command, put on the clipboard."""
        if not self.detail or "error_fetching" in self.detail:
            return ""
        text = curl_command(self.detail, self.bridge.client.base_url)
        QApplication.clipboard().setText(text)
        self.statusBar().showMessage("Copied the request as a curl command", 5000)
        return text

    def replay(self) -> None:
        """Send the selected request again (the service replays it from its log); the new request is selected
        when it is listed."""
        rid = self.selected_id
        if rid is None:
            return
        self.replay_button.setEnabled(False)
        call = self.bridge.call(lambda c: c.replay(rid))
        call.finished.connect(self._on_replayed)
        call.failed.connect(lambda msg: (self.statusBar().showMessage(f"Replay failed: {msg}", 10000),
                                         self.replay_button.setEnabled(True)))

    def _on_replayed(self, answer: dict) -> None:
        self.replayed = answer
        self.replay_button.setEnabled(True)
        new = answer.get("record")
        self.statusBar().showMessage(f"Replayed request #{answer.get('replayed')}: status {answer.get('status')}"
                                     + (f", listed as #{new}" if new else ""), 10000)
        self.feed_changed.emit()
        if isinstance(new, int):
            QTimer.singleShot(300, lambda: self.select_request(new))

    def export(self, path: str | None = None) -> str | None:
        """Write the listed requests as JSON lines, one record a line (or one JSON document when the name ends in
        .json): the only thing this window ever writes to disk."""
        if path is None:
            path, _ = QFileDialog.getSaveFileName(self, "Export requests", "strata-requests.jsonl",
                                                  "JSON lines (*.jsonl);;JSON (*.json)")
            if not path:
                return None
        with open(path, "w", encoding="utf-8") as f:
            if path.endswith(".json"):
                json.dump({"requests": self.model.rows}, f, indent=1, ensure_ascii=False)
            else:
                for rec in self.model.rows:
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        self.statusBar().showMessage(f"Saved {len(self.model.rows)} requests to {path}", 8000)
        return path


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

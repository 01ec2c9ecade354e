"""The Server window: what the apps and agents talking to Strata are doing. Every API request live (newest first:
time, client, API, model, status with its error, prompt and cached tokens, reply tokens, time to first token,
tok/s, drafted/accepted, queued), the selected one's timeline to scale and its request and reply (bounded, with
credentials masked by the service), and plots of the last five minutes (tokens/s, busy slots, prompt-cache hit
rate, memory by kind; pyqtgraph).

Fed by the service's event stream only: while the window is open it holds its own `/api/events?include=request,
stats` subscription (the service builds request events and stats samples only for such a subscriber), and it
reads the service's ring of recent requests (`/api/requests`) when it opens. Closed, it costs the service nothing.
Nothing is written to disk unless the user exports.
The window holds the feed, its subscription, the search and the actions; what it shows is drawn by its parts: the
list (request_table.py), the selected request (request_detail.py, its bars in request_bars.py) and the plots
(server_plots.py), each fed from server_data.py's plain data.
Covered by tests/gui/test_gui_server.py."""
from __future__ import annotations

import json

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView, QApplication, QCheckBox, QComboBox, QFileDialog, QHBoxLayout, QHeaderView, QLabel, QLineEdit,
    QMainWindow, QPushButton, QSplitter, QTableView, QVBoxLayout, QWidget,
)

from app.gui.common.state import ServiceState
from app.gui.server.request_detail import RequestDetail
from app.gui.server.request_table import IdRole, RequestTableModel
from app.gui.server.server_data import COLUMNS, ServerFeed, curl_command, memory_text
from app.gui.server.server_plots import ServerPlots

RETRY_MS = 1000


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
        self.plots = ServerPlots(self.feed.window_s)
        self.curves = self.plots.curves
        self._style_plots()

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

        # the selected request (its parts under the window's names too: what tests and the screenshots read)
        self.request_view = view = RequestDetail()
        self.summary, self.timeline, self.anatomy = view.summary, view.timeline, view.anatomy
        self.request_text, self.reply_text = view.request_text, view.reply_text
        self.cache_text, self.parts_table = view.cache_text, view.parts_table

        split = QSplitter(Qt.Vertical)
        split.addWidget(self.plots)
        split.addWidget(self.table)
        split.addWidget(view)
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
        self.plots.restyle(self.palette())

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
        self.plots.refresh(self.feed.series())

    def memory_kinds(self) -> list[str]:
        return self.plots.memory_kinds()

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
        self.request_view.show_record(rec, with_cache=not (self.detail or {}).get("cache"))
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
        self.request_view.show_detail(d)

    # actions ------------------------------------------------------------------------------------------------------
    def clear(self) -> None:
        self.feed.clear()
        self.selected_id = None
        self.detail = None
        self.request_view.clear()
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

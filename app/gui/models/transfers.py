"""The model manager's two long operations, each with its progress and a Cancel button:

- `ImportPanel`: a GGUF on this machine into the store (`POST /api/import`): one bar for the hash and copy.
  Cancel closes the stream; the service stops at its next chunk and removes what it had written.
- `PullPanel`: a model from a registry (`POST /api/pull`, Ollama's progress stream): a name field, one bar per
  file (layer) of the model, the status line; Cancel closes the stream.
"""
from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QProgressBar, QPushButton, QVBoxLayout, QWidget,
)

from app.gui.common.bridge import Call, ServiceBridge
from app.gui.models.model_data import ImportProgress, PullProgress


class ImportPanel(QGroupBox):
    """Imports one file at a time; files dropped or chosen meanwhile wait in `queue`."""
    imported = Signal(str)          # model name
    ended = Signal()                # success, failure or cancel: the list may have changed

    def __init__(self, bridge: ServiceBridge, parent=None):
        super().__init__("Import", parent)
        self.setObjectName("importPanel")
        self.bridge = bridge
        self.call: Call | None = None
        self.progress: ImportProgress | None = None
        self.queue: list[str] = []
        self.label = QLabel()
        self.label.setObjectName("importStatus")
        self.label.setWordWrap(True)
        self.bar = QProgressBar()
        self.bar.setObjectName("importProgress")
        self.bar.setRange(0, 100)
        self.cancel_button = QPushButton("Cancel import")
        self.cancel_button.setObjectName("cancelImport")
        self.cancel_button.clicked.connect(lambda: self.cancel())
        row = QHBoxLayout()
        row.addWidget(self.bar, 1)
        row.addWidget(self.cancel_button)
        lay = QVBoxLayout(self)
        lay.addWidget(self.label)
        lay.addLayout(row)
        self._idle()
        self.setVisible(False)

    @property
    def busy(self) -> bool:
        return self.call is not None

    def start(self, path: str) -> None:
        if self.busy:
            self.queue.append(path)
            return
        self.setVisible(True)
        self.progress = ImportProgress(path)
        self.label.setText(f"Importing {path}…")
        self.bar.setValue(0)
        self.bar.setVisible(True)
        self.cancel_button.setEnabled(True)
        self.call = self.bridge.stream(lambda c: c.import_stream(path))
        self.call.item.connect(self._on_item)
        self.call.finished.connect(lambda _r: self._end(f"Imported {path} as {self.progress.model}.",
                                                        self.progress.model))
        self.call.failed.connect(lambda err: self._end(f"Could not import {path}: {err}"))
        self.call.cancelled.connect(lambda: self._end(f"Import of {path} cancelled; nothing was kept."))

    def _on_item(self, obj: dict) -> None:
        self.progress.update(obj)
        self.bar.setValue(self.progress.percent)
        self.label.setText(f"Importing {self.progress.path}: {self.progress.describe()}")

    def cancel(self) -> None:
        self.queue.clear()
        if self.call is not None:
            self.cancel_button.setEnabled(False)
            self.call.cancel()

    def _end(self, message: str, model: str = "") -> None:
        self.call = None
        self._idle()
        self.label.setText(message)
        if model:
            self.bar.setValue(100)
            self.imported.emit(model)
        self.ended.emit()
        if self.queue:
            self.start(self.queue.pop(0))

    def _idle(self) -> None:
        self.cancel_button.setEnabled(False)
        self.bar.setVisible(False)


class PullPanel(QGroupBox):
    started = Signal(str)           # the name as typed
    pulled = Signal(str)            # the name as typed (the store's local name may differ: see the manager)
    ended = Signal()

    def __init__(self, bridge: ServiceBridge, parent=None):
        super().__init__("Pull from a registry", parent)
        self.setObjectName("pullPanel")
        self.bridge = bridge
        self.call: Call | None = None
        self.progress: PullProgress | None = None
        self.bars: dict[str, QProgressBar] = {}
        self.name = QLineEdit()
        self.name.setObjectName("pullName")
        self.name.setPlaceholderText("Model name, e.g. qwen3:0.6b or hf.co/ORG/REPO:Q4_K_M")
        self.pull_button = QPushButton("Pull")
        self.pull_button.setObjectName("pullButton")
        self.cancel_button = QPushButton("Cancel pull")
        self.cancel_button.setObjectName("cancelPull")
        self.cancel_button.setEnabled(False)
        self.insecure = QCheckBox("Plain http registry (insecure)")
        self.insecure.setObjectName("pullInsecure")
        self.insecure.setToolTip("Ollama's --insecure: allow a registry without https, e.g. one on your own network")
        self.status = QLabel()
        self.status.setObjectName("pullStatus")
        self.status.setWordWrap(True)
        self.files = QWidget()
        self.files_lay = QVBoxLayout(self.files)
        self.files_lay.setContentsMargins(0, 0, 0, 0)
        self.name.returnPressed.connect(lambda: self.start())
        self.pull_button.clicked.connect(lambda: self.start())
        self.cancel_button.clicked.connect(lambda: self.cancel())
        row = QHBoxLayout()
        row.addWidget(self.name, 1)
        row.addWidget(self.pull_button)
        row.addWidget(self.cancel_button)
        lay = QVBoxLayout(self)
        lay.addLayout(row)
        lay.addWidget(self.insecure)
        lay.addWidget(self.status)
        lay.addWidget(self.files)

    @property
    def busy(self) -> bool:
        return self.call is not None

    def start(self, name: str | None = None) -> None:
        name = (name if isinstance(name, str) else self.name.text()).strip()
        if self.busy or not name:
            return
        self.name.setText(name)
        self._clear_bars()
        self.progress = PullProgress(name)
        self.status.setText(f"Pulling {name}…")
        self.pull_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        insecure = self.insecure.isChecked()
        self.call = self.bridge.stream(lambda c: c.pull_stream(name, insecure))
        self.call.item.connect(self._on_item)
        self.call.finished.connect(lambda _r: self._on_finished())
        self.call.failed.connect(lambda err: self._end(f"Could not pull {name}: {err}"))
        self.call.cancelled.connect(lambda: self._end(f"Pull of {name} cancelled."))
        self.started.emit(name)

    def _on_item(self, obj: dict) -> None:
        p = self.progress
        p.update(obj)
        self.status.setText(p.status)
        for digest, f in p.files.items():
            bar = self.bars.get(digest)
            if bar is None:
                bar = self.bars[digest] = QProgressBar()
                bar.setRange(0, 1000)
                self.files_lay.addWidget(bar)
            bar.setValue(int(1000 * f.fraction))
            bar.setFormat(f"{f.describe()} (%p%)")

    def _on_finished(self) -> None:
        p = self.progress
        if p.success:
            self._end(f"Pulled {p.model}.", p.model)
        else:
            self._end(f"Could not pull {p.model}: {p.error or 'the stream ended before success'}")

    def cancel(self) -> None:
        if self.call is not None:
            self.cancel_button.setEnabled(False)
            self.call.cancel()

    def _end(self, message: str, model: str = "") -> None:
        self.call = None
        self.status.setText(message)
        self.pull_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        if model:
            self.pulled.emit(model)
        self.ended.emit()

    def _clear_bars(self) -> None:
        for bar in self.bars.values():
            bar.deleteLater()
        self.bars.clear()

"""The memory window: live view of where loaded models sit (with predicted vs actual after a load and a load
progress bar) and a what-if planner (`POST /api/layout`) that shows a plan before loading anything."""
from __future__ import annotations

import json

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox, QFormLayout, QGroupBox, QHBoxLayout, QHeaderView, QLabel, QMainWindow, QPlainTextEdit, QProgressBar,
    QPushButton, QSpinBox, QSplitter, QTableView, QTabWidget, QVBoxLayout, QWidget,
)

from app.gui.memory_data import predicted_vs_actual
from app.gui.memory_view import LayoutView
from app.gui.models import ComparisonTableModel, DeviceTableModel
from app.gui.state import ServiceState

KV_TYPES = ("f16", "q8_0", "q4_0")


def _table(model) -> QTableView:
    t = QTableView()
    t.setModel(model)
    t.verticalHeader().setVisible(False)
    t.horizontalHeader().setSectionResizeMode(QHeaderView.Stretch)
    t.setSelectionMode(QTableView.NoSelection)
    t.setMaximumHeight(120)
    return t


class LiveTab(QWidget):
    def __init__(self, state: ServiceState, parent=None):
        super().__init__(parent)
        self.state = state
        self.model_combo = QComboBox()
        self.model_combo.setMinimumWidth(220)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setFormat("Loading %p%")
        self.progress.setVisible(False)
        self.status = QLabel("No model loaded.")
        self.view = LayoutView()
        self.devices = DeviceTableModel(self)
        self.comparison = ComparisonTableModel(self)
        top = QHBoxLayout()
        top.addWidget(QLabel("Loaded model:"))
        top.addWidget(self.model_combo)
        top.addWidget(self.progress, 1)
        top.addWidget(self.status, 1)
        tables = QHBoxLayout()
        dev_box = QGroupBox("Devices")
        QVBoxLayout(dev_box).addWidget(_table(self.devices))
        cmp_box = QGroupBox("Predicted vs actual (after load)")
        QVBoxLayout(cmp_box).addWidget(_table(self.comparison))
        tables.addWidget(dev_box)
        tables.addWidget(cmp_box)
        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addWidget(self.view, 1)
        lay.addLayout(tables)
        self.model_combo.currentIndexChanged.connect(lambda _i: self.render())
        state.models_changed.connect(self.on_models)
        state.devices_changed.connect(self.render)
        state.load_progress.connect(self.on_progress)
        state.load_finished.connect(lambda *_: self.progress.setVisible(False))
        state.load_failed.connect(self.on_failed)
        self.on_models()

    def on_models(self) -> None:
        names = [m.get("name") or m.get("model") for m in self.state.ps]
        current = self.model_combo.currentText()
        if names != [self.model_combo.itemText(i) for i in range(self.model_combo.count())]:
            self.model_combo.blockSignals(True)
            self.model_combo.clear()
            self.model_combo.addItems(names)
            if current in names:
                self.model_combo.setCurrentText(current)
            self.model_combo.blockSignals(False)
        loading = {n: p for n, p in self.state.progress.items()}
        if loading:
            name, p = next(iter(loading.items()))
            self.on_progress(name, p)
        else:
            self.progress.setVisible(False)
        self.render()

    def on_progress(self, model: str, progress: float) -> None:
        self.progress.setVisible(True)
        self.progress.setValue(int(round(100 * progress)))
        self.progress.setFormat(f"Loading {model}: %p%")

    def on_failed(self, model: str, error: str) -> None:
        self.progress.setVisible(False)
        self.status.setText(f"Loading {model} failed: {error}")

    def render(self) -> None:
        self.devices.set_inventory(self.state.inventory)
        name = self.model_combo.currentText()
        entry = self.state.running(name) if name else None
        st = (entry or {}).get("strata") or {}
        layout = st.get("layout")
        self.view.show_layout(self.state.inventory, layout, resident=st.get("state") == "loaded")
        self.comparison.set_rows(predicted_vs_actual(st.get("predicted"), st.get("actual"), layout,
                                                     st.get("predicted_kinds")) if layout else [])
        if entry is None:
            self.status.setText("No model loaded." if not self.state.ps else "")
        elif st.get("error"):
            self.status.setText(f"{name}: {st['error']}")
        else:
            busy, total = st.get("slots_busy"), st.get("slots_total")
            self.status.setText(f"{name}: {st.get('state', 'loaded')}"
                                + (f", {busy}/{total} slots busy" if total else ""))


class WhatIfTab(QWidget):
    """Plan a load without doing it. A plan that does not fit shows a plain warning and the planner's
    suggestions (smaller context, quantized KV cache...)."""

    def __init__(self, state: ServiceState, parent=None):
        super().__init__(parent)
        self.state = state
        self.model_combo = QComboBox()
        self.num_ctx = QSpinBox()
        self.num_ctx.setRange(256, 1 << 20)
        self.num_ctx.setSingleStep(1024)
        self.num_ctx.setValue(4096)
        self.num_parallel = QSpinBox()
        self.num_parallel.setRange(1, 64)
        self.num_parallel.setValue(4)
        self.kv_type = QComboBox()
        self.kv_type.addItems(KV_TYPES)
        self.devices_json = QPlainTextEdit()
        self.devices_json.setPlaceholderText(
            'Optional simulated devices (same JSON as STRATA_DEVICES), e.g.\n'
            '{"devices": [{"id": "CUDA0", "name": "RTX 3060", "kind": "gpu", "backend": "SIM",\n'
            '  "total": 6442450944, "free": 6000000000}], "host_ram_total": 17179869184,\n'
            ' "host_ram_available": 12884901888, "cpu_cores": 8}')
        self.devices_json.setMaximumHeight(110)
        self.plan_button = QPushButton("Plan")
        self.plan_button.setDefault(True)
        self.warning = QLabel()
        self.warning.setObjectName("warning")
        self.warning.setWordWrap(True)
        self.warning.setVisible(False)
        self.view = LayoutView()
        form = QFormLayout()
        form.addRow("Model", self.model_combo)
        form.addRow("Context length (per sequence)", self.num_ctx)
        form.addRow("Parallel sequences", self.num_parallel)
        form.addRow("KV cache type", self.kv_type)
        form.addRow("Simulated devices", self.devices_json)
        form.addRow("", self.plan_button)
        box = QGroupBox("What if I load…")
        box_lay = QVBoxLayout(box)
        box_lay.addLayout(form)
        box_lay.addStretch(1)
        lay = QVBoxLayout(self)
        split = QSplitter(Qt.Horizontal)
        split.addWidget(box)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.addWidget(self.warning)
        rl.addWidget(self.view, 1)
        split.addWidget(right)
        split.setStretchFactor(1, 1)
        split.setSizes([380, 720])
        lay.addWidget(split)
        self.plan_button.clicked.connect(self.plan)
        state.models_changed.connect(self.on_models)
        self.on_models()
        self.last_result: dict | None = None
        self._call = None

    def on_models(self) -> None:
        names = self.state.installed_names()
        if names != [self.model_combo.itemText(i) for i in range(self.model_combo.count())]:
            current = self.model_combo.currentText()
            self.model_combo.clear()
            self.model_combo.addItems(names)
            if current in names:
                self.model_combo.setCurrentText(current)

    def request_body(self) -> tuple[str, dict, dict | None]:
        """(model, options, devices) from the form; raises ValueError for bad devices JSON."""
        options = {"num_ctx": self.num_ctx.value(), "num_parallel": self.num_parallel.value(),
                   "kv_type": self.kv_type.currentText()}
        text = self.devices_json.toPlainText().strip()
        devices = None
        if text:
            try:
                devices = json.loads(text)
            except ValueError as e:
                raise ValueError(f"Simulated devices are not valid JSON: {e}") from None
            if not isinstance(devices, dict):
                raise ValueError("Simulated devices must be a JSON object like a STRATA_DEVICES file")
        return self.model_combo.currentText(), options, devices

    def plan(self) -> None:
        try:
            model, options, devices = self.request_body()
        except ValueError as e:
            self.show_warning(str(e))
            return
        if not model:
            self.show_warning("No model installed to plan for.")
            return
        self.plan_button.setEnabled(False)
        self.warning.setVisible(False)
        self._call = self.state.bridge.call(lambda c: c.layout(model, options, devices))
        self._call.finished.connect(self.on_result)
        self._call.failed.connect(self.on_error)

    def on_result(self, result: dict) -> None:
        self.plan_button.setEnabled(True)
        self.last_result = result
        layout = result.get("layout")
        self.view.show_layout(result.get("inventory") or self.state.inventory, layout, resident=False)
        planned = ((layout or {}).get("options") or {}).get("num_ctx")
        if planned and planned < self.num_ctx.value():
            # the service clamps num_ctx to the model's training context (as Ollama does): say so, or the
            # summary's smaller figure looks like a mistake
            self.view.summary.setText(self.view.summary.text() + f" Context clamped from {self.num_ctx.value()} "
                                      f"to {planned} per sequence: the model was trained for {planned}.")
        if result.get("fits", (layout or {}).get("fits", True)):
            self.warning.setVisible(False)
        else:
            tips = result.get("suggestions") or (layout or {}).get("suggestions") or []
            text = "This will not fit in the memory available."
            if tips:
                text += " What would:\n" + "\n".join(f"• {t}" for t in tips)
            self.show_warning(text)

    def on_error(self, msg: str) -> None:
        self.plan_button.setEnabled(True)
        self.show_warning(f"Could not plan: {msg}")

    def show_warning(self, text: str) -> None:
        self.warning.setText(text)
        self.warning.setVisible(True)


class MemoryWindow(QMainWindow):
    def __init__(self, state: ServiceState, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Strata — Memory")
        self.resize(980, 680)
        self.tabs = QTabWidget()
        self.live = LiveTab(state)
        self.whatif = WhatIfTab(state)
        self.tabs.addTab(self.live, "Live")
        self.tabs.addTab(self.whatif, "What-if")
        self.setCentralWidget(self.tabs)

"""The memory window: live view of where loaded models sit (with predicted vs actual after a load and a load
progress bar) and the what-if planner (app/gui/memory/whatif.py) that shows a plan before loading anything."""
from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox, QGroupBox, QHBoxLayout, QHeaderView, QLabel, QMainWindow, QProgressBar, QTableView, QTabWidget,
    QVBoxLayout, QWidget,
)

from app.gui.common.state import ServiceState, cap_text
from app.gui.memory.memory_data import format_bytes, predicted_vs_actual
from app.gui.memory.memory_tables import ComparisonTableModel, DeviceTableModel
from app.gui.memory.memory_view import LayoutView
from app.gui.memory.whatif import WhatIfTab


def prompt_cache_text(cache: dict) -> str:
    """", prompt cache 12.0 MiB of 400.0 MiB (3 prompts)" from /api/ps "strata.prompt_cache"; "" when off;
    then ", checkpoints 5.0 MiB of 64.0 MiB (9)" for a model that takes context checkpoints, and
    ", on disk 380.0 MiB (2 prompts)" when the prompt cache on disk holds files this model can load."""
    if not cache.get("limit"):
        text = ", prompt cache off" if cache else ""
    else:
        text = (f", prompt cache {format_bytes(int(cache.get('bytes') or 0))} of "
                f"{format_bytes(int(cache['limit']))} ({int(cache.get('entries') or 0)} prompts)")
    if cache.get("checkpoint_limit"):
        text += (f", checkpoints {format_bytes(int(cache.get('checkpoint_bytes') or 0))} of "
                 f"{format_bytes(int(cache['checkpoint_limit']))} ({int(cache.get('checkpoints') or 0)})")
    disk = cache.get("disk") or {}
    if disk.get("entries"):
        text += f", on disk {format_bytes(int(disk.get('bytes') or 0))} ({int(disk['entries'])} prompts)"
    return text


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
        cache = st.get("prompt_cache") or {}
        self.view.show_layout(self.state.inventory, layout, resident=st.get("state") == "loaded",
                              prompt_cache=int(cache.get("bytes") or 0))
        self.comparison.set_rows(predicted_vs_actual(st.get("predicted"), st.get("actual"), layout,
                                                     st.get("predicted_kinds")) if layout else [])
        if entry is None:
            self.status.setText("No model loaded." if not self.state.ps else "")
        elif st.get("error"):
            self.status.setText(f"{name}: {st['error']}")
        else:
            busy, total = st.get("slots_busy"), st.get("slots_total")
            self.status.setText(f"{name}: {st.get('state', 'loaded')}" + (", pinned" if st.get("pinned") else "")
                                + (f", {busy}/{total} slots busy" if total else "") + prompt_cache_text(cache)
                                + "\n" + cap_text(self.state.inventory, self.state.ps))


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

    def plan_for(self, model: str) -> None:
        """The what-if tab, planning `model` on this machine (the model manager's "Plan on this machine")."""
        self.tabs.setCurrentWidget(self.whatif)
        self.whatif.plan_for(model)

"""The memory window's What-if tab: plan a load without doing it (`POST /api/layout`).

Devices are picked, not typed: this machine, or a machine you describe (its RAM and cores, common GPUs with
their memory, N of a kind, custom sizes); the STRATA_DEVICES JSON editor stays as an advanced option. A second
plan (B) can be shown side by side with a table of what differs (e.g. q8_0 KV cache vs f16, 1 GPU vs 2).
Covered by tests/gui/test_gui_whatif.py.
"""
from __future__ import annotations

import json

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QGroupBox, QHBoxLayout, QHeaderView, QLabel, QListWidget,
    QPlainTextEdit, QPushButton, QRadioButton, QScrollArea, QSpinBox, QSplitter, QTableWidget, QTableWidgetItem,
    QTabWidget, QVBoxLayout, QWidget,
)

from app.engine.layout.types import KV_TYPES
from app.gui.common.state import ServiceState
from app.gui.memory.memory_view import LayoutView
from app.gui.memory.whatif_data import (
    GPU_PRESETS, GiB, GpuPick, custom_pick, machine_picks, picks_of, plan_differences, simulated_inventory,
)

CUSTOM = "Custom size…"


class DevicePicker(QWidget):
    """This machine, or a described one; `inventory()` is None for this machine, else the simulated JSON."""

    def __init__(self, state: ServiceState, parent=None):
        super().__init__(parent)
        self.state = state
        self.gpus: list[GpuPick] = []
        self.this_machine = QRadioButton("This machine")
        self.this_machine.setObjectName("thisMachine")
        self.described = QRadioButton("A machine I describe:")
        self.described.setObjectName("describedMachine")
        self.this_machine.setChecked(True)
        self.panel = self._build_panel()
        self.advanced = QCheckBox("Edit as JSON (advanced: the STRATA_DEVICES format)")
        self.advanced.setObjectName("advancedJson")
        self.json = QPlainTextEdit()
        self.json.setObjectName("devicesJson")
        self.json.setVisible(False)
        self.json.setMinimumHeight(120)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        for w in (self.this_machine, self.described, self.panel, self.advanced, self.json):
            lay.addWidget(w)
        self.described.toggled.connect(lambda on: self._sync())
        self.advanced.toggled.connect(self._on_advanced)
        self.preset.currentTextChanged.connect(lambda t: self.custom_size.setVisible(t == CUSTOM))
        self.custom_size.setVisible(False)
        self.reset_from_machine()
        self._sync()

    def _build_panel(self) -> QWidget:
        panel = QWidget()
        form = QFormLayout(panel)
        form.setContentsMargins(18, 0, 0, 0)
        self.ram = QDoubleSpinBox(decimals=0, minimum=1, maximum=65536, suffix=" GiB")
        self.ram.setObjectName("ramGiB")
        self.ram_free = QDoubleSpinBox(decimals=0, minimum=0, maximum=65536, suffix=" GiB free")
        self.cores = QSpinBox(minimum=1, maximum=1024)
        ram_row = QHBoxLayout()
        ram_row.addWidget(self.ram)
        ram_row.addWidget(self.ram_free)
        form.addRow("System RAM", ram_row)
        form.addRow("CPU cores", self.cores)
        self.gpu_list = QListWidget()
        self.gpu_list.setObjectName("gpuList")
        self.gpu_list.setMaximumHeight(96)
        form.addRow("GPUs", self.gpu_list)
        self.preset = QComboBox()
        self.preset.setObjectName("gpuPreset")
        self.preset.addItems([p.label for p in GPU_PRESETS] + [CUSTOM])
        self.preset.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.preset.setMinimumContentsLength(16)         # long GPU names elide instead of widening the form
        self.count = QSpinBox(minimum=1, maximum=16, prefix="× ")
        self.count.setObjectName("gpuCount")
        self.custom_size = QDoubleSpinBox(decimals=1, minimum=0.5, maximum=4096, value=16, suffix=" GiB")
        self.custom_size.setObjectName("customSize")
        add = QPushButton("Add")
        add.setObjectName("addGpu")
        add.clicked.connect(lambda: self.add_selected())
        form.addRow("Add", self.preset)
        row = QHBoxLayout()
        for w, stretch in ((self.custom_size, 0), (self.count, 0), (add, 0)):
            row.addWidget(w, stretch)
        row.addStretch(1)
        form.addRow("", row)
        remove = QPushButton("Remove selected")
        remove.setObjectName("removeGpu")
        remove.clicked.connect(lambda: self.remove_selected())
        reset = QPushButton("Start from this machine")
        reset.setObjectName("resetGpus")
        reset.clicked.connect(lambda: self.reset_from_machine())
        row2 = QHBoxLayout()
        row2.addWidget(remove)
        row2.addWidget(reset)
        row2.addStretch(1)
        form.addRow("", row2)
        return panel

    # picks -------------------------------------------------------------------------------------------------
    def add_selected(self) -> None:
        i = self.preset.currentIndex()
        if self.preset.currentText() == CUSTOM:
            self.gpus += [custom_pick(self.custom_size.value()) for _ in range(self.count.value())]
        else:
            self.gpus += picks_of(GPU_PRESETS[i], self.count.value())
        self._refresh_list()

    def remove_selected(self) -> None:
        rows = sorted((i.row() for i in self.gpu_list.selectedIndexes()), reverse=True)
        for r in rows or ([len(self.gpus) - 1] if self.gpus else []):
            del self.gpus[r]
        self._refresh_list()

    def reset_from_machine(self) -> None:
        inv = self.state.inventory or {}
        self.gpus = machine_picks(inv)
        self.ram.setValue(max(1, round(int(inv.get("host_ram_total") or 16 * GiB) / GiB)))
        self.ram_free.setValue(round(int(inv.get("host_ram_available") or 12 * GiB) / GiB))
        self.cores.setValue(int(inv.get("cpu_cores") or 8))
        self._refresh_list()

    def _refresh_list(self) -> None:
        self.gpu_list.clear()
        self.gpu_list.addItems([g.label for g in self.gpus] or [])
        if self.advanced.isChecked():
            self.json.setPlainText(json.dumps(self.simulated(), indent=1))

    def simulated(self) -> dict:
        inv = self.state.inventory or {}
        return simulated_inventory(self.gpus, self.ram.value(), self.cores.value(), self.ram_free.value(),
                                   cpu_features=inv.get("cpu_features"))

    def describe(self) -> str:
        if self.this_machine.isChecked() and not self.advanced.isChecked():
            return "this machine"
        if self.advanced.isChecked():
            return "the JSON machine"
        gpus = ", ".join(g.label for g in self.gpus) or "no GPU"
        return f"{self.ram.value():g} GiB RAM, {gpus}"

    def inventory(self) -> dict | None:
        """None = this machine (the service's own inventory). Raises ValueError for bad JSON."""
        if self.advanced.isChecked():
            text = self.json.toPlainText().strip()
            try:
                devices = json.loads(text)
            except ValueError as e:
                raise ValueError(f"Simulated devices are not valid JSON: {e}") from None
            if not isinstance(devices, dict):
                raise ValueError("Simulated devices must be a JSON object like a STRATA_DEVICES file")
            return devices
        return None if self.this_machine.isChecked() else self.simulated()

    def copy_from(self, other: "DevicePicker") -> None:
        self.gpus = list(other.gpus)
        for mine, theirs in ((self.ram, other.ram), (self.ram_free, other.ram_free), (self.cores, other.cores)):
            mine.setValue(theirs.value())
        (self.described if other.described.isChecked() else self.this_machine).setChecked(True)
        self.advanced.setChecked(other.advanced.isChecked())
        self.json.setPlainText(other.json.toPlainText())
        self._refresh_list()

    def _on_advanced(self, on: bool) -> None:
        if on and not self.json.toPlainText().strip():
            self.json.setPlainText(json.dumps(self.simulated(), indent=1))
        self.json.setVisible(on)
        self._sync()

    def _sync(self) -> None:
        simple = not self.advanced.isChecked()
        self.this_machine.setEnabled(simple)
        self.described.setEnabled(simple)
        self.panel.setEnabled(simple and self.described.isChecked())


class PlanForm(QWidget):
    """One plan's settings: context, parallel sequences, KV cache type, devices."""

    def __init__(self, state: ServiceState, parent=None):
        super().__init__(parent)
        self.num_ctx = QSpinBox(minimum=256, maximum=1 << 20, singleStep=1024, value=4096)
        self.num_ctx.setObjectName("numCtx")
        self.num_parallel = QSpinBox(minimum=1, maximum=64, value=4)
        self.kv_type = QComboBox()
        self.kv_type.setObjectName("kvType")
        self.kv_type.addItems(KV_TYPES)
        self.picker = DevicePicker(state)
        form = QFormLayout(self)
        form.setRowWrapPolicy(QFormLayout.WrapLongRows)
        form.addRow("Context length (per sequence)", self.num_ctx)
        form.addRow("Parallel sequences", self.num_parallel)
        form.addRow("KV cache type", self.kv_type)
        form.addRow("Devices", self.picker)

    def options(self) -> dict:
        return {"num_ctx": self.num_ctx.value(), "num_parallel": self.num_parallel.value(),
                "kv_type": self.kv_type.currentText()}

    def copy_from(self, other: "PlanForm") -> None:
        self.num_ctx.setValue(other.num_ctx.value())
        self.num_parallel.setValue(other.num_parallel.value())
        self.kv_type.setCurrentText(other.kv_type.currentText())
        self.picker.copy_from(other.picker)

    def describe(self) -> str:
        o = self.options()
        return f"{o['num_ctx']} ctx × {o['num_parallel']}, KV {o['kv_type']}, on {self.picker.describe()}"


class PlanResult(QWidget):
    """One plan's picture: a title, a plain warning when it does not fit (with what would), the layout view."""

    def __init__(self, title: str, parent=None):
        super().__init__(parent)
        self.result: dict | None = None
        self.title = QLabel(title)
        self.title.setObjectName("sectionTitle")
        self.title.setWordWrap(True)         # "Plan B: ... on 24 GiB RAM, 2 × RTX 4090" must not widen the window
        self.warning = QLabel()
        self.warning.setObjectName("warning")
        self.warning.setWordWrap(True)
        self.warning.setVisible(False)
        self.view = LayoutView()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.title)
        lay.addWidget(self.warning)
        lay.addWidget(self.view, 1)

    def show_result(self, result: dict, asked_ctx: int, fallback_inventory: dict | None) -> None:
        self.result = result
        layout = result.get("layout")
        self.view.show_layout(result.get("inventory") or fallback_inventory, layout, resident=False)
        planned = ((layout or {}).get("options") or {}).get("num_ctx")
        if planned and planned < asked_ctx:
            # the service clamps num_ctx to the model's training context (as Ollama does): say so, or the
            # summary's smaller figure looks like a mistake
            self.view.summary.setText(self.view.summary.text() + f" Context clamped from {asked_ctx} "
                                      f"to {planned} per sequence: the model was trained for {planned}.")
        if result.get("fits", (layout or {}).get("fits", True)):
            self.warning.setVisible(False)
            return
        tips = result.get("suggestions") or (layout or {}).get("suggestions") or []
        text = "This will not fit in the memory available."
        if tips:
            text += " What would:\n" + "\n".join(f"• {t}" for t in tips)
        self.show_warning(text)

    def show_warning(self, text: str) -> None:
        self.warning.setText(text)
        self.warning.setVisible(True)


class WhatIfTab(QWidget):
    """Plan A (and, to compare, plan B) for one model, side by side. `planned` fires when every plan asked
    for has answered (or failed)."""
    planned = Signal()

    def __init__(self, state: ServiceState, parent=None):
        super().__init__(parent)
        self.state = state
        self._pending: set[str] = set()
        split = QSplitter(Qt.Horizontal)
        split.addWidget(self._build_form())
        split.addWidget(self._build_results())
        split.setStretchFactor(1, 1)
        split.setCollapsible(0, False)
        split.setSizes([420, 760])
        QVBoxLayout(self).addWidget(split)
        state.models_changed.connect(self.on_models)
        state.devices_changed.connect(self._on_devices)
        self.on_models()
        self._on_compare(False)

    def _build_form(self) -> QWidget:
        self.model_combo = QComboBox()
        self.model_combo.setObjectName("whatifModel")
        self.form_a, self.form_b = PlanForm(self.state), PlanForm(self.state)
        self.compare = QCheckBox("Compare with a second plan (B), side by side")
        self.compare.setObjectName("compare")
        self.compare.toggled.connect(self._on_compare)
        copy = QPushButton("Copy plan A here")
        copy.setObjectName("copyAToB")
        copy.clicked.connect(lambda: self.form_b.copy_from(self.form_a))
        b_page = QWidget()
        bl = QVBoxLayout(b_page)
        bl.setContentsMargins(0, 0, 0, 0)
        bl.addWidget(copy, 0, Qt.AlignLeft)
        bl.addWidget(self.form_b)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.form_a, "Plan A")
        self.tabs.addTab(b_page, "Plan B")
        self.plan_button = QPushButton("Plan")
        self.plan_button.setObjectName("planButton")
        self.plan_button.setDefault(True)
        self.plan_button.clicked.connect(lambda: self.plan())
        box = QGroupBox("What if I load…")
        lay = QVBoxLayout(box)
        model_row = QFormLayout()
        model_row.addRow("Model", self.model_combo)
        lay.addLayout(model_row)
        lay.addWidget(self.compare)
        lay.addWidget(self.tabs)
        lay.addWidget(self.plan_button)
        lay.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(box)
        scroll.setMinimumWidth(420)          # the form stays usable; the pictures take the rest
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        return scroll

    def _build_results(self) -> QWidget:
        self.result_a, self.result_b = PlanResult("Plan A"), PlanResult("Plan B")
        views = QSplitter(Qt.Horizontal)
        views.addWidget(self.result_a)
        views.addWidget(self.result_b)
        self.diff = QTableWidget(0, 3)
        self.diff.setObjectName("planDifferences")
        self.diff.setHorizontalHeaderLabels(["", "Plan A", "Plan B"])
        self.diff.verticalHeader().setVisible(False)
        self.diff.verticalHeader().setDefaultSectionSize(22)
        self.diff.horizontalHeader().setSectionResizeMode(QHeaderView.Stretch)
        self.diff.setMaximumHeight(190)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.addWidget(views, 1)
        rl.addWidget(self.diff)
        return right

    # what older callers and tests address: plan A's parts ----------------------------------------------------
    @property
    def warning(self) -> QLabel:
        return self.result_a.warning

    @property
    def view(self) -> LayoutView:
        return self.result_a.view

    @property
    def last_result(self) -> dict | None:
        return self.result_a.result

    @last_result.setter
    def last_result(self, value) -> None:
        self.result_a.result = value

    @property
    def num_ctx(self) -> QSpinBox:
        return self.form_a.num_ctx

    @property
    def num_parallel(self) -> QSpinBox:
        return self.form_a.num_parallel

    @property
    def kv_type(self) -> QComboBox:
        return self.form_a.kv_type

    def show_warning(self, text: str) -> None:
        self.result_a.show_warning(text)

    # state ---------------------------------------------------------------------------------------------------
    def on_models(self) -> None:
        names = self.state.installed_names()
        if names != [self.model_combo.itemText(i) for i in range(self.model_combo.count())]:
            current = self.model_combo.currentText()
            self.model_combo.clear()
            self.model_combo.addItems(names)
            if current in names:
                self.model_combo.setCurrentText(current)

    def _on_devices(self) -> None:
        for form in (self.form_a, self.form_b):     # a picker nobody has touched follows the real machine
            if not form.picker.described.isChecked():
                form.picker.reset_from_machine()

    def _on_compare(self, on: bool) -> None:
        self.tabs.setTabEnabled(1, on)
        self.result_b.setVisible(on)
        self.diff.setVisible(on)
        if on and self.form_b.picker.gpus == [] and not self.form_b.picker.described.isChecked():
            self.form_b.copy_from(self.form_a)
        self.tabs.setCurrentIndex(1 if on else 0)

    # planning ------------------------------------------------------------------------------------------------
    def plan_for(self, model: str) -> None:
        """"Plan on this machine" from the model manager: plan A for `model` on the real inventory."""
        self.on_models()
        self.model_combo.setCurrentText(model)
        self.form_a.picker.advanced.setChecked(False)
        self.form_a.picker.this_machine.setChecked(True)
        self.compare.setChecked(False)
        self.plan()

    def plan(self) -> None:
        model = self.model_combo.currentText()
        plans = {"a": (self.form_a, self.result_a)}
        if self.compare.isChecked():
            plans["b"] = (self.form_b, self.result_b)
        if not model:
            self.result_a.show_warning("No model installed to plan for.")
            return
        bodies = {}
        for key, (form, result) in plans.items():
            try:
                bodies[key] = (form.options(), form.picker.inventory(), form.describe())
            except ValueError as e:
                result.show_warning(str(e))
                return
        self.plan_button.setEnabled(False)
        self._pending = set(bodies)
        for key, (options, devices, what) in bodies.items():
            form, result = plans[key]
            result.warning.setVisible(False)
            result.result = None
            result.title.setText(f"Plan {key.upper()}: {what}")
            call = self.state.bridge.call(lambda c, o=options, d=devices: c.layout(model, o, d))
            call.finished.connect(lambda r, k=key: self._on_result(k, r))
            call.failed.connect(lambda msg, k=key: self._on_error(k, msg))

    def _parts(self, key: str) -> tuple[PlanForm, PlanResult]:
        return (self.form_a, self.result_a) if key == "a" else (self.form_b, self.result_b)

    def _on_result(self, key: str, result: dict) -> None:
        form, view = self._parts(key)
        view.show_result(result, form.num_ctx.value(), self.state.inventory)
        self._settle(key)

    def _on_error(self, key: str, msg: str) -> None:
        self._parts(key)[1].show_warning(f"Could not plan: {msg}")
        self._settle(key)

    def _settle(self, key: str) -> None:
        self._pending.discard(key)
        if self._pending:
            return
        self.plan_button.setEnabled(True)
        if self.compare.isChecked():
            self._show_differences()
        self.planned.emit()

    def _show_differences(self) -> None:
        rows = plan_differences(self.result_a.result, self.result_b.result)
        self.diff.setRowCount(len(rows))
        for i, d in enumerate(rows):
            for j, text in enumerate((d.label, d.a, d.b)):
                item = QTableWidgetItem(text)
                if d.differs and j:
                    f = item.font()
                    f.setBold(True)
                    item.setFont(f)
                self.diff.setItem(i, j, item)

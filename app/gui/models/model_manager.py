"""The model manager window (Models → Manage models, or the tray): every model Strata can run with its size,
quantization, architecture, parameter count, capabilities, source and state, its pin and keep-alive; import (file
dialog or a .gguf dropped on the window), copy, rename, delete, load / unload, pin / unpin, its own keep-alive,
"plan on this machine", and pull from a registry; below the list, Strata's memory cap and what loaded models hold.

Read-only models (the built-in one, and those found in Ollama's, LM Studio's or the Hugging Face cache's
folders) cannot be renamed or removed here: the buttons say why instead. Every question is a window-modal dialog
that does not block (`self.dialog` while it is open), so the window keeps updating meanwhile.
Covered by tests/gui/test_gui_manager.py and tests/gui/test_gui_pull.py.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView, QFileDialog, QHBoxLayout, QHeaderView, QInputDialog, QLabel, QMainWindow, QMessageBox,
    QPushButton, QSplitter, QTableView, QVBoxLayout, QWidget,
)

from app.format import format_bytes
from app.gui.common.state import ServiceState, cap_text
from app.gui.models.model_data import ModelRow, model_rows
from app.gui.models.model_table import ModelTableModel
from app.gui.models.transfers import ImportPanel, PullPanel


def gguf_paths(mime) -> list[str]:
    """Local .gguf files in a drag's data (other files and remote URLs are not importable)."""
    if not mime.hasUrls():
        return []
    return [u.toLocalFile() for u in mime.urls() if u.isLocalFile() and u.toLocalFile().lower().endswith(".gguf")]


class ModelManagerWindow(QMainWindow):
    plan_requested = Signal(str)          # "plan on this machine": the Desktop opens the what-if on that model

    def __init__(self, state: ServiceState, parent=None):
        super().__init__(parent)
        self.state = state
        self.bridge = state.bridge
        self.shown: dict[str, dict] = {}          # /api/show answers, by name (capabilities, parameter count)
        self._showing: set[str] = set()
        self._pending_select = ""                 # a name to select when the list next has it (after a copy)
        self._names_before: set[str] = set()
        self._select_new = False
        self.dialog = None
        self.setWindowTitle("Strata — Models")
        self.resize(1060, 660)
        self.setAcceptDrops(True)
        self._build()
        state.models_changed.connect(self.on_models)
        state.devices_changed.connect(self.on_models)
        self.on_models()

    # construction --------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.table_model = ModelTableModel(self)
        self.table = QTableView()
        self.table.setObjectName("modelTable")
        self.table.setModel(self.table_model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._update_buttons())
        self.table.doubleClicked.connect(lambda _i: self.load_selected())
        self.detail = QLabel()
        self.detail.setObjectName("modelDetail")
        self.detail.setWordWrap(True)
        self.detail.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.import_panel = ImportPanel(self.bridge)
        self.pull_panel = PullPanel(self.bridge)
        for panel in (self.import_panel, self.pull_panel):
            panel.ended.connect(self.state.refresh)
        self.import_panel.imported.connect(lambda m: setattr(self, "_pending_select", m))
        # a pulled model is listed under its reference, spelt the shortest way ("x" -> "x:latest"): select
        # whichever name is new once the list has it
        self.pull_panel.started.connect(lambda _n: setattr(self, "_names_before", set(self.state.installed_names())))
        self.pull_panel.pulled.connect(lambda _n: setattr(self, "_select_new", True))
        top = QWidget()
        tl = QVBoxLayout(top)
        tl.addLayout(self._build_buttons())
        tl.addWidget(self.table, 1)
        tl.addWidget(self.detail)
        self.cap_label = QLabel()               # Strata's memory cap and what the loaded (and pinned) models hold
        self.cap_label.setObjectName("capLabel")
        tl.addWidget(self.cap_label)
        hint = QLabel("Drop a .gguf file on this window to import it.")
        hint.setObjectName("layoutSummary")
        tl.addWidget(hint)
        bottom = QWidget()
        bl = QVBoxLayout(bottom)
        bl.addWidget(self.import_panel)
        bl.addWidget(self.pull_panel)
        bl.addStretch(1)
        split = QSplitter(Qt.Vertical)
        split.addWidget(top)
        split.addWidget(bottom)
        split.setStretchFactor(0, 1)
        self.setCentralWidget(split)

    def _build_buttons(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.buttons: dict[str, QPushButton] = {}
        for key, text, slot in (("import", "Import…", self.import_file), ("copy", "Copy…", self.copy_selected),
                                ("rename", "Rename…", self.rename_selected),
                                ("delete", "Delete…", self.delete_selected), ("load", "Load", self.load_selected),
                                ("unload", "Unload", self.unload_selected),
                                ("pin", "Pin", self.pin_selected), ("keepalive", "Keep-alive…", self.keep_alive_selected),
                                ("plan", "Plan on this machine", self.plan_selected)):
            b = QPushButton(text)
            b.setObjectName(f"{key}Button")
            b.clicked.connect(lambda _checked=False, f=slot: f())
            row.addWidget(b)
            self.buttons[key] = b
        row.addStretch(1)
        return row

    # the list ----------------------------------------------------------------------------------------------------
    def on_models(self) -> None:
        rows = model_rows(self.state.tags, self.state.ps, self.shown, self.state.progress, self.state.pins)
        self.cap_label.setText(cap_text(self.state.inventory, self.state.ps))
        keep = self.selected_name()
        if self._pending_select and any(r.name == self._pending_select for r in rows):
            keep, self._pending_select = self._pending_select, ""
        new = [r.name for r in rows if r.name not in self._names_before]
        if self._select_new and new:
            keep, self._select_new = new[0], False
        self.table_model.set_rows(rows)
        if keep:
            self.select(keep)
        elif rows and not self.table.selectionModel().hasSelection():
            self.table.selectRow(0)
        for r in rows:
            if r.name not in self.shown and r.name not in self._showing:
                self._fetch_show(r.name)
        self._update_buttons()

    def _fetch_show(self, name: str) -> None:
        self._showing.add(name)
        call = self.bridge.call(lambda c: c.show(name))
        call.finished.connect(lambda info: self._on_show(name, info))
        call.failed.connect(lambda _e: self._showing.discard(name))

    def _on_show(self, name: str, info: dict) -> None:
        self._showing.discard(name)
        self.shown[name] = info
        self.on_models()

    def selected(self) -> ModelRow | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows or rows[0].row() >= len(self.table_model.rows):
            return None
        return self.table_model.rows[rows[0].row()]

    def selected_name(self) -> str:
        r = self.selected()
        return r.name if r else ""

    def select(self, name: str) -> None:
        row = self.table_model.row_of(name)
        if row >= 0:
            self.table.selectRow(row)

    def _update_buttons(self) -> None:
        r = self.selected()
        for key in ("copy", "rename", "delete", "load", "unload", "pin", "keepalive", "plan"):
            self.buttons[key].setEnabled(r is not None)
        if r is None:
            self.detail.setText("")
            return
        self.buttons["pin"].setText("Unpin" if r.pinned else "Pin")
        self.buttons["pin"].setToolTip("Let it be unloaded for other models again" if r.pinned else
                                       "Keep it loaded: never unloaded for another model, never expires")
        self.buttons["load"].setEnabled(r.state == "")
        self.buttons["unload"].setEnabled(r.state in ("loaded", "loading", "failed"))
        why = r.why_read_only()
        for key in ("rename", "delete"):
            self.buttons[key].setToolTip(why)
        lines = [f"<b>{r.name}</b> — {format_bytes(r.size)} ({r.size:,} bytes), {r.source_label}",
                 f"File: {r.path}"]
        if r.digest:
            lines.append(f"Digest: sha256:{r.digest}")
        if r.parameter_count:
            lines.append(f"{r.parameter_count:,} parameters")
        if r.sampling:
            lines.append(f"Sampling: {r.sampling}")
        lines.append(("Pinned: stays loaded, never unloaded for another model" if r.pinned else "Not pinned")
                     + f"; keep-alive {r.keep_alive_label}" + (f"; unloads {r.until.lower()}" if r.until else ""))
        if why:
            lines.append(f"<i>Read-only:</i> {why}")
        self.detail.setText("<br>".join(lines))

    # actions -----------------------------------------------------------------------------------------------------
    def import_file(self) -> None:
        dlg = QFileDialog(self, "Import a GGUF model", str(Path.home()), "GGUF models (*.gguf);;All files (*)")
        dlg.setObjectName("importDialog")
        dlg.setFileMode(QFileDialog.ExistingFile)
        dlg.setOption(QFileDialog.DontUseNativeDialog, True)    # the same dialog everywhere (and under test)
        dlg.fileSelected.connect(lambda path: path and self.import_panel.start(path))
        self._open_dialog(dlg)

    def copy_selected(self) -> None:
        r = self.selected()
        if r is not None:
            self._ask_name("copyDialog", "Copy model", f"Copy {r.name} to the name:", _copy_name(r.name),
                           lambda new: self._copy(r.name, new))

    def rename_selected(self) -> None:
        r = self.selected()
        if r is None:
            return
        if r.read_only:
            self._explain("Cannot rename", r.why_read_only())
            return
        self._ask_name("renameDialog", "Rename model", f"New name for {r.name}:", r.name,
                       lambda new: self._rename(r.name, new))

    def delete_selected(self) -> None:
        r = self.selected()
        if r is None:
            return
        if r.read_only:
            self._explain("Cannot delete", r.why_read_only())
            return
        box = QMessageBox(QMessageBox.Warning, "Delete model",
                          f"Delete {r.name}? Its file ({format_bytes(r.size)}) is removed from Strata's store "
                          "unless another name uses it." + (" It is loaded: it will be unloaded first."
                                                             if r.state else ""),
                          QMessageBox.Yes | QMessageBox.No, self)
        box.setObjectName("deleteDialog")
        box.setDefaultButton(QMessageBox.No)
        box.accepted.connect(lambda: self._run(lambda c: c.delete(r.name), f"Deleted {r.name}."))
        self._open_dialog(box)

    def load_selected(self) -> None:
        r = self.selected()
        if r is not None and r.state == "":
            self.state.progress.setdefault(r.name, 0.0)
            self.state.models_changed.emit()
            self._run(lambda c: c.load(r.name), f"{r.name} is loaded.", failed_model=r.name)

    def unload_selected(self) -> None:
        r = self.selected()
        if r is not None and r.state:
            self._run(lambda c: c.unload(r.name), f"{r.name} is unloaded.")

    def pin_selected(self) -> None:
        r = self.selected()
        if r is not None:
            pinned = not r.pinned
            self._run(lambda c: c.pin(r.name, pinned), f"{r.name} is {'pinned' if pinned else 'unpinned'}.")

    def keep_alive_selected(self) -> None:
        """Ask for the model's own keep-alive (5m, 1h, -1 for ever; empty: the server's)."""
        r = self.selected()
        if r is not None:
            self._ask_name("keepAliveDialog", "Keep-alive",
                           f"How long {r.name} stays loaded after its last request when a request does not say "
                           "(5m, 1h, -1 = forever; empty = the server's default):", r.keep_alive,
                           lambda text: self._set_keep_alive(r.name, text), allow_empty=True)

    def _set_keep_alive(self, name: str, text: str) -> None:
        value = text.strip() or None
        self._run(lambda c: c.pin(name, keep_alive=value),
                  f"{name}: keep-alive {value or 'the server default'}.")

    def plan_selected(self) -> None:
        r = self.selected()
        if r is not None:
            self.plan_requested.emit(r.name)

    def show_pull(self, name: str = "") -> None:
        """Bring the pull panel forward (Models → Pull a model…), optionally with a name filled in."""
        if name:
            self.pull_panel.name.setText(name)
        self.pull_panel.name.setFocus()

    def _copy(self, src: str, dst: str) -> None:
        self._run(lambda c: c.copy(src, dst), f"Copied {src} to {dst}.", select=dst)

    def _rename(self, src: str, dst: str) -> None:
        # the API's way (as `ollama cp` + `ollama rm`): the new name first, so a refusal loses nothing
        async def rename(c):
            await c.copy(src, dst)
            await c.delete(src)
        self._run(rename, f"Renamed {src} to {dst}.", select=dst)

    def _run(self, make, done: str, select: str = "", failed_model: str = "") -> None:
        call = self.bridge.call(make)
        call.finished.connect(lambda _r: self._done(done, select))
        call.failed.connect(lambda err: self._failed(err, failed_model))

    def _done(self, message: str, select: str) -> None:
        self.statusBar().showMessage(message, 10000)
        self._pending_select = select or self._pending_select     # selected once the refreshed list has it
        self.state.refresh()

    def _failed(self, err: str, model: str) -> None:
        if model:
            self.state.progress.pop(model, None)
        self.statusBar().showMessage(err, 15000)
        self._explain("Strata", err)
        self.state.refresh()

    # dialogs -----------------------------------------------------------------------------------------------------
    def _ask_name(self, object_name: str, title: str, label: str, value: str, then, allow_empty=False) -> None:
        dlg = QInputDialog(self)
        dlg.setObjectName(object_name)
        dlg.setWindowTitle(title)
        dlg.setLabelText(label)
        dlg.setTextValue(value)
        dlg.textValueSelected.connect(lambda text: (allow_empty or text.strip()) and then(text.strip()))
        self._open_dialog(dlg)

    def _explain(self, title: str, text: str) -> None:
        box = QMessageBox(QMessageBox.Information, title, text, QMessageBox.Ok, self)
        box.setObjectName("explainDialog")
        self._open_dialog(box)

    def _open_dialog(self, dlg) -> None:
        dlg.setAttribute(Qt.WA_DeleteOnClose)
        self.dialog = dlg
        dlg.finished.connect(lambda _r: setattr(self, "dialog", None))
        dlg.open()

    # drag and drop -------------------------------------------------------------------------------------------------
    def dragEnterEvent(self, e) -> None:
        if gguf_paths(e.mimeData()):
            e.acceptProposedAction()
        else:
            e.ignore()

    def dragMoveEvent(self, e) -> None:
        self.dragEnterEvent(e)

    def dropEvent(self, e) -> None:
        paths = gguf_paths(e.mimeData())
        if not paths:
            self.statusBar().showMessage("Only .gguf files can be imported.", 8000)
            e.ignore()
            return
        e.acceptProposedAction()
        for p in paths:
            self.import_panel.start(p)


def _copy_name(name: str) -> str:
    """`llama3.2:3b` -> `llama3.2-copy:3b`; the tag is after the last ':' (a host may have a port)."""
    model, colon, tag = name.rpartition(":")
    if not colon or "/" in tag:
        model, tag = name, "latest"
    return f"{model}-copy:{tag}"

"""Tray menu: loaded models (unload), installed models (load), copy server address, open chat, open memory
view, quit; notifications when a load finishes or fails.

Where the desktop has no tray (`QSystemTrayIcon.isSystemTrayAvailable()` is false, e.g. bare Xvfb or GNOME
without the extension), the chat window carries the same menu ("Models") and notifications go to its status bar.
"""
from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QIcon
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from app.gui.memory_data import format_bytes
from app.gui.state import ServiceState


class TrayController(QObject):
    open_chat_requested = Signal()
    open_memory_requested = Signal()
    quit_requested = Signal()
    notified = Signal(str, str)          # title, message (also what tests watch)
    action_failed = Signal(str)

    def __init__(self, state: ServiceState, icon: QIcon, fallback_window=None, use_tray: bool | None = None,
                 parent=None):
        super().__init__(parent)
        self.state = state
        self.bridge = state.bridge
        self.fallback_window = fallback_window
        self.use_tray = QSystemTrayIcon.isSystemTrayAvailable() if use_tray is None else use_tray
        self.menu = QMenu("&Models")
        self.menu.setObjectName("trayMenu")
        self.menu.aboutToShow.connect(self.populate)
        self.tray: QSystemTrayIcon | None = None
        if self.use_tray:
            self.tray = QSystemTrayIcon(icon, self)
            self.tray.setToolTip(f"Strata — {self.bridge.base_url}")
            self.tray.setContextMenu(self.menu)
            self.tray.activated.connect(self._on_activated)
            self.tray.show()
        elif fallback_window is not None:
            fallback_window.menuBar().addMenu(self.menu)
        state.models_changed.connect(self.populate)
        state.load_finished.connect(lambda m, _d: self.notify("Model loaded", f"{m} is ready"))
        state.load_failed.connect(self._on_load_failed)
        self._failed_models: set[str] = set()    # load_failed events seen: the HTTP error need not notify again
        self.populate()

    def _on_activated(self, reason) -> None:
        if reason == QSystemTrayIcon.Trigger:
            self.open_chat_requested.emit()

    # the menu --------------------------------------------------------------------------------------------------
    def populate(self) -> None:
        m = self.menu
        m.clear()
        loaded = [x for x in self.state.ps]
        m.addSection("Loaded models")
        if not loaded:
            a = m.addAction("(none loaded)")
            a.setEnabled(False)
        for entry in loaded:
            name = entry.get("name") or entry.get("model")
            st = (entry.get("strata") or {}).get("state", "loaded")
            label = f"Unload {name} ({format_bytes(entry.get('size') or 0)}"
            label += ", loading)" if st == "loading" else ")"
            a = m.addAction(label)
            a.setObjectName(f"unload:{name}")
            a.setData(("unload", name))
            a.triggered.connect(lambda _=False, n=name: self.unload(n))
        load_menu = m.addMenu("Load model")
        load_menu.setObjectName("loadMenu")
        names = self.state.installed_names()
        if not names:
            a = load_menu.addAction("(no models installed)")
            a.setEnabled(False)
        loaded_names = {e.get("name") or e.get("model") for e in loaded}
        for name in names:
            a = load_menu.addAction(name)
            a.setObjectName(f"load:{name}")
            a.setData(("load", name))
            a.setEnabled(name not in loaded_names and name not in self.state.progress)
            a.triggered.connect(lambda _=False, n=name: self.load(n))
        m.addSeparator()
        a = m.addAction(f"Copy server address ({self.bridge.base_url})")
        a.setObjectName("copyAddress")
        a.triggered.connect(self.copy_address)
        a = m.addAction("Open chat")
        a.setObjectName("openChat")
        a.triggered.connect(self.open_chat_requested.emit)
        a = m.addAction("Open memory view")
        a.setObjectName("openMemory")
        a.triggered.connect(self.open_memory_requested.emit)
        m.addSeparator()
        a = m.addAction("Quit Strata")
        a.setObjectName("quit")
        a.triggered.connect(self.quit_requested.emit)

    def find_action(self, object_name: str):
        """The menu action with that object name (searching the Load submenu too); tests use it."""
        for a in self.menu.actions():
            if a.objectName() == object_name:
                return a
            if a.menu():
                for b in a.menu().actions():
                    if b.objectName() == object_name:
                        return b
        return None

    # actions ---------------------------------------------------------------------------------------------------
    def load(self, name: str) -> None:
        self.state.progress.setdefault(name, 0.0)
        self.state.models_changed.emit()
        call = self.bridge.call(lambda c: c.load(name))
        call.finished.connect(lambda _r: self.state.refresh())
        call.failed.connect(lambda err: self._failed(f"Could not load {name}", err, name))

    def unload(self, name: str) -> None:
        call = self.bridge.call(lambda c: c.unload(name))
        call.finished.connect(lambda _r: self.state.refresh())
        call.failed.connect(lambda err: self._failed(f"Could not unload {name}", err, name))

    def _on_load_failed(self, model: str, err: str) -> None:
        self._failed_models.add(model)
        self.notify("Load failed", f"{model}: {err}", error=True)

    def _failed(self, title: str, err: str, name: str) -> None:
        self.state.progress.pop(name, None)
        self.state.refresh()
        self.action_failed.emit(f"{title}: {err}")

        def later():   # the service's load_failed event may come just after the HTTP error: one notice only
            if name in self._failed_models:
                self._failed_models.discard(name)
            else:
                self.notify(title, err, error=True)
        QTimer.singleShot(1000, later)

    def copy_address(self) -> None:
        QGuiApplication.clipboard().setText(self.bridge.base_url)
        self.notify("Server address copied", self.bridge.base_url)

    def notify(self, title: str, message: str, error: bool = False) -> None:
        self.notified.emit(title, message)
        if self.tray is not None:
            icon = QSystemTrayIcon.Critical if error else QSystemTrayIcon.Information
            self.tray.showMessage(title, message, icon, 5000)
        elif self.fallback_window is not None:
            self.fallback_window.statusBar().showMessage(f"{title}: {message}", 8000)

    def hide(self) -> None:
        if self.tray is not None:
            self.tray.hide()

"""Tray menu: manage models, pull, loaded models (unload), installed models (load), copy server address, open
chat, open memory view, open server requests, settings, quit; notifications when a load finishes or fails.

The chat window's Models menu shows the same model entries (after its own Manage models / Pull actions, which
carry the shortcuts). Where the desktop has no tray (`QSystemTrayIcon.isSystemTrayAvailable()` is false, e.g.
bare Xvfb or GNOME without the extension), that menu is the way in and notifications go to the status bar.
Covered by tests/gui/test_gui_actions.py (the tray's items).
"""
from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QIcon
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from app.format import format_bytes
from app.gui.common.state import ServiceState


class TrayController(QObject):
    open_chat_requested = Signal()
    open_memory_requested = Signal()
    open_server_requested = Signal()
    open_models_requested = Signal(str)    # "" | "pull"
    open_settings_requested = Signal()
    quit_requested = Signal()
    notified = Signal(str, str)          # title, message (also what tests watch)
    action_failed = Signal(str)

    def __init__(self, state: ServiceState, icon: QIcon, window=None, use_tray: bool | None = None, parent=None):
        """`window`: the chat window; its `models_menu` gets the model entries after its `models_menu_head`."""
        super().__init__(parent)
        self.state = state
        self.bridge = state.bridge
        self.window = window
        self.use_tray = QSystemTrayIcon.isSystemTrayAvailable() if use_tray is None else use_tray
        self.tray: QSystemTrayIcon | None = None
        self.tray_menu: QMenu | None = None
        self.window_menu: QMenu | None = getattr(window, "models_menu", None)
        if self.use_tray:
            self.tray_menu = QMenu("Strata")
            self.tray_menu.setObjectName("trayMenu")
            self.tray_menu.aboutToShow.connect(lambda: self.populate_tray(self.tray_menu))
            self.tray = QSystemTrayIcon(icon, self)
            self.tray.setToolTip(f"Strata — {self.bridge.base_url}")
            self.tray.setContextMenu(self.tray_menu)
            self.tray.activated.connect(self._on_activated)
            self.tray.show()
        if self.window_menu is not None:
            self.window_menu.aboutToShow.connect(self.populate_window)
        # what tests and "find_action" look at: the tray's menu when there is a tray, else the window's
        self.menu = self.tray_menu if self.tray_menu is not None else self.window_menu
        state.models_changed.connect(self.populate)
        state.load_finished.connect(lambda m, _d: self.notify("Model loaded", f"{m} is ready"))
        state.load_failed.connect(self._on_load_failed)
        self._failed_models: set[str] = set()    # load_failed events seen: the HTTP error need not notify again
        self.populate()

    def _on_activated(self, reason) -> None:
        if reason == QSystemTrayIcon.Trigger:
            self.open_chat_requested.emit()

    # the menus -------------------------------------------------------------------------------------------------
    def populate(self) -> None:
        if self.tray_menu is not None:
            self.populate_tray(self.tray_menu)
        if self.window_menu is not None:
            self.populate_window()

    def populate_window(self) -> None:
        m = self.window_menu
        m.clear()                 # the window's own actions survive: the window owns them, not the menu
        for a in getattr(self.window, "models_menu_head", ()):
            m.addAction(a)
        self._add_model_entries(m)

    def populate_tray(self, m: QMenu) -> None:
        m.clear()
        self._add(m, "Manage models…", "manageModels", lambda: self.open_models_requested.emit(""))
        self._add(m, "Pull a model…", "pullModel", lambda: self.open_models_requested.emit("pull"))
        self._add_model_entries(m)
        self._add(m, "Open chat", "openChat", self.open_chat_requested.emit)
        self._add(m, "Open memory view", "openMemory", self.open_memory_requested.emit)
        self._add(m, "Open server requests", "openServer", self.open_server_requested.emit)
        self._add(m, "Settings…", "openSettings", self.open_settings_requested.emit)
        m.addSeparator()
        self._add(m, "Quit Strata", "quitApp", self.quit_requested.emit)

    @staticmethod
    def _add(menu: QMenu, text: str, name: str, slot):
        a = menu.addAction(text)
        a.setObjectName(name)
        a.triggered.connect(lambda _checked=False: slot())     # triggered passes `checked`: not for our slots
        return a

    def _add_model_entries(self, m: QMenu) -> None:
        """Loaded models (click: unload), Load model ▸ installed ones, the server address."""
        loaded = list(self.state.ps)
        m.addSection("Loaded models")
        if not loaded:
            m.addAction("(none loaded)").setEnabled(False)
        for entry in loaded:
            name = entry.get("name") or entry.get("model")
            st = (entry.get("strata") or {}).get("state", "loaded")
            label = f"Unload {name} ({format_bytes(entry.get('size') or 0)}"
            label += ", loading)" if st == "loading" else ")"
            self._add(m, label, f"unload:{name}", lambda n=name: self.unload(n)).setData(("unload", name))
        load_menu = m.addMenu("Load model")
        load_menu.setObjectName("loadMenu")
        load_menu.menuAction().setObjectName("loadMenu")
        names = self.state.installed_names()
        if not names:
            load_menu.addAction("(no models installed)").setEnabled(False)
        loaded_names = {e.get("name") or e.get("model") for e in loaded}
        for name in names:
            a = self._add(load_menu, name, f"load:{name}", lambda n=name: self.load(n))
            a.setData(("load", name))
            a.setEnabled(name not in loaded_names and name not in self.state.progress)
        m.addSeparator()
        self._add(m, f"Copy server address ({self.bridge.base_url})", "copyAddress", self.copy_address)

    def find_action(self, object_name: str, menu: QMenu | None = None):
        """The action with that object name in `menu` (default: the tray's, else the window's Models menu),
        searching the Load submenu too; tests use it."""
        for a in (menu or self.menu).actions():
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
        elif self.window is not None:
            self.window.statusBar().showMessage(f"{title}: {message}", 8000)

    def hide(self) -> None:
        if self.tray is not None:
            self.tray.hide()

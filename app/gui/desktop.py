"""The desktop app: one object that owns the API bridge, the service state, chat history and the windows.

The service itself runs in the same process on its own asyncio thread (`ServiceThread`), started by `run_gui`;
the windows only ever talk to it over HTTP, so `strata gui --url` can just as well attach to a running server.
"""
from __future__ import annotations

import os
import sys

from PySide6.QtCore import QObject, QRectF, Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPainter, QPixmap
from PySide6.QtWidgets import QApplication

from app.gui.chat.chat_window import ChatWindow
from app.gui.chat.history import ChatHistory
from app.gui.common.app_actions import AppActions
from app.gui.common.bridge import ServiceBridge
from app.gui.common.state import ServiceState
from app.gui.common.theme import RESOURCES, apply_theme, style_sheet, system_is_dark
from app.gui.memory.memory_window import MemoryWindow
from app.gui.models.agent_launch import AgentLaunchDialog
from app.gui.models.model_manager import ModelManagerWindow
from app.gui.server.server_window import ServerWindow
from app.gui.settings_dialog import RESTART_NOTE, SettingsDialog
from app.gui.tray import TrayController



def app_icon() -> QIcon:
    # Every rendered size (resources/icons/hicolor/NxN/apps/strata.png) so trays and title bars pick a sharp one.
    icon = QIcon()
    for f in sorted((RESOURCES / "icons" / "hicolor").glob("*/apps/strata.png")):
        icon.addFile(str(f))
    if not icon.isNull():
        return icon
    svg = RESOURCES / "strata.svg"
    if svg.is_file():
        icon = QIcon(str(svg))
        if not icon.isNull():
            return icon
    # Installed without the resources folder: paint the same stacked-layers mark.
    pm = QPixmap(64, 64)
    pm.fill(Qt.transparent)
    p = QPainter(pm)
    p.setRenderHint(QPainter.Antialiasing)
    p.setBrush(QColor("#1f2d3d"))
    p.setPen(Qt.NoPen)
    p.drawRoundedRect(QRectF(2, 2, 60, 60), 12, 12)
    for y, color in ((14, "#4c78a8"), (25, "#54a24b"), (36, "#72b7b2")):
        p.setBrush(QColor(color))
        p.drawRoundedRect(QRectF(12, y, 40, 8), 3, 3)
    p.end()
    return QIcon(pm)


class Desktop(QObject):
    """Everything the GUI process shows. `service` (a ServiceThread) is stopped on quit when given.
    Windows other than the chat are made on first use and kept (reopening shows the same one)."""

    def __init__(self, base_url: str, api_key: str | None = None, service=None, use_tray: bool | None = None,
                 history_path=None, poll_ms: int = 5000):
        super().__init__()
        self.service = service
        self.bridge = ServiceBridge(base_url, api_key)
        self.state = ServiceState(self.bridge, poll_ms=poll_ms)
        self.history = ChatHistory(history_path)
        self.icon = app_icon()
        app = QApplication.instance()
        app.setWindowIcon(self.icon)
        # our light or dark style, following the system while the app runs (unless a style sheet was given)
        self._own_style = app.styleSheet() in ("", style_sheet(False), style_sheet(True))
        self.dark = system_is_dark()
        if self._own_style:
            apply_theme(app, self.dark)
        # one set of application actions, in every window's menus (app_actions.py)
        self.actions = AppActions(self)
        self.chat = ChatWindow(self.state, self.history, self.actions)
        self.memory: MemoryWindow | None = None
        self.server: ServerWindow | None = None
        self.models: ModelManagerWindow | None = None
        self.settings: SettingsDialog | None = None
        self.agents: AgentLaunchDialog | None = None
        self.tray = TrayController(self.state, self.icon, window=self.chat, use_tray=use_tray)
        for source in (self.actions, self.tray):
            source.open_chat_requested.connect(self.open_chat)
            source.open_memory_requested.connect(self.open_memory)
            source.open_server_requested.connect(self.open_server)
            source.open_models_requested.connect(self.open_models)
            source.open_settings_requested.connect(self.open_settings)
            source.quit_requested.connect(self.quit)
        self.actions.new_chat_requested.connect(self.new_chat)
        self.actions.open_agents_requested.connect(self.open_agents)
        QGuiApplication.styleHints().colorSchemeChanged.connect(lambda _s: self.follow_system_theme())
        self.state.start()
        self._shut = False

    def follow_system_theme(self, dark: bool | None = None) -> None:
        """The system switched light/dark (or `dark` says which): restyle, and redraw the chat's code blocks."""
        dark = system_is_dark() if dark is None else dark
        if dark == self.dark:
            return
        self.dark = dark
        if self._own_style:
            apply_theme(QApplication.instance(), dark)
        self.chat.restyle()

    def open_chat(self) -> ChatWindow:
        return _raise(self.chat)

    def new_chat(self) -> ChatWindow:
        """Ctrl+N from any window: the chat window comes up with a new chat, the cursor in its message box."""
        _raise(self.chat)
        self.chat.new_chat()
        return self.chat

    def open_memory(self) -> MemoryWindow:
        if self.memory is None:
            self.memory = MemoryWindow(self.state)
            self.actions.install(self.memory)
        return _raise(self.memory)

    def open_server(self) -> ServerWindow:
        """Every API request live, and the service's load: it listens to the service only while it is open."""
        if self.server is None:
            self.server = ServerWindow(self.state)
            self.actions.install(self.server)
        return _raise(self.server)

    def open_models(self, focus: str = "") -> ModelManagerWindow:
        """The model manager; `focus` "pull" puts the cursor in the pull panel's name field, "import" opens the
        file dialog."""
        if self.models is None:
            self.models = ModelManagerWindow(self.state)
            self.actions.install(self.models)
            self.models.plan_requested.connect(self.plan_model)
        _raise(self.models)
        if focus == "pull":
            self.models.show_pull()
        elif focus == "import":
            self.models.import_file()
        return self.models

    def open_settings(self) -> SettingsDialog:
        if self.settings is None:
            self.settings = SettingsDialog(self.chat)
            self.actions.install(self.settings)
            self.settings.saved.connect(lambda _p: self.chat.statusBar().showMessage(RESTART_NOTE, 15000))
            self.settings.saved.connect(lambda _p: self.chat.session.tools.clear())      # MCP servers: list them again
        self.settings.reload()
        return _raise(self.settings)

    def open_agents(self) -> AgentLaunchDialog:
        if self.agents is None:
            self.agents = AgentLaunchDialog(self.state, self.chat)
            self.actions.install(self.agents)
            self.agents.launched.connect(lambda _agent, client: self.show_requests_of(client))
        self.agents.reload()
        return _raise(self.agents)

    def show_requests_of(self, client: str) -> ServerWindow:
        """The Server window searched to one client's requests (an agent just started from the launch dialog)."""
        w = self.open_server()
        w.filter_client.setText(client)
        return w

    def plan_model(self, model: str) -> MemoryWindow:
        mem = self.open_memory()
        mem.plan_for(model)
        return mem

    def quit(self) -> None:
        self.shutdown()
        QApplication.instance().quit()

    def shutdown(self) -> None:
        """Cancel requests, close windows, stop the hosted service. Idempotent."""
        if self._shut:
            return
        self._shut = True
        self.chat.session.abandon_reply()
        self.tray.hide()
        self.bridge.close()
        for w in (self.chat, self.memory, self.server, self.models, self.settings, self.agents):
            if w is not None:
                w.close()
        self.history.close()
        if self.service is not None:
            self.service.stop()


def _raise(window):
    window.show()
    window.raise_()
    window.activateWindow()
    return window


def has_display() -> bool:
    """False on a Linux box with no X/Wayland display and no explicit Qt platform (then we run headless)."""
    if os.environ.get("QT_QPA_PLATFORM"):
        return True
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True

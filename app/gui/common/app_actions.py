"""The application's actions (new chat, open a window, settings, quit) as ONE set of QActions shared by every
window: each window gets the same File and Models menus, so Ctrl+Q, Ctrl+N, Ctrl+M... work from whichever window
is active, and every secondary window closes with Ctrl+W (dialogs with Esc too, as QDialog does).

A QAction with the default window context fires when any widget it is added to sits in the active window
(Qt checks every associated widget, a menu through its menu-bar entry), so one action serves all the windows and
one key is never bound twice. Shortcuts are spelled out: QKeySequence.Quit is empty where the platform theme has
no binding for it (bare X, offscreen). "Ctrl" is Cmd on macOS, where Quit and Settings also move to the
application menu (their menu roles).
Covered by tests/gui/test_gui_actions.py (every menu action and shortcut).
"""
from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu, QWidget


def shortcut_text(action: QAction) -> str:
    """"Ctrl+N" as this platform writes it ("⌘N" on macOS); "" when the action has none."""
    return action.shortcut().toString(QKeySequence.NativeText)


def tip(text: str, action_or_keys) -> str:
    """A tooltip that names the shortcut: "Start a new chat (Ctrl+N)"."""
    keys = shortcut_text(action_or_keys) if isinstance(action_or_keys, QAction) else str(action_or_keys or "")
    return f"{text} ({keys})" if keys else text


def make_action(parent: QObject, text: str, name: str, shortcut: str | None, slot, help_text: str = "") -> QAction:
    """A QAction whose tooltip names its shortcut; `slot` is called with no argument (triggered's `checked` is
    dropped)."""
    a = QAction(text, parent)
    a.setObjectName(name)
    if shortcut:
        a.setShortcut(QKeySequence(shortcut))
    a.setToolTip(tip(help_text or text.replace("&", "").rstrip("…"), a))
    a.triggered.connect(lambda _checked=False: slot())
    return a


class AppActions(QObject):
    """What the Desktop answers; windows only show these actions."""
    new_chat_requested = Signal()
    open_chat_requested = Signal()
    open_memory_requested = Signal()
    open_server_requested = Signal()
    open_models_requested = Signal(str)      # "" | "import" | "pull": what the manager should offer first
    open_settings_requested = Signal()
    open_agents_requested = Signal()          # Models → Launch a coding agent…
    quit_requested = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.new_chat = make_action(self, "&New chat", "newChat", "Ctrl+N", self.new_chat_requested.emit,
                                    "Start a new chat")
        self.chat = make_action(self, "&Chat window", "openChat", "Ctrl+0", self.open_chat_requested.emit,
                                "Show the chat window")
        self.memory = make_action(self, "&Memory view", "memoryView", "Ctrl+M", self.open_memory_requested.emit,
                                  "Show where loaded models sit in memory")
        self.server = make_action(self, "Se&rver requests", "serverView", "Ctrl+Shift+S",
                                  self.open_server_requested.emit,
                                  "Show every API request to the service, and its load over the last minutes")
        self.settings = make_action(self, "&Settings…", "settings", "Ctrl+,", self.open_settings_requested.emit)
        self.settings.setMenuRole(QAction.PreferencesRole)
        self.quit = make_action(self, "&Quit", "quit", "Ctrl+Q", self.quit_requested.emit, "Quit Strata")
        self.quit.setMenuRole(QAction.QuitRole)
        self.models = make_action(self, "&Manage models…", "manageModels", "Ctrl+Shift+M",
                                  lambda: self.open_models_requested.emit(""))
        self.pull = make_action(self, "&Pull a model…", "pullModel", None,
                                lambda: self.open_models_requested.emit("pull"))
        self.launch_agent = make_action(self, "&Launch a coding agent…", "launchAgent", None,
                                        self.open_agents_requested.emit,
                                        "The command that starts Claude Code, Codex or OpenCode on a model here")
        self.models_head = [self.models, self.pull, self.launch_agent]

    def all(self) -> list[QAction]:
        return [self.new_chat, self.chat, self.memory, self.server, self.settings, self.quit, self.models, self.pull,
                self.launch_agent]

    def install(self, window: QWidget, closable: bool = True) -> dict[str, QMenu]:
        """Give `window` these actions: a File and a Models menu on a main window, the bare actions (keys only)
        on a dialog. `closable` adds "Close window" (Ctrl+W) for this window alone. Returns the menus by name."""
        close = None
        if closable:
            close = make_action(window, "&Close window", "closeWindow", "Ctrl+W", window.close)
            window.close_action = close
        if not isinstance(window, QMainWindow):
            window.addActions([a for a in self.all() if not a.shortcut().isEmpty()] + ([close] if close else []))
            return {}
        file_menu = window.menuBar().addMenu("&File")
        file_menu.setObjectName("fileMenu")
        for a in (self.new_chat, self.chat, self.memory, self.server, self.settings):
            file_menu.addAction(a)
        file_menu.addSeparator()
        if close is not None:
            file_menu.addAction(close)
        file_menu.addAction(self.quit)
        models_menu = window.menuBar().addMenu("M&odels")
        models_menu.setObjectName("modelsMenu")
        models_menu.addActions(self.models_head)
        return {"fileMenu": file_menu, "modelsMenu": models_menu}

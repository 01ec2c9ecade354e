"""Models → Launch a coding agent…: the `strata launch` command of each coding agent on a model that can call
tools, ready to copy into a terminal, or started in the user's own terminal emulator in a project folder they
pick ("Open in terminal", app/gui/models/terminal.py), after which the Server window opens searched to that agent's
client (CLIENTS: the part of its User-Agent the request log records). The command gives the agent this server's settings without
touching its own configuration. An agent that is not installed (its command is not on PATH) shows its install
command instead of the button.

The models offered are the installed ones whose /api/tags entry lists the `tools` capability, a loaded one
first. When the service is not at the default address, the command carries STRATA_HOST.
The agents and their commands are app/gui/models/agent_commands.py (plain data).
Covered by tests/gui/test_gui_agent_launch.py (the menu entry, the commands, Copy, Open in terminal with a
stand-in terminal, offscreen and under Xvfb)."""
from __future__ import annotations

import shutil
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFileDialog, QGridLayout, QHBoxLayout, QLabel,
                               QLineEdit, QPushButton, QVBoxLayout)

from app.gui.common.state import ServiceState
from app.gui.models.agent_commands import AGENTS, CLIENTS, launch_command, strata_command
from app.gui.models.terminal import NoTerminal, open_in_terminal


def tool_models(state: ServiceState) -> list[str]:
    """Installed models that can call tools, the loaded ones first."""
    names = [t.get("name") or t.get("model") for t in state.tags if "tools" in (t.get("capabilities") or ())]
    loaded = {m.get("name") or m.get("model") for m in state.ps}
    return sorted(names, key=lambda n: (n not in loaded, n))


class AgentLaunchDialog(QDialog):
    # an agent was started in a terminal: (its launch name, its client in the request log); the desktop opens the
    # Server window searched to that client
    launched = Signal(str, str)

    def __init__(self, state: ServiceState, parent=None):
        super().__init__(parent)
        self.state = state
        self.setWindowTitle("Launch a coding agent")
        self.setObjectName("agentLaunchDialog")
        lay = QVBoxLayout(self)
        intro = QLabel("Run one of these in a terminal, in your project's folder, or open it in a terminal here. "
                       "Strata gives the agent this server's address, the model for every task it asks for, the "
                       "model's context window, and turns its telemetry off, without changing the agent's own "
                       "settings.")
        intro.setWordWrap(True)
        lay.addWidget(intro)
        self.model = QComboBox(objectName="agentModel")
        lay.addWidget(self.model)
        self.empty = QLabel("No installed model can call tools, which a coding agent needs: import or pull one "
                            "(for example a Qwen2.5-Coder or Qwen3 GGUF).")
        self.empty.setWordWrap(True)
        lay.addWidget(self.empty)
        where = QHBoxLayout()
        where.addWidget(QLabel("Project folder:"))
        self.folder = QLineEdit(str(Path.home()), objectName="agentFolder")
        where.addWidget(self.folder, 1)
        choose = QPushButton("Choose…", objectName="agentFolderChoose")
        choose.clicked.connect(self.choose_folder)
        where.addWidget(choose)
        lay.addLayout(where)
        grid = QGridLayout()
        self.commands: dict[str, QLineEdit] = {}
        self.opens: dict[str, QPushButton] = {}
        self.missing: dict[str, QLabel] = {}
        for row, (agent, title, _command, install) in enumerate(AGENTS):
            grid.addWidget(QLabel(title), row, 0)
            line = QLineEdit(readOnly=True, objectName=f"command:{agent}")
            grid.addWidget(line, row, 1)
            copy = QPushButton("Copy", objectName=f"copy:{agent}")
            copy.clicked.connect(lambda _checked=False, a=agent: self.copy(a))
            grid.addWidget(copy, row, 2)
            start = QPushButton("Open in terminal", objectName=f"open:{agent}")
            start.clicked.connect(lambda _checked=False, a=agent: self.open_terminal(a))
            grid.addWidget(start, row, 3)
            missing = QLabel(f"Not installed: <code>{install}</code>", objectName=f"install:{agent}")
            missing.setTextInteractionFlags(missing.textInteractionFlags() | Qt.TextSelectableByMouse)
            grid.addWidget(missing, row, 3)
            self.commands[agent], self.opens[agent], self.missing[agent] = line, start, missing
        lay.addLayout(grid)
        self.status = QLabel("", objectName="agentStatus")
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.model.currentTextChanged.connect(lambda _t: self._fill())
        state.models_changed.connect(self.reload)
        self.resize(900, 480)
        self.reload()

    def reload(self) -> None:
        current = self.model.currentText()
        names = tool_models(self.state)
        self.model.blockSignals(True)
        self.model.clear()
        self.model.addItems(names)
        if current in names:
            self.model.setCurrentText(current)
        self.model.blockSignals(False)
        self.empty.setVisible(not names)
        self._fill()

    def _fill(self) -> None:
        model = self.model.currentText()
        for agent, line in self.commands.items():
            line.setText(launch_command(agent, model, self.state.bridge.base_url) if model else "")
        for agent, _title, command, _install in AGENTS:
            installed = shutil.which(command) is not None
            self.opens[agent].setVisible(installed)
            self.opens[agent].setEnabled(bool(model))
            self.missing[agent].setVisible(not installed)

    def copy(self, agent: str) -> None:
        text = self.commands[agent].text()
        if text:
            QGuiApplication.clipboard().setText(text)

    def choose_folder(self) -> None:
        chosen = QFileDialog.getExistingDirectory(self, "Project folder", self.folder.text())
        if chosen:
            self.folder.setText(chosen)

    def open_terminal(self, agent: str) -> list[str] | None:
        """Start `strata launch AGENT --model M` in the user's terminal, in the chosen folder; says what it did."""
        model, folder = self.model.currentText(), self.folder.text().strip()
        if not model:
            return None
        if not Path(folder).is_dir():
            self.status.setText(f"No such folder: {folder}")
            return None
        command = launch_command(agent, model, self.state.bridge.base_url, strata_command())
        try:
            argv = open_in_terminal(command, folder)
        except (NoTerminal, OSError) as e:
            self.status.setText(f"Could not open a terminal ({e}). Run this in one, in {folder}:\n"
                                f"{self.commands[agent].text()}")
            return None
        self.status.setText(f"Started in a terminal ({Path(argv[0]).name}), in {folder}: "
                            f"{self.commands[agent].text()}. The Server window shows its requests.")
        self.launched.emit(agent, CLIENTS.get(agent, ""))
        return argv

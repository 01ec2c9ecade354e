"""Models → Launch a coding agent…: the `strata launch` command for Claude Code, Codex and OpenCode on a model
that can call tools, ready to copy into a terminal (an agent runs in the user's terminal, in the project's
folder; the command gives it this server's settings without touching its own configuration).

The models offered are the installed ones whose /api/tags entry lists the `tools` capability, a loaded one
first. When the service is not at the default address, the command carries STRATA_HOST.
Covered by tests/gui/test_gui_agent_launch.py (the menu entry, the commands, Copy)."""
from __future__ import annotations

import shlex

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QGridLayout, QLabel, QLineEdit, QPushButton,
                               QVBoxLayout)

from app.gui.state import ServiceState

AGENTS = (("claude", "Claude Code"), ("codex", "Codex"), ("opencode", "OpenCode"))
DEFAULT_URL = "http://127.0.0.1:11434"


def tool_models(state: ServiceState) -> list[str]:
    """Installed models that can call tools, the loaded ones first."""
    names = [t.get("name") or t.get("model") for t in state.tags if "tools" in (t.get("capabilities") or ())]
    loaded = {m.get("name") or m.get("model") for m in state.ps}
    return sorted(names, key=lambda n: (n not in loaded, n))


def launch_command(agent: str, model: str, base_url: str) -> str:
    host = base_url.removeprefix("http://").rstrip("/")
    prefix = "" if base_url.rstrip("/") in (DEFAULT_URL, "http://localhost:11434") else f"STRATA_HOST={host} "
    return f"{prefix}strata launch {agent} --model {shlex.quote(model)}"


class AgentLaunchDialog(QDialog):
    def __init__(self, state: ServiceState, parent=None):
        super().__init__(parent)
        self.state = state
        self.setWindowTitle("Launch a coding agent")
        self.setObjectName("agentLaunchDialog")
        lay = QVBoxLayout(self)
        intro = QLabel("Run one of these in a terminal, in your project's folder. Strata gives the agent this "
                       "server's address, the model for every task it asks for, the model's context window, and "
                       "turns its telemetry off, without changing the agent's own settings.")
        intro.setWordWrap(True)
        lay.addWidget(intro)
        self.model = QComboBox(objectName="agentModel")
        lay.addWidget(self.model)
        self.empty = QLabel("No installed model can call tools, which a coding agent needs: import or pull one "
                            "(for example a Qwen2.5-Coder or Qwen3 GGUF).")
        self.empty.setWordWrap(True)
        lay.addWidget(self.empty)
        grid = QGridLayout()
        self.commands: dict[str, QLineEdit] = {}
        for row, (agent, title) in enumerate(AGENTS):
            grid.addWidget(QLabel(title), row, 0)
            line = QLineEdit(readOnly=True, objectName=f"command:{agent}")
            grid.addWidget(line, row, 1)
            copy = QPushButton("Copy", objectName=f"copy:{agent}")
            copy.clicked.connect(lambda _checked=False, a=agent: self.copy(a))
            grid.addWidget(copy, row, 2)
            self.commands[agent] = line
        lay.addLayout(grid)
        note = QLabel("Not installed? <code>npm install -g @anthropic-ai/claude-code</code>, "
                      "<code>@openai/codex</code> or <code>opencode-ai</code>.")
        note.setWordWrap(True)
        lay.addWidget(note)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.model.currentTextChanged.connect(lambda _t: self._fill())
        state.models_changed.connect(self.reload)
        self.resize(640, 260)
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

    def copy(self, agent: str) -> None:
        text = self.commands[agent].text()
        if text:
            QGuiApplication.clipboard().setText(text)

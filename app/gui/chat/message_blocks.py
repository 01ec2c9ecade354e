"""The parts of a chat message that are not its answer: the model's thinking (collapsed by default, with its
token count) and the tool calls it made / tool results it got, each as its own block.
Covered by tests/gui/test_gui_thinking.py (thinking and tool-call blocks)."""
from __future__ import annotations

import html
import json

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QToolButton, QVBoxLayout, QWidget


def thinking_title(n_tokens: int, streaming: bool = False) -> str:
    count = f" · {n_tokens} tokens" if n_tokens else ""
    return ("Thinking…" if streaming else "Thinking") + count


def call_text(call: dict) -> str:
    """`get_weather({"city": "Paris"})` from Ollama's tool_call shape."""
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if not isinstance(args, str):
        args = json.dumps(args if args is not None else {}, ensure_ascii=False)
    return f"{fn.get('name', '?')}({args})"


class ThinkingBlock(QFrame):
    """A toggle ("Thinking · N tokens") over the thinking text, which is hidden until the user opens it."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("thinkingBlock")
        self.text = ""
        self.n_tokens = 0
        self.toggle = QToolButton()
        self.toggle.setObjectName("thinkingToggle")
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.RightArrow)
        self.toggle.setAutoRaise(True)
        self.toggle.toggled.connect(self._on_toggled)
        self.body = QLabel()
        self.body.setObjectName("thinkingBody")
        self.body.setWordWrap(True)
        self.body.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.body.hide()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        lay.addWidget(self.toggle)
        lay.addWidget(self.body)
        self.set_thinking("", 0)

    def set_thinking(self, text: str, n_tokens: int, streaming: bool = False) -> None:
        self.text, self.n_tokens = text, n_tokens
        self.toggle.setText(thinking_title(n_tokens, streaming))
        self.body.setText(text)
        self.setVisible(bool(text))

    def _on_toggled(self, on: bool) -> None:
        self.toggle.setArrowType(Qt.DownArrow if on else Qt.RightArrow)
        self.body.setVisible(on)


class ToolCallBlock(QLabel):
    """One tool call the model made (or, for a tool message, the result it got)."""

    def __init__(self, text: str, kind: str = "call", parent: QWidget | None = None):
        prefix = "Tool call" if kind == "call" else "Tool result"
        super().__init__(f"<b>{prefix}</b><br><code>{html.escape(text)}</code>", parent)
        self.setObjectName("toolCallBlock" if kind == "call" else "toolResultBlock")
        self.kind, self.plain = kind, text
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextSelectableByMouse)


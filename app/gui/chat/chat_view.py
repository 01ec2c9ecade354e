"""Widgets of the chat: the message box, the first-run hint, and the transcript's messages (Markdown body that
grows with its text, a stats line, and an optional token view where hovering a token shows its top alternatives,
the API's top_logprobs)."""
from __future__ import annotations

import bisect
import html
import math

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor, QGuiApplication, QTextCharFormat, QTextCursor, QTextOption,
)
from PySide6.QtWidgets import (
    QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QScrollArea, QSizePolicy, QTextBrowser, QToolButton,
    QToolTip, QVBoxLayout, QWidget,
)

from .attachments import Thumbnails, local_files
from .code_blocks import CopyCodeButton, find_fences, highlight
from .message_blocks import ThinkingBlock, ToolCallBlock, call_text


class MessageInput(QPlainTextEdit):
    """Enter sends, Shift+Enter starts a new line; files pasted (copied in a file manager) are attached, not
    pasted as their paths."""
    submitted = Signal()
    files_pasted = Signal(list)
    image_pasted = Signal(object)       # a QImage (a screenshot copied)

    def canInsertFromMimeData(self, source) -> bool:
        return bool(local_files(source)) or source.hasImage() or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source) -> None:
        files = local_files(source)
        if files:
            self.files_pasted.emit(files)
        elif source.hasImage():
            self.image_pasted.emit(source.imageData())
        else:
            super().insertFromMimeData(source)

    def keyPressEvent(self, e) -> None:
        if e.key() in (Qt.Key_Return, Qt.Key_Enter) and not (e.modifiers() & Qt.ShiftModifier):
            self.submitted.emit()
            return
        super().keyPressEvent(e)


FIRST_RUN_TEXT = (
    "<b>Only the built-in model is installed</b> (smollm2:135m, a small model to try things with). "
    "More models come from three places: a <b>.gguf file</b> you import (or drop on the model manager), a "
    "<b>registry</b> you pull from by name (e.g. <code>qwen3:0.6b</code>), and <b>other apps' folders</b>: "
    "models you already have in Ollama, LM Studio or the Hugging Face cache appear here by themselves.")


class FirstRunHint(QFrame):
    """Shown over an empty chat while the built-in model is the only one: where models come from, with a
    button for each way. `chosen` says which: "import", "pull" or "settings"."""
    chosen = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("firstRunHint")
        text = QLabel(FIRST_RUN_TEXT)
        text.setWordWrap(True)
        text.setTextFormat(Qt.RichText)
        lay = QVBoxLayout(self)
        lay.addWidget(text)
        row = QHBoxLayout()
        self.buttons = {}
        for key, label in (("import", "Import a .gguf file…"), ("pull", "Pull a model…"),
                           ("settings", "Choose other apps' folders…")):
            b = QPushButton(label)
            b.setObjectName(f"firstRun_{key}")
            b.clicked.connect(lambda _checked=False, k=key: self.chosen.emit(k))
            row.addWidget(b)
            self.buttons[key] = b
        row.addStretch(1)
        lay.addLayout(row)
        self.setVisible(False)


ROLE_TITLES = {"user": "You", "assistant": "Assistant", "error": "Error", "tool": "Tool result"}


def format_stats(stats: dict) -> str:
    """"42 tokens · 85.3 tok/s · TTFT 120 ms · 30 prompt tokens · load 1.2 s · smollm2:135m" (+ "stopped" when
    the user stopped it, "length limit" when the reply hit num_predict)."""
    parts = []
    if "tokens" in stats:
        parts.append(f"{stats['tokens']} tokens")
    if stats.get("tok_s"):
        parts.append(f"{stats['tok_s']:.1f} tok/s")
    if stats.get("ttft_ms") is not None:
        parts.append(f"TTFT {stats['ttft_ms']:.0f} ms")
    if stats.get("prompt_cached_count"):            # prompt tokens the server found in its prompt cache
        parts.append(f"{stats['prompt_cached_count']} of {stats.get('prompt_eval_count', '?')} prompt tokens cached")
    elif stats.get("prompt_eval_count"):
        parts.append(f"{stats['prompt_eval_count']} prompt tokens")
    if (stats.get("load_duration") or 0) >= 1e7:      # ns; a model already loaded takes ~0
        parts.append(f"load {stats['load_duration'] / 1e9:.1f} s")
    if stats.get("done_reason") == "length":
        parts.append("length limit")
    if stats.get("draft_count"):                    # speculative decoding: how many drafted tokens were right
        parts.append(f"{100 * stats.get('draft_accepted_count', 0) / stats['draft_count']:.0f}% of "
                     f"{stats['draft_count']} drafted tokens accepted")
    if stats.get("stopped"):
        parts.append("stopped")
    if stats.get("model"):
        parts.append(stats["model"])
    return " · ".join(parts)


def token_text(lp: dict) -> str:
    return str(lp.get("token", ""))


def token_tooltip(lp: dict) -> str:
    """HTML table of a token's probability and its top alternatives."""
    rows = []
    chosen = token_text(lp)
    alts = lp.get("top_logprobs") or []
    if not alts:
        alts = [lp]
    for a in alts:
        tok = token_text(a)
        p = math.exp(float(a.get("logprob", float("-inf"))))
        mark = "<b>" if tok == chosen else ""
        end = "</b>" if mark else ""
        rows.append(f"<tr><td><code>{mark}{html.escape(repr(tok))}{end}</code></td>"
                    f"<td align='right'>{mark}{100 * p:.1f}%{end}</td></tr>")
    return "<table>" + "".join(rows) + "</table>"


def probability_color(logprob: float) -> QColor:
    """Background for a token: clear when the model was sure, warmer as its probability drops."""
    p = math.exp(max(-50.0, float(logprob)))
    c = QColor("#ffd8a8")
    c.setAlphaF(max(0.0, min(1.0, 1.0 - p)) * 0.9)
    return c


class AutoHeightBrowser(QTextBrowser):
    """A QTextBrowser as tall as its document (the transcript scrolls, not each message)."""
    token_hovered = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.copy_buttons: list[CopyCodeButton] = []      # one over each code block
        self.setOpenExternalLinks(True)
        self.setFrameShape(QFrame.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self.setWordWrapMode(QTextOption.WrapAtWordBoundaryOrAnywhere)
        self.document().contentsChanged.connect(self._fit)
        self.document().setDocumentMargin(2)
        self.token_offsets: list[int] = []     # start offset of each token in token view
        self.token_logprobs: list[dict] = []
        self.viewport().setMouseTracking(True)

    def _fit(self) -> None:
        self.document().setTextWidth(self.viewport().width())
        h = int(math.ceil(self.document().size().height())) + 4
        if h != self.height():
            self.setFixedHeight(h)
        self._place_copy_buttons()

    def _place_copy_buttons(self) -> None:
        doc = self.document()
        for b in self.copy_buttons:
            top = doc.documentLayout().blockBoundingRect(doc.findBlockByNumber(b.fence.first_block)).top()
            hint = b.sizeHint()
            b.setGeometry(max(0, self.viewport().width() - hint.width() - 4), int(top) + 2, hint.width(),
                          hint.height())

    def _set_copy_buttons(self, fences) -> None:
        for b in self.copy_buttons:
            b.deleteLater()
        self.copy_buttons = [CopyCodeButton(f, self.viewport()) for f in fences]
        for b in self.copy_buttons:
            b.show()
        self._place_copy_buttons()

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        self._fit()

    def sizeHint(self) -> QSize:
        return QSize(400, self.height())

    def mouseMoveEvent(self, e) -> None:
        super().mouseMoveEvent(e)
        if not self.token_offsets:
            return
        pos = self.cursorForPosition(e.position().toPoint()).position()
        i = bisect.bisect_right(self.token_offsets, pos) - 1
        if 0 <= i < len(self.token_logprobs):
            self.token_hovered.emit(i)
            QToolTip.showText(e.globalPosition().toPoint(), token_tooltip(self.token_logprobs[i]), self)

    def show_tokens(self, logprobs: list[dict]) -> None:
        """Plain text, one span per token, shaded by how unsure the model was. Hover shows alternatives."""
        self.clear()
        self._set_copy_buttons([])
        cur = QTextCursor(self.document())
        offsets = []
        for lp in logprobs:
            offsets.append(cur.position())
            fmt = QTextCharFormat()
            fmt.setBackground(probability_color(lp.get("logprob", 0.0)))
            cur.insertText(token_text(lp), fmt)
        self.token_offsets = offsets
        self.token_logprobs = list(logprobs)

    def show_markdown(self, text: str) -> None:
        self.token_offsets, self.token_logprobs = [], []
        self.setMarkdown(text)
        fences = find_fences(self.document())
        highlight(self.document(), fences)
        self._set_copy_buttons(fences)


# the buttons over a message: key, text, tooltip (what `requested` carries; "copy" is done here)
MESSAGE_TOOLS = (("prev", "‹", "Show the previous branch (an earlier version of this message)"),
                 ("next", "›", "Show the next branch"),
                 ("copy", "Copy", "Copy this message (its Markdown text)"),
                 ("edit", "Edit…", "Edit this message and send it again; the old version stays as a branch"),
                 ("continue", "Continue", "This reply stopped at its length limit: let the model go on"),
                 ("delete", "Delete", "Delete this message from the chat"))


class MessageWidget(QFrame):
    requested = Signal(str)        # "prev" | "next" | "edit" | "continue" | "delete"

    def __init__(self, role: str, content: str = "", stats: dict | None = None, logprobs: list | None = None,
                 message_id: int | None = None, blocks: dict | None = None, parent=None):
        super().__init__(parent)
        self.role = role
        self.message_id = message_id
        self.content = content
        self.logprobs: list[dict] = list(logprobs or [])
        self.setObjectName(f"message_{role}")
        self.setProperty("role", role)
        self.title = QLabel(ROLE_TITLES.get(role, role.title()))
        self.title.setObjectName("messageTitle")
        self.body = AutoHeightBrowser()
        self.body.setObjectName("messageBody")
        self.stats_label = QLabel()
        self.stats_label.setObjectName("messageStats")
        self.tokens_button = QPushButton("Tokens")
        self.tokens_button.setCheckable(True)
        self.tokens_button.setToolTip("Show each token shaded by its probability; hover one to see alternatives")
        self.tokens_button.setFlat(True)
        self.tokens_button.toggled.connect(self._toggle_tokens)
        head = QHBoxLayout()
        head.setContentsMargins(0, 0, 0, 0)
        head.addWidget(self.title)
        head.addStretch(1)
        head.addWidget(self.tokens_button)
        self.tool_buttons: dict[str, QToolButton] = {}
        for key, text, tip_text in MESSAGE_TOOLS:
            b = QToolButton()
            b.setObjectName(f"message_{key}")
            b.setText(text)
            b.setToolTip(tip_text)
            b.setAutoRaise(True)
            b.clicked.connect(lambda _checked=False, k=key: self._on_tool(k))
            self.tool_buttons[key] = b
            head.addWidget(b)
            if key == "prev":
                self.branch_label = QLabel()
                self.branch_label.setObjectName("branchLabel")
                head.addWidget(self.branch_label)
        self.tool_buttons["edit"].setVisible(role == "user")
        self.set_branch(0, 1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 6, 10, 6)
        lay.setSpacing(2)
        self.thinking = ThinkingBlock()
        self.calls_box = QVBoxLayout()
        self.calls_box.setContentsMargins(0, 0, 0, 0)
        self.tool_calls: list[dict] = []
        lay.addLayout(head)
        lay.addWidget(self.thinking)
        lay.addWidget(self.body)
        lay.addLayout(self.calls_box)
        lay.addWidget(self.stats_label)
        self.set_content(content)
        self.set_stats(stats or {})
        blocks = blocks or {}
        self.set_thinking(blocks.get("thinking", ""), blocks.get("thinking_tokens", 0))
        self.set_tool_calls(blocks.get("tool_calls") or [])
        if blocks.get("images"):
            lay.insertWidget(lay.indexOf(self.body), Thumbnails(blocks["images"]))

    def set_thinking(self, text: str, n_tokens: int = 0, streaming: bool = False) -> None:
        self.thinking.set_thinking(text, n_tokens, streaming)

    def set_branch(self, index: int, count: int) -> None:
        """‹ 2/3 ›: this message is the index-th (0-based) of `count` versions."""
        self.branch = (index, count)
        for w in (self.tool_buttons["prev"], self.branch_label, self.tool_buttons["next"]):
            w.setVisible(count > 1)
        self.branch_label.setText(f"{index + 1}/{count}")
        self.tool_buttons["prev"].setEnabled(index > 0)
        self.tool_buttons["next"].setEnabled(index < count - 1)

    def set_tools_enabled(self, on: bool) -> None:
        """While a reply streams, the chat's messages are not edited, deleted or switched (copy still works)."""
        for key, b in self.tool_buttons.items():
            if key != "copy":
                b.setEnabled(on and (key != "prev" or self.branch[0] > 0)
                             and (key != "next" or self.branch[0] < self.branch[1] - 1))

    def _on_tool(self, key: str) -> None:
        if key == "copy":
            QGuiApplication.clipboard().setText(self.content)
        else:
            self.requested.emit(key)

    def show_streaming_blocks(self, thinking: list[str], calls: list[dict]) -> None:
        """While a reply streams: its thinking so far (collapsed) and the calls made so far."""
        if thinking and len(thinking) != self.thinking.n_tokens:
            self.set_thinking("".join(thinking), len(thinking), streaming=True)
        if len(calls) != len(self.tool_calls):
            self.set_tool_calls(calls)

    def set_tool_calls(self, calls: list[dict]) -> None:
        """Each call the model made as its own block under the answer."""
        for c in calls[len(self.tool_calls):]:
            self.calls_box.addWidget(ToolCallBlock(call_text(c)))
        self.tool_calls = list(calls)

    def set_content(self, text: str) -> None:
        self.content = text
        # a reply that is only tool calls (or not started yet) shows no empty text line
        self.body.setVisible(self.role != "assistant" or bool(text.strip()))
        if self.role in ("error", "tool"):
            self.body.setPlainText(text)
        elif not self.tokens_button.isChecked():
            self.body.show_markdown(text)

    def set_stats(self, stats: dict) -> None:
        self.stats = stats
        text = format_stats(stats)
        self.stats_label.setText(text)
        self.stats_label.setVisible(bool(text))
        self.tokens_button.setVisible(bool(self.logprobs))
        self.tool_buttons["continue"].setVisible(self.role == "assistant" and stats.get("done_reason") == "length")

    def set_logprobs(self, logprobs: list[dict]) -> None:
        self.logprobs = list(logprobs)
        self.tokens_button.setVisible(bool(self.logprobs))

    def _toggle_tokens(self, on: bool) -> None:
        if on and self.logprobs:
            self.body.show_tokens(self.logprobs)
        else:
            self.body.show_markdown(self.content)


class Transcript(QScrollArea):
    """The scrolling list of messages. Streaming text is rendered at most every `render_ms` so a fast stream
    costs a bounded amount of GUI time however many tokens arrive."""
    message_requested = Signal(object, str)      # (MessageWidget, what its buttons asked for)

    def __init__(self, render_ms: int = 50, parent=None):
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.inner = QWidget()
        self.inner.setObjectName("transcript")
        self.vbox = QVBoxLayout(self.inner)
        self.vbox.setContentsMargins(12, 12, 12, 12)
        self.vbox.setSpacing(10)
        self.vbox.addStretch(1)
        self.setWidget(self.inner)
        self.messages: list[MessageWidget] = []
        self._pending: tuple[MessageWidget, str] | None = None
        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(render_ms)
        self._render_timer.timeout.connect(self._render_pending)
        self._stick_to_bottom = True
        self.verticalScrollBar().rangeChanged.connect(self._on_range)
        self.verticalScrollBar().valueChanged.connect(self._on_scroll)

    def clear(self) -> None:
        self._pending = None
        for m in self.messages:
            self.vbox.removeWidget(m)
            m.hide()                 # (deleted later, by the event loop: not drawn meanwhile)
            m.deleteLater()
        self.messages = []

    def add(self, role: str, content: str = "", **kw) -> MessageWidget:
        m = MessageWidget(role, content, **kw)
        m.requested.connect(lambda what, m=m: self.message_requested.emit(m, what))
        self.vbox.insertWidget(self.vbox.count() - 1, m)
        self.messages.append(m)
        self._stick_to_bottom = True
        return m

    def remove(self, m: MessageWidget) -> None:
        if m in self.messages:
            self.messages.remove(m)
            self.vbox.removeWidget(m)
            m.hide()
            m.deleteLater()

    def stream_text(self, m: MessageWidget, text: str) -> None:
        """Set a streaming message's text; rendering is coalesced by the timer."""
        m.content = text
        self._pending = (m, text)
        if not self._render_timer.isActive():
            self._render_timer.start()

    def flush(self) -> None:
        self._render_timer.stop()
        self._render_pending()

    def _render_pending(self) -> None:
        if self._pending is not None:
            m, text = self._pending
            self._pending = None
            m.set_content(text)

    def _on_scroll(self, value: int) -> None:
        sb = self.verticalScrollBar()
        self._stick_to_bottom = value >= sb.maximum() - 4

    def _on_range(self, _lo: int, hi: int) -> None:
        if self._stick_to_bottom:
            self.verticalScrollBar().setValue(hi)


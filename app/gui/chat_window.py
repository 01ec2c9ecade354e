"""The chat window: conversation list, model picker, per-chat settings, streaming transcript, Stop/Regenerate.

Replies stream from `/api/chat` through the bridge (another thread); this window only appends text and
re-renders at most every 50 ms. Chats and their settings live in SQLite (`ChatHistory`).
Covered by tests/gui/test_gui_e2e.py and the other tests/gui/test_gui_chat_*.py.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtWidgets import (
    QAbstractItemView, QCheckBox, QComboBox, QDoubleSpinBox, QFileDialog, QHBoxLayout, QInputDialog, QLabel,
    QLineEdit, QListView, QMainWindow, QMenu, QMessageBox, QPlainTextEdit, QPushButton, QSplitter,
    QToolButton, QVBoxLayout, QWidget,
)

from app.gui.app_actions import AppActions, make_action, tip
from app.gui.attachments import (AttachmentBar, fit, images_block, local_files, message_with, pasted_image,
                                 read_attachment)
from app.gui.bridge import Call
from app.gui.chat_export import import_json, to_json, to_markdown
from app.gui.chat_options import ChatOptions, ContextBox
from app.gui.chat_tools import MAX_ROUNDS, ChatTools, call_arguments
from app.gui.chat_view import FirstRunHint, MessageInput, Transcript, format_stats
from app.gui.history import AUTO_CTX, DEFAULT_TITLE, ChatHistory, Conversation
from app.gui.models import ConversationListModel, IdRole, ModelListModel, NameRole
from app.gui.reply import PendingReply
from app.gui.state import ServiceState

TOP_LOGPROBS = 5


def safe_file_name(title: str) -> str:
    """A chat title as a file name: letters, digits, spaces, dashes and dots kept."""
    return re.sub(r"[^\w .-]+", "_", title).strip(" .")[:80] or "chat"


CONTINUE_PROMPT = "Continue exactly where your last reply stopped. Do not repeat anything."


class ChatWindow(QMainWindow):
    def __init__(self, state: ServiceState, history: ChatHistory, actions: AppActions | None = None, parent=None):
        """`actions`: the application's actions (the Desktop's, shared by every window; their requests go to it)."""
        super().__init__(parent)
        self.actions = actions
        if actions is None:          # a window of its own (no Desktop): its New chat is its own business
            self.actions = AppActions(self)
            self.actions.new_chat_requested.connect(lambda: self.new_chat())
        self.state = state
        self.bridge = state.bridge
        self.history = history
        self.conversation: Conversation | None = None
        self.call: Call | None = None
        self.preparing: Call | None = None      # before a reply: files counted, tools listed, a tool call run
        self.tools = ChatTools(self.bridge, self)   # MCP servers' tools (chat_tools.py)
        self.tools.failed.connect(lambda msg: self._show_error(msg))
        self.tool_loop: int | None = None          # the chat whose tool calls are being answered, while they are
        self.tool_rounds = 0                       # tool rounds since the user's last message
        self.pending: PendingReply | None = None     # the reply streaming now
        self.extra_options: dict = {}     # more Ollama options for every request (num_predict, seed...)
        self.model_systems: dict[str, str] = {}     # each model's default system prompt (/api/show)
        self.dialog = None                # the question or prompt open over this window, if any
        self.setWindowTitle("Strata — Chat")
        self.resize(1100, 720)
        self._build()
        self._build_menus()
        state.models_changed.connect(self.on_models)
        state.load_progress.connect(lambda *_: self._update_model_status())
        self.bridge.connection.connect(self._on_connection)
        self.on_models()
        if self.conversations.items:
            self.select_conversation(self.conversations.items[0].id)
        self._update_buttons()

    # construction --------------------------------------------------------------------------------------------
    def _build(self) -> None:
        split = QSplitter(Qt.Horizontal)
        split.addWidget(self._build_sidebar())
        split.addWidget(self._build_center())
        split.setStretchFactor(1, 1)
        split.setSizes([240, 860])
        self.setCentralWidget(split)
        self.statusBar().showMessage(f"Service at {self.bridge.base_url}")

    def _build_sidebar(self) -> QWidget:
        """The conversation list with New / Rename / Delete."""
        self.conversations = ConversationListModel(self.history, self)
        self.conv_view = QListView()
        self.conv_view.setObjectName("conversationList")
        self.conv_view.setModel(self.conversations)
        self.conv_view.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.conv_view.setTextElideMode(Qt.ElideRight)
        self.conv_view.setEditTriggers(QAbstractItemView.EditKeyPressed | QAbstractItemView.DoubleClicked)
        self.conv_view.selectionModel().currentChanged.connect(self._on_conversation_clicked)
        # renamed in place in the list: the open chat's title (used by Delete's question) follows
        self.conversations.dataChanged.connect(lambda *_: self._reload_current())
        self.new_button = QPushButton("New chat")
        self.rename_button = QPushButton("Rename")
        self.delete_button = QPushButton("Delete")
        self.new_button.clicked.connect(lambda: self.new_chat())    # (Ctrl+N from any window: Desktop.new_chat)
        self.rename_button.clicked.connect(lambda: self.rename_current())
        self.delete_button.clicked.connect(lambda: self.delete_current())
        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(8, 8, 4, 8)
        self.search_box = QLineEdit()
        self.search_box.setObjectName("chatSearch")
        self.search_box.setClearButtonEnabled(True)
        self.search_box.textChanged.connect(self.conversations.set_query)
        ll.addWidget(self.new_button)
        ll.addWidget(self.search_box)
        ll.addWidget(self.conv_view, 1)
        row = QHBoxLayout()
        row.addWidget(self.rename_button)
        row.addWidget(self.delete_button)
        ll.addLayout(row)
        return left

    def _build_center(self) -> QWidget:
        center = QWidget()
        cl = QVBoxLayout(center)
        cl.setContentsMargins(4, 8, 8, 8)
        cl.addLayout(self._build_header())
        self.options = ChatOptions()
        self.options.changed.connect(lambda o: self._save_setting(options=o))
        self.options.setVisible(False)
        cl.addWidget(self.options)
        cl.addWidget(self.system_prompt)
        self.first_run = FirstRunHint()
        self.first_run.chosen.connect(self._on_hint)
        cl.addWidget(self.first_run)
        self.transcript = Transcript()
        self.transcript.message_requested.connect(self._on_message_request)
        cl.addWidget(self.transcript, 1)
        cl.addLayout(self._build_composer())
        return center

    def _build_header(self) -> QHBoxLayout:
        """Model picker and this chat's settings (saved with the chat as they change)."""
        self.models = ModelListModel(self)
        self.model_picker = QComboBox()
        self.model_picker.setObjectName("modelPicker")
        self.model_picker.setModel(self.models)
        self.model_picker.setMinimumWidth(280)
        self.model_picker.currentIndexChanged.connect(self._on_model_picked)
        self.model_status = QLabel()
        self.model_status.setObjectName("modelStatus")
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setValue(0.8)
        self.num_ctx = ContextBox()
        self.num_ctx.setObjectName("numCtx")
        self.alternatives = QCheckBox("Token alternatives")
        self.alternatives.setChecked(True)
        self.alternatives.setToolTip("Ask for each token's top alternatives (hover a token in token view)")
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setObjectName("systemPrompt")
        self.system_prompt.setPlaceholderText("System prompt for this chat (optional)")
        self.system_prompt.setMaximumHeight(52)
        self.temperature.valueChanged.connect(lambda v: self._save_setting(temperature=float(v)))
        self.num_ctx.valueChanged.connect(lambda v: self._save_setting(num_ctx=int(v)))
        self.system_prompt.textChanged.connect(
            lambda: self._save_setting(system=self.system_prompt.toPlainText()))
        self.tools_button = QToolButton()
        self.tools_button.setObjectName("toolsButton")
        self.tools_button.setText("Tools")
        self.tools_button.setToolTip("The MCP servers whose tools this chat offers the model (Settings → MCP)")
        self.tools_button.setPopupMode(QToolButton.InstantPopup)
        self.tools_menu = QMenu(self.tools_button)
        self.tools_menu.setObjectName("toolsMenu")
        self.tools_menu.aboutToShow.connect(self._fill_tools_menu)
        self.tools_button.setMenu(self.tools_menu)
        self.more_button = QToolButton()
        self.more_button.setObjectName("moreOptions")
        self.more_button.setText("More…")
        self.more_button.setCheckable(True)
        self.more_button.toggled.connect(lambda on: self.options.setVisible(on))
        header = QHBoxLayout()
        for w, stretch in ((QLabel("Model"), 0), (self.model_picker, 0), (self.model_status, 1),
                           (QLabel("Temperature"), 0), (self.temperature, 0), (QLabel("Context"), 0),
                           (self.num_ctx, 0), (self.alternatives, 0), (self.tools_button, 0),
                           (self.more_button, 0)):
            header.addWidget(w, stretch)
        return header

    def _build_composer(self) -> QHBoxLayout:
        """The message box with Send / Stop / Regenerate."""
        self.input = MessageInput()
        self.input.setObjectName("messageInput")
        self.input.setPlaceholderText("Message (Enter sends, Shift+Enter for a new line)")
        self.input.setMaximumHeight(90)
        self.input.submitted.connect(lambda: self.send())
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("sendButton")
        self.stop_button = QPushButton("Stop")
        self.regen_button = QPushButton("Regenerate")
        self.send_button.clicked.connect(lambda: self.send())
        self.stop_button.clicked.connect(lambda: self.stop())
        self.regen_button.clicked.connect(lambda: self.regenerate())
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.regen_button)
        self.attach_button = QPushButton("Attach…")
        self.attach_button.setObjectName("attachButton")
        self.attach_button.clicked.connect(lambda: self.attach_dialog())
        self.input.files_pasted.connect(self.attach_files)
        self.input.image_pasted.connect(self.attach_image)
        buttons.addWidget(self.attach_button)
        self.attachment_bar = AttachmentBar()
        self._pending_images: list = []         # image attachments of the message being sent (send -> _send_text)
        left = QVBoxLayout()
        left.addWidget(self.attachment_bar)
        left.addWidget(self.input, 1)
        bottom = QHBoxLayout()
        bottom.addLayout(left, 1)
        bottom.addLayout(buttons)
        self.setAcceptDrops(True)
        return bottom

    def _build_menus(self) -> None:
        """The application's File and Models menus, then this window's Chat menu; buttons' tooltips name the
        keys."""
        menus = self.actions.install(self, closable=False)
        self.models_menu = menus["modelsMenu"]
        self.models_menu_head = self.actions.models_head     # TrayController adds the model entries after these
        self.action_regenerate = make_action(self, "&Regenerate", "regenerate", "Ctrl+R", self.regenerate,
                                             "Ask for the last reply again")
        self.action_stop = make_action(self, "S&top", "stop", "Esc", self.stop, "Stop the reply")
        # F2 on the list renames in place (the view's own edit key); the menu entry asks in a dialog
        self.action_rename = make_action(self, "Re&name chat…", "renameChat", None, self.rename_current,
                                         "Rename this chat (F2 on the list renames in place)")
        # Delete, while the chat list has the focus (elsewhere the key belongs to the text being edited)
        self.action_delete = make_action(self, "&Delete chat…", "deleteChat", "Del", self.delete_current)
        self.action_delete.setShortcutContext(Qt.WidgetWithChildrenShortcut)
        self.action_delete.setToolTip(tip("Delete this chat", "Del on the chat list"))
        self.conv_view.addAction(self.action_delete)
        self.action_focus_input = make_action(self, "&Write a message", "focusInput", "Ctrl+L",
                                              self.input.setFocus, "Put the cursor in the message box")
        self.action_search = make_action(self, "&Search chats", "searchChats", "Ctrl+F", self._focus_search,
                                         "Show only the chats that contain some text")
        self.action_options = make_action(self, "More &options", "moreOptions", "Ctrl+Shift+O",
                                          self.more_button.toggle, "This chat's sampling options")
        self.action_export_md = make_action(self, "Export as &Markdown…", "exportMarkdown", None,
                                            lambda: self.export_chat("md"))
        self.action_export_json = make_action(self, "Export as &JSON…", "exportJson", None,
                                              lambda: self.export_chat("json"))
        self.action_import = make_action(self, "&Import a chat (JSON)…", "importChat", None, self.import_chat)
        self.action_attach = make_action(self, "&Attach files…", "attachFiles", "Ctrl+Shift+A", self.attach_dialog,
                                         "Attach text, code or image files to the message (or drop or paste them)")
        self.chat_menu = self.menuBar().addMenu("&Chat")
        self.chat_menu.setObjectName("chatMenu")
        self.chat_menu.addActions([self.action_focus_input, self.action_attach, self.action_stop,
                                   self.action_regenerate, self.action_search, self.action_options])
        self.chat_menu.addSeparator()
        self.chat_menu.addActions([self.action_rename, self.action_delete])
        self.chat_menu.addSeparator()
        self.chat_menu.addActions([self.action_export_md, self.action_export_json, self.action_import])
        self.search_box.setPlaceholderText(tip("Search chats", self.action_search))
        self.more_button.setToolTip(self.action_options.toolTip())
        for button, action in ((self.new_button, self.actions.new_chat), (self.rename_button, self.action_rename),
                               (self.delete_button, self.action_delete), (self.stop_button, self.action_stop),
                               (self.regen_button, self.action_regenerate),
                               (self.attach_button, self.action_attach)):
            button.setToolTip(action.toolTip())
        self.send_button.setToolTip(tip("Send the message", "Enter"))
        self.input.setToolTip(tip("Your message; Shift+Enter starts a new line", self.action_focus_input))
        self._set_tab_order()

    def _set_tab_order(self) -> None:
        """Tab walks the window the way it reads: the chat list and its buttons, the chat's settings, the
        transcript, then the message box and its buttons."""
        chain = [self.search_box, self.conv_view, self.new_button, self.rename_button, self.delete_button, self.model_picker,
                 self.temperature, self.num_ctx, self.alternatives, self.more_button, self.options.top_p,
                 self.options.top_k, self.options.repeat_penalty, self.options.seed, self.options.stop,
                 self.system_prompt, self.transcript,
                 self.input, self.send_button, self.stop_button, self.regen_button, self.attach_button]
        for a, b in zip(chain, chain[1:]):
            self.setTabOrder(a, b)

    def _on_hint(self, way: str) -> None:
        if way == "settings":
            self.actions.open_settings_requested.emit()
        else:
            self.actions.open_models_requested.emit(way)

    # models ----------------------------------------------------------------------------------------------------
    def on_models(self) -> None:
        want = self.selected_model() or (self.conversation.model if self.conversation else "")
        self.model_picker.blockSignals(True)
        self.models.set_models(self.state.tags, self.state.ps, self.state.progress)
        row = self.models.row_of(want) if want else -1
        if row < 0 and self.models.rows:
            row = 0
        self.model_picker.setCurrentIndex(row)
        self.model_picker.blockSignals(False)
        self._update_model_status()
        self._show_model_system()
        self._update_first_run()

    def _update_first_run(self) -> None:
        """First run: the built-in model is all there is (once the list has come) and this chat is empty ->
        say where models come from."""
        sources = {(m.get("strata") or {}).get("source", "store") for m in self.state.tags}
        listed = bool(self.state.tags) or self.state.connected
        self.first_run.setVisible(listed and sources <= {"builtin"} and not self.transcript.messages)

    def selected_model(self) -> str:
        i = self.model_picker.currentIndex()
        return self.models.data(self.models.index(i), NameRole) if i >= 0 else ""

    def _on_model_picked(self, _i: int) -> None:
        if self.selected_model():
            self._save_setting(model=self.selected_model())
        self._update_model_status()
        self._show_model_system()

    def _show_model_system(self) -> None:
        """The model's own default system prompt (/api/show "system"), shown in the empty system prompt box:
        the service uses it when the chat sets none."""
        name = self.selected_model()
        if name and name not in self.model_systems:
            self.model_systems[name] = ""                     # asked once per model
            call = self.bridge.call(lambda c: c.show(name))
            call.finished.connect(lambda r: (self.model_systems.__setitem__(name, (r or {}).get("system") or ""),
                                             self._show_model_system()))
            return
        system = self.model_systems.get(name, "")
        self.system_prompt.setPlaceholderText(
            f"System prompt for this chat (empty: the model's default, “{system.strip()}”)" if system.strip()
            else "System prompt for this chat (optional)")
        self.system_prompt.setToolTip(f"The model's default system prompt:\n{system}" if system.strip() else "")

    def _update_model_status(self) -> None:
        name = self.selected_model()
        if not name:
            self.model_status.setText("No models installed" if self.state.connected or self.state.tags else "")
            return
        st = self.state.model_state(name)
        if st == "loading":
            self.model_status.setText(f"loading {int(100 * self.state.progress.get(name, 0))}%")
        elif st == "loaded":
            self.model_status.setText("")          # the picker already says "loaded"
        elif st == "failed":
            self.model_status.setText("failed to load")
        else:
            self.model_status.setText("loads on first message")

    def _on_connection(self, up: bool) -> None:
        self.statusBar().showMessage(
            f"Service at {self.bridge.base_url}" + ("" if up else " — not reachable, retrying"))

    # conversations ---------------------------------------------------------------------------------------------
    def new_chat(self) -> Conversation:
        self.stop()
        # a new chat starts from the settings on screen (model, system prompt, temperature, context)
        conv = self.history.create(model=self.selected_model(), system=self.system_prompt.toPlainText(),
                                   temperature=self.temperature.value(), num_ctx=self.num_ctx.value(),
                                   options=self.options.values())
        if self.conversation is not None and self.conversation.tools:     # the tools chosen go on too
            conv = self.history.update(conv.id, tools=self.conversation.tools)
        self.search_box.clear()          # a filtered list would hide the new chat
        self.conversations.reload()
        self.select_conversation(conv.id)
        self.input.setFocus()
        return conv

    def select_conversation(self, conversation_id: int) -> None:
        row = self.conversations.row_of(conversation_id)
        if row < 0 and self.conversations.query:          # hidden by the search: show every chat
            self.search_box.clear()
            row = self.conversations.row_of(conversation_id)
        if row < 0:
            return
        self.conv_view.selectionModel().blockSignals(True)
        self.conv_view.setCurrentIndex(self.conversations.index(row))
        self.conv_view.selectionModel().blockSignals(False)
        self._load_conversation(self.conversations.items[row])

    def _on_conversation_clicked(self, index: QModelIndex, _prev=None) -> None:
        if index.isValid():
            cid = index.data(IdRole)
            if not self.conversation or cid != self.conversation.id:
                self.stop()
                self._load_conversation(self.history.get(cid))

    def _load_conversation(self, conv: Conversation) -> None:
        self.conversation = None          # no saving while the widgets take this chat's values
        for w, v in ((self.temperature, conv.temperature), (self.num_ctx, conv.num_ctx)):
            w.blockSignals(True)
            w.setValue(v)
            w.blockSignals(False)
        self.system_prompt.blockSignals(True)
        self.system_prompt.setPlainText(conv.system)
        self.system_prompt.blockSignals(False)
        self.options.set_values(conv.options)
        self.tools_button.setText(f"Tools ({len(conv.tools)})" if conv.tools else "Tools")
        if conv.model and self.models.row_of(conv.model) >= 0:
            self.model_picker.blockSignals(True)
            self.model_picker.setCurrentIndex(self.models.row_of(conv.model))
            self.model_picker.blockSignals(False)
        self.conversation = conv
        self._show_messages()
        self._update_model_status()
        self._update_first_run()
        self._update_buttons()

    def _show_messages(self) -> None:
        """The transcript shows the chat's current branch, each message with its ‹ i/n › when it has versions."""
        self.transcript.clear()
        for m in self.history.messages(self.conversation.id):
            w = self.transcript.add(m.role, m.content, stats=m.stats, logprobs=m.logprobs, message_id=m.id,
                                    blocks=m.blocks)
            siblings = self.history.siblings(m.id)
            w.set_branch(siblings.index(m.id), len(siblings))
        self._update_buttons()

    def restyle(self) -> None:
        """After a light/dark switch: messages re-rendered, so code blocks take the new Pygments style."""
        for m in self.transcript.messages:
            if not (self.pending is not None and m is self.pending.widget):
                m.set_content(m.content)

    # a message's own buttons -----------------------------------------------------------------------------------
    def _on_message_request(self, widget, what: str) -> None:
        if self.busy or self.conversation is None or widget.message_id is None:
            return
        mid = widget.message_id
        if what in ("prev", "next"):
            siblings = self.history.siblings(mid)
            i = siblings.index(mid) + (1 if what == "next" else -1)
            if 0 <= i < len(siblings):
                self.history.show_branch(siblings[i])
                self._show_messages()
        elif what == "delete":
            self.history.delete_message(mid)
            self._show_messages()
        elif what == "edit":
            self.edit_message(mid)
        elif what == "continue":
            self.continue_reply(mid)

    def edit_message(self, message_id: int) -> None:
        """Ask for the new text (a window-modal dialog that does not block); sending it adds the edited message
        as a new branch beside the old one and asks for a reply."""
        old = self.history.message(message_id)
        dlg = QInputDialog(self)
        dlg.setObjectName("editMessageDialog")
        dlg.setWindowTitle("Edit message")
        dlg.setLabelText("Your message (the old version and its reply stay as a branch):")
        dlg.setOption(QInputDialog.UsePlainTextEditForTextInput)
        dlg.setTextValue(old.content)
        dlg.setOkButtonText("Send")
        dlg.textValueSelected.connect(lambda t: t.strip() and self.resend_edited(message_id, t.strip()))
        self._open_dialog(dlg)

    def resend_edited(self, message_id: int, text: str) -> None:
        if self.busy:
            return
        old = self.history.message(message_id)
        self.history.add_message(old.conversation_id, "user", text, parent_id=old.parent_id)
        self._show_messages()
        self._start_reply()

    def continue_reply(self, message_id: int) -> None:
        """A reply cut at its length limit goes on: the chat so far, that reply included, is sent again with a
        request to continue, and what comes is added to the same reply."""
        msg = self.history.message(message_id)
        shown = self.history.messages(msg.conversation_id)
        if not shown or shown[-1].id != message_id:       # only the last reply of the branch shown
            return
        self._start_reply(continuing=msg)

    def _focus_search(self) -> None:
        self.search_box.setFocus()
        self.search_box.selectAll()

    # files -----------------------------------------------------------------------------------------------------
    def export_chat(self, kind: str) -> None:
        """Save the chat shown (its branch shown) as Markdown or JSON, to a file chosen in a dialog."""
        if not self.conversation:
            return
        conv = self.conversation
        dlg = QFileDialog(self, "Export chat", str(Path.home() / f"{safe_file_name(conv.title)}.{kind}"),
                          "Markdown (*.md)" if kind == "md" else "JSON (*.json)")
        dlg.setObjectName("exportDialog")
        dlg.setAcceptMode(QFileDialog.AcceptSave)
        dlg.setOption(QFileDialog.DontUseNativeDialog)        # window-modal, not blocking, the same everywhere
        dlg.fileSelected.connect(lambda path: self._write_export(conv.id, kind, path))
        self._open_dialog(dlg)

    def _write_export(self, conversation_id: int, kind: str, path: str) -> None:
        conv, msgs = self.history.get(conversation_id), self.history.messages(conversation_id)
        text = to_markdown(conv, msgs) if kind == "md" else json.dumps(to_json(conv, msgs), indent=2,
                                                                         ensure_ascii=False)
        try:
            Path(path).write_text(text, encoding="utf-8")
        except OSError as e:
            self.statusBar().showMessage(f"Could not export: {e}", 15000)
            return
        self.statusBar().showMessage(f"Exported to {path}", 8000)

    def import_chat(self) -> None:
        dlg = QFileDialog(self, "Import a chat", str(Path.home()), "Strata chat (*.json)")
        dlg.setObjectName("importChatDialog")
        dlg.setFileMode(QFileDialog.ExistingFile)
        dlg.setOption(QFileDialog.DontUseNativeDialog)
        dlg.fileSelected.connect(self.import_file)
        self._open_dialog(dlg)

    def import_file(self, path: str) -> Conversation | None:
        try:
            conv = import_json(self.history, json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError) as e:          # (json's errors are ValueErrors)
            self.statusBar().showMessage(f"Could not import {Path(path).name}: {e}", 15000)
            return None
        self.conversations.reload()
        self.select_conversation(conv.id)
        return conv

    def _reload_current(self) -> None:
        if self.conversation is not None:
            self.conversation = self.history.get(self.conversation.id)

    def _save_setting(self, **kw) -> None:
        if self.conversation is not None:
            self.conversation = self.history.update(self.conversation.id, **kw)

    def rename_current(self) -> None:
        """Ask for a new title (a window-modal dialog that does not block: `self.dialog` while it is open)."""
        if not self.conversation:
            return
        cid = self.conversation.id
        dlg = QInputDialog(self)
        dlg.setObjectName("renameChatDialog")
        dlg.setWindowTitle("Rename chat")
        dlg.setLabelText("Title:")
        dlg.setTextValue(self.conversation.title)
        dlg.textValueSelected.connect(lambda t: t.strip() and self.rename_conversation(cid, t))
        self._open_dialog(dlg)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.history.rename(conversation_id, title)
        self.conversations.reload()
        self.select_conversation(conversation_id)

    def delete_current(self) -> None:
        """Ask first (window-modal, not blocking); Yes deletes the chat."""
        if not self.conversation:
            return
        cid = self.conversation.id
        box = QMessageBox(QMessageBox.Question, "Delete chat", f"Delete “{self.conversation.title}”?",
                          QMessageBox.Yes | QMessageBox.No, self)
        box.setObjectName("deleteChatDialog")
        box.setDefaultButton(QMessageBox.No)
        box.accepted.connect(lambda: self.delete_conversation(cid))
        self._open_dialog(box)

    def _open_dialog(self, dlg) -> None:
        dlg.setAttribute(Qt.WA_DeleteOnClose)
        self.dialog = dlg
        dlg.finished.connect(lambda _r: setattr(self, "dialog", None))
        dlg.open()

    def delete_conversation(self, conversation_id: int) -> None:
        if self.conversation and self.conversation.id == conversation_id:
            self.stop()
            self.conversation = None
            self.transcript.clear()
        self.history.delete(conversation_id)
        self.conversations.reload()
        if self.conversations.items and self.conversation is None:
            self.select_conversation(self.conversations.items[0].id)
        self._update_first_run()
        self._update_buttons()

    # sending ---------------------------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.call is not None or self.preparing is not None or self.tool_loop is not None

    def send(self, text: str | None = None) -> None:
        text = (text if isinstance(text, str) else self.input.toPlainText()).strip()
        files = list(self.attachment_bar.items)
        if (not text and not files) or self.busy:
            return
        self._pending_images = [a for a in files if a.image]     # sent as images, with whatever the text becomes
        files = [a for a in files if not a.image]
        if files:
            self._send_with_files(text, files)
        else:
            self.attachment_bar.clear()
            self._send_text(text)

    # attachments -----------------------------------------------------------------------------------------------
    def attach_dialog(self) -> None:
        dlg = QFileDialog(self, "Attach text, code or image files", str(Path.home()))
        dlg.setObjectName("attachDialog")
        dlg.setFileMode(QFileDialog.ExistingFiles)
        dlg.setOption(QFileDialog.DontUseNativeDialog)
        dlg.filesSelected.connect(self.attach_files)
        self._open_dialog(dlg)

    def attach_files(self, paths: list[str]) -> None:
        """Read each file (in the GUI thread: at most 4 MiB each); one that is not text is named in the status
        bar and left out."""
        refused = []
        for path in paths:
            try:
                self.attachment_bar.add(read_attachment(path))
            except ValueError as e:
                refused.append(str(e))
        if refused:
            self.statusBar().showMessage("Not attached: " + "; ".join(refused), 15000)
        self.input.setFocus()

    def attach_image(self, image) -> None:
        """Image data pasted in the message box (a screenshot): attached as a PNG."""
        if image is not None and not image.isNull():
            n = sum(1 for a in self.attachment_bar.items if a.name.startswith("pasted-"))
            self.attachment_bar.add(pasted_image(image, n + 1))
        self.input.setFocus()

    def dragEnterEvent(self, e) -> None:
        if local_files(e.mimeData()):
            e.acceptProposedAction()

    def dropEvent(self, e) -> None:
        files = local_files(e.mimeData())
        if files:
            e.acceptProposedAction()
            self.attach_files(files)

    def _send_with_files(self, text: str, files: list) -> None:
        """Count the chat and each file with the model's tokenizer (through the API, off the GUI thread), cut
        what does not fit the context left after the chat and the reply's reserve, then send."""
        model = self.selected_model()
        if not model:
            self._send_text(message_with(text, fit(files, [0] * len(files), 0)))
            return
        if self.conversation is None:
            self.new_chat()
        body = self.request_body()
        turns = [m for m in body["messages"] if m["role"] in ("user", "assistant") and m["content"]]
        turns.append({"role": "user", "content": text or "(files)"})
        system = self.conversation.system
        num_ctx = self.conversation.num_ctx

        async def count(c):
            base = await c.count_tokens(model, turns, system)
            each = [await c.count_tokens(model, [{"role": "user", "content": a.text or " "}]) for a in files]
            return base, each, num_ctx if num_ctx != AUTO_CTX else await c.context_length(model)

        self.preparing = self.bridge.call(count)
        self.preparing.finished.connect(lambda r: self._files_counted(text, files, *r))
        self.preparing.failed.connect(lambda err: (setattr(self, "preparing", None), self._show_error(err),
                                                  self._update_buttons()))
        self.preparing.cancelled.connect(lambda: (setattr(self, "preparing", None), self._update_buttons()))
        self.statusBar().showMessage("Counting the attached files' tokens…")
        self._update_buttons()

    def _files_counted(self, text: str, files: list, base: int, each: list[int], num_ctx: int) -> None:
        """`num_ctx`: the chat's own context, or (auto) the one the service gives the model now."""
        self.preparing = None
        opts = {**self.conversation.options, **self.extra_options}
        reserve = int(opts.get("num_predict") or 0) if int(opts.get("num_predict") or 0) > 0 \
            else min(1024, num_ctx // 4)
        fitted = fit(files, each, num_ctx - base - reserve)
        self.attachment_bar.clear()
        cut = [f.attachment.name for f in fitted if f.note]
        if cut:
            self.statusBar().showMessage(f"Cut to fit the context: {', '.join(cut)}", 15000)
        self._send_text(message_with(text, fitted))

    def _send_text(self, text: str) -> None:
        self.tool_rounds = 0
        images, self._pending_images = images_block(self._pending_images), []
        blocks = {"images": images} if images else None        # saved with the conversation, sent each turn
        if self.conversation is None:
            self.new_chat()
        if self.conversation.title == DEFAULT_TITLE:
            self.conversation = self.history.rename(self.conversation.id, self.history.title_from(text or "Image"))
            self.conversations.reload()
            self.select_conversation(self.conversation.id)
        msg = self.history.add_message(self.conversation.id, "user", text, blocks=blocks)
        self.transcript.add("user", text, message_id=msg.id, blocks=blocks)
        self.first_run.setVisible(False)
        self.input.clear()
        self._start_reply()

    def request_body(self) -> dict:
        conv = self.conversation
        messages = []
        if conv.system.strip():
            messages.append({"role": "system", "content": conv.system})
        for m in self.history.messages(conv.id):
            if m.role in ("user", "assistant", "tool"):
                msg = {"role": m.role, "content": m.content}
                if m.blocks.get("tool_calls"):
                    msg["tool_calls"] = m.blocks["tool_calls"]
                if m.role == "tool" and m.blocks.get("tool_name"):
                    msg["tool_name"] = m.blocks["tool_name"]
                if m.blocks.get("images"):
                    msg["images"] = m.blocks["images"]
                messages.append(msg)
        body = {"model": self.selected_model(), "messages": messages,
                "options": {"temperature": conv.temperature, **conv.options, **self.extra_options}}
        if conv.num_ctx != AUTO_CTX:            # auto: the service picks (and grows) the context
            body["options"] = {"num_ctx": conv.num_ctx, **body["options"]}
        # logprobs always: one entry per generated token, so a reply the user stopped (no final totals arrive)
        # still counts its real tokens; the alternatives themselves only when asked for
        body["logprobs"] = True
        if self.alternatives.isChecked():
            body["top_logprobs"] = TOP_LOGPROBS
        return body

    def _start_reply(self, continuing=None) -> None:
        """Ask for a reply to the branch shown; `continuing` (a saved reply cut at its length limit, the last
        message shown) is extended instead of a new reply being added."""
        model = self.selected_model()
        if not model:
            self._show_error("No model to answer with: add one (Models → Manage models: import a .gguf or pull "
                             "one) and pick it above.")
            return
        names = self.conversation.tools
        missing = self.tools.missing(names)
        if missing:                  # list their tools first (once per session), then ask
            self.preparing = self.tools.prepare(missing, lambda: (setattr(self, "preparing", None),
                                                                  self._start_reply(continuing)))
            self.preparing.cancelled.connect(lambda: (setattr(self, "preparing", None), self._update_buttons()))
            self._update_buttons()
            return
        body = self.request_body()
        if self.tools.api_tools(names):
            body["tools"] = self.tools.api_tools(names)
        leaf = self.history.conversation_leaf(self.conversation.id)
        if continuing is not None:
            # The service renders every assistant message as a finished turn, so the model is asked to go on
            # (this request's extra message is not saved); its words are appended to the cut reply.
            body["messages"].append({"role": "user", "content": CONTINUE_PROMPT})
            widget = next(w for w in self.transcript.messages if w.message_id == continuing.id)
            self.pending = PendingReply(self.conversation.id, model, widget, parent_id=continuing.parent_id,
                                        continues=continuing.id, prefix=continuing.content,
                                        keep_logprobs=self.alternatives.isChecked())
        else:
            self.pending = PendingReply(self.conversation.id, model, self.transcript.add("assistant", ""),
                                        parent_id=leaf, keep_logprobs=self.alternatives.isChecked())
        self.call = self.bridge.stream(lambda c: c.chat_stream(body))
        self.call.item.connect(self._on_chunk)
        self.call.finished.connect(lambda _r: self._end_reply(stopped=False))
        self.call.cancelled.connect(lambda: self._end_reply(stopped=True))
        self.call.failed.connect(self._on_failed)
        self._update_buttons()

    def _on_chunk(self, obj: dict) -> None:
        p = self.pending
        if p is None:
            return
        grew = p.add(obj)
        if p.widget in self.transcript.messages:          # (not after a chat switch)
            if grew:
                self.transcript.stream_text(p.widget, p.text)
            p.widget.show_streaming_blocks(p.thinking, p.tool_calls)

    def _end_reply(self, stopped: bool) -> None:
        pending, self.pending = self.pending, None
        self.call = None
        if pending is not None:
            self._save_reply(pending, stopped)
            if not stopped and pending.tool_calls and self.conversation is not None \
                    and self.conversation.id == pending.conversation_id and self.conversation.tools:
                self._answer_tool_calls(list(pending.tool_calls))
        self._update_buttons()

    # MCP tool calls ----------------------------------------------------------------------------------------------
    def _fill_tools_menu(self) -> None:
        """One checkable entry per configured MCP server; checked = this chat offers its tools."""
        self.tools_menu.clear()
        servers = self.tools.servers()
        if not servers:
            self.tools_menu.addAction("(no MCP servers: add them in Settings)").setEnabled(False)
        on = set(self.conversation.tools if self.conversation else [])
        for name in servers:
            a = self.tools_menu.addAction(name)
            a.setObjectName(f"tool:{name}")
            a.setCheckable(True)
            a.setChecked(name in on)
            a.toggled.connect(lambda checked, n=name: self.set_chat_tool(n, checked))

    def set_chat_tool(self, server: str, on: bool) -> None:
        if self.conversation is None:
            self.new_chat()
        names = [n for n in self.conversation.tools if n != server] + ([server] if on else [])
        self.tools.tools.pop(server, None)          # listed again when next used (it may have been fixed)
        self._save_setting(tools=names)
        self.tools_button.setText(f"Tools ({len(names)})" if names else "Tools")

    def _answer_tool_calls(self, calls: list[dict]) -> None:
        """Each call: ask the user, run it, save its result as a tool message; then ask the model again."""
        cid, names = self.conversation.id, list(self.conversation.tools)
        if self.tool_rounds >= MAX_ROUNDS:
            self._show_error(f"Stopped after {MAX_ROUNDS} rounds of tool calls without an answer.")
            return
        self.tool_rounds += 1
        self.tool_loop = cid

        def still_here() -> bool:
            return self.tool_loop == cid and self.conversation is not None and self.conversation.id == cid

        def result(name: str, text: str, is_error: bool) -> None:
            self.preparing = None
            if not still_here():
                return
            blocks = {"tool_name": name, "is_error": is_error}
            msg = self.history.add_message(cid, "tool", text, blocks=blocks)
            self.transcript.add("tool", text, message_id=msg.id, blocks=blocks)
            next_call()

        def next_call() -> None:
            if not still_here():
                return
            if not calls:
                self.tool_loop = None
                self._start_reply()
                return
            call = calls.pop(0)
            name = (call.get("function") or {}).get("name", "")
            args = call_arguments(call)
            tool = self.tools.find(names, name)
            if tool is None:
                result(name, f"There is no tool named {name!r}.", True)
                return

            def answered(allowed: bool) -> None:
                if not still_here():
                    return
                if not allowed:
                    result(name, "The user denied this tool call.", True)
                    return
                self.preparing = self.tools.run(tool, args, lambda text, err: result(name, text, err))
                self._update_buttons()

            self.tools.ask(self, tool, args, answered)

        self._update_buttons()
        next_call()

    def _save_reply(self, p: PendingReply, stopped: bool) -> None:
        """Save what arrived to the chat it belongs to. The user may have switched chats meanwhile (the widget
        is gone: save only) or deleted that chat (nothing to save to)."""
        shown = p.widget in self.transcript.messages
        if shown:
            self.transcript.flush()
        stats = p.stats(stopped)
        blocks = p.blocks()
        if not p.text and not blocks:
            if shown and p.continues is None:
                self.transcript.remove(p.widget)    # nothing arrived: no empty bubble
            return
        try:
            self.history.get(p.conversation_id)
        except KeyError:
            return
        if p.continues is not None:
            old = self.history.message(p.continues)
            msg = self.history.update_message(p.continues, p.text, stats, old.logprobs + p.logprobs, blocks)
        else:
            msg = self.history.add_message(p.conversation_id, "assistant", p.text, stats, p.logprobs, blocks,
                                           parent_id=p.parent_id)
        if shown:
            p.widget.message_id = msg.id
            siblings = self.history.siblings(msg.id)
            p.widget.set_branch(siblings.index(msg.id), len(siblings))
            p.widget.set_content(p.text)
            p.widget.set_thinking(blocks.get("thinking", ""), blocks.get("thinking_tokens", 0))
            p.widget.set_logprobs(p.logprobs)
            p.widget.set_stats(stats)
        self.statusBar().showMessage(format_stats(stats), 8000)

    def _on_failed(self, error: str) -> None:
        pending, self.pending = self.pending, None
        self.call = None
        if pending is not None:
            self._save_reply(pending, stopped=True)   # keep whatever arrived before the error
        self._show_error(error)
        self._update_buttons()

    def _show_error(self, error: str) -> None:
        cid = self.conversation.id if self.conversation else None
        mid = self.history.add_message(cid, "error", error).id if cid else None
        self.transcript.add("error", error, message_id=mid)

    def stop(self) -> None:
        if self.tool_loop is not None:          # tool calls being answered: no more of them, no new reply
            self.tool_loop = None
            if self.dialog is not None:
                self.dialog.close()
            self._update_buttons()
        for call in (self.preparing, self.call):
            if call is not None:
                call.cancel()

    def abandon_reply(self) -> None:
        """At quit: save what has arrived now (the bridge will not deliver the cancellation any more)."""
        if self.call is not None:
            call = self.call
            self._end_reply(stopped=True)
            call.cancel()

    def regenerate(self) -> None:
        """Ask again for a reply to the last user message; the old reply stays as a branch (‹ 1/2 ›)."""
        if self.busy or not self.conversation:
            return
        msgs = self.history.messages(self.conversation.id)
        users = [m for m in msgs if m.role == "user"]
        if not users:
            return
        self.history.set_leaf(self.conversation.id, users[-1].id)
        self._show_messages()
        self._start_reply()

    def _update_buttons(self) -> None:
        self.send_button.setEnabled(not self.busy)
        self.stop_button.setEnabled(self.busy)
        self.regen_button.setEnabled(not self.busy and bool(self.conversation))
        self.rename_button.setEnabled(bool(self.conversation))
        self.delete_button.setEnabled(bool(self.conversation))
        for m in self.transcript.messages:
            m.set_tools_enabled(not self.busy)
        # a disabled action leaves its key alone: Esc still cancels an edit or a popup while nothing streams
        for action, button in ((self.action_stop, self.stop_button), (self.action_regenerate, self.regen_button),
                               (self.action_rename, self.rename_button), (self.action_delete, self.delete_button)):
            action.setEnabled(button.isEnabled())

"""The chat window: conversation list, model picker, per-chat settings, streaming transcript, Stop/Regenerate.

Layout, menus, the conversations list and the widgets; the reply flow (send, count, stream, tool calls, save) is
its `ChatSession` (chat_session.py), which reaches the window through the `ChatHost` methods below.
Chats and their settings live in SQLite (`ChatHistory`).
Covered by tests/gui/test_gui_e2e.py and the other tests/gui/test_gui_chat_*.py.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QComboBox, QDoubleSpinBox, QHBoxLayout, QLabel,
                               QLineEdit, QListView, QMainWindow, QMenu, QPlainTextEdit, QPushButton, QSplitter,
                               QToolButton, QVBoxLayout, QWidget)

from app.gui.chat import chat_dialogs
from app.gui.chat.attachments import AttachmentBar, local_files
from app.gui.chat.chat_lists import ConversationListModel, IdRole, ModelListModel, NameRole
from app.gui.chat.chat_options import ChatOptions, ContextBox
from app.gui.chat.chat_session import ChatSession
from app.gui.chat.chat_view import FirstRunHint, MessageInput, Transcript
from app.gui.chat.history import DEFAULT_TITLE, ChatHistory, Conversation
from app.gui.common.app_actions import AppActions, make_action, tip
from app.gui.common.state import ServiceState


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
        self.session = ChatSession(self, self.bridge, history, self)     # the reply flow
        self.session.busy_changed.connect(self._update_buttons)
        self.session.dialog_requested.connect(self.open_dialog)
        self.dialog = None                # the question or prompt open over this window, if any
        self.setWindowTitle("Strata — Chat")
        self.resize(1100, 720)
        self._build()
        self._build_menus()
        state.models_changed.connect(self.on_models)
        state.load_progress.connect(lambda *_: self._update_model_status())
        state.system_known.connect(lambda _name: self._show_model_system())
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
        self.tools_menu.aboutToShow.connect(lambda: self.session.tools.fill_menu(
            self.tools_menu, self.conversation.tools if self.conversation else [], self.set_chat_tool))
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
        """First run (the built-in model is all there is) and this chat empty: say where models come from."""
        self.first_run.setVisible(self.state.only_builtin() and not self.transcript.messages)

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
        system = self.state.model_system(name) if name else ""
        if system is None:                    # asked: shown when it comes (system_known)
            return
        self.system_prompt.setPlaceholderText(
            f"System prompt for this chat (empty: the model's default, “{system.strip()}”)" if system.strip()
            else "System prompt for this chat (optional)")
        self.system_prompt.setToolTip(f"The model's default system prompt:\n{system}" if system.strip() else "")

    def _update_model_status(self) -> None:
        self.model_status.setText(self.state.model_status(self.selected_model()))

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
        self.show_messages()
        self._update_model_status()
        self._update_first_run()
        self._update_buttons()

    def show_messages(self) -> None:
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
            if not (self.session.pending is not None and m is self.session.pending.widget):
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
                self.show_messages()
        elif what == "delete":
            self.history.delete_message(mid)
            self.show_messages()
        elif what == "edit":
            self.edit_message(mid)
        elif what == "continue":
            self.session.continue_reply(mid)

    def edit_message(self, message_id: int) -> None:
        """Ask for the new text; sending it adds the edited message as a new branch beside the old one and asks
        for a reply."""
        self.open_dialog(chat_dialogs.edit_message_dialog(
            self, self.history.message(message_id).content, lambda t: self.session.resend_edited(message_id, t)))

    def _focus_search(self) -> None:
        self.search_box.setFocus()
        self.search_box.selectAll()

    # files -----------------------------------------------------------------------------------------------------
    def export_chat(self, kind: str) -> None:
        """Save the chat shown (its branch shown) as Markdown or JSON, to a file chosen in a dialog."""
        if self.conversation:
            cid = self.conversation.id
            self.open_dialog(chat_dialogs.export_dialog(self, self.conversation.title, kind,
                                                        lambda path: self._write_export(cid, kind, path)))

    def _write_export(self, conversation_id: int, kind: str, path: str) -> None:
        try:
            chat_dialogs.write_export(self.history, conversation_id, kind, path)
        except OSError as e:
            self.statusBar().showMessage(f"Could not export: {e}", 15000)
            return
        self.statusBar().showMessage(f"Exported to {path}", 8000)

    def import_chat(self) -> None:
        self.open_dialog(chat_dialogs.import_dialog(self, self.import_file))

    def import_file(self, path: str) -> Conversation | None:
        try:
            conv = chat_dialogs.read_import(self.history, path)
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
        if self.conversation:
            cid = self.conversation.id
            self.open_dialog(chat_dialogs.rename_dialog(self, self.conversation.title,
                                                        lambda t: self.rename_conversation(cid, t)))

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.history.rename(conversation_id, title)
        self.conversations.reload()
        self.select_conversation(conversation_id)

    def delete_current(self) -> None:
        """Ask first (window-modal, not blocking); Yes deletes the chat."""
        if self.conversation:
            cid = self.conversation.id
            self.open_dialog(chat_dialogs.delete_question(self, self.conversation.title,
                                                          lambda: self.delete_conversation(cid)))

    def open_dialog(self, dlg) -> None:
        dlg.setAttribute(Qt.WA_DeleteOnClose)
        self.dialog = dlg
        # only this dialog's own end clears it: answering a question can open the next one (a reply's second tool
        # call) before the first has finished closing
        dlg.finished.connect(lambda _r: self.dialog is dlg and setattr(self, "dialog", None))
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

    # the reply flow is the session's (chat_session.py); these reach it for the menus, buttons and tests ----------
    @property
    def busy(self) -> bool:
        return self.session.busy

    @property
    def pending(self):
        return self.session.pending

    @property
    def call(self):
        return self.session.call

    @property
    def tool_loop(self) -> int | None:
        return self.session.tool_loop

    @property
    def extra_options(self) -> dict:
        return self.session.extra_options

    @extra_options.setter
    def extra_options(self, options: dict) -> None:
        self.session.extra_options = options

    def request_body(self) -> dict:
        return self.session.request_body()

    def send(self, text: str | None = None) -> None:
        text = (text if isinstance(text, str) else self.input.toPlainText()).strip()
        self.session.send(text, list(self.attachment_bar.items))

    def stop(self) -> None:
        self.session.stop()

    def regenerate(self) -> None:
        self.session.regenerate()

    # ChatHost: what the session asks of the window -----------------------------------------------------------------
    def wants_alternatives(self) -> bool:
        return self.alternatives.isChecked()

    def name_chat(self, text: str) -> None:
        if self.conversation is not None and self.conversation.title == DEFAULT_TITLE:
            self.conversation = self.history.rename(self.conversation.id, self.history.title_from(text))
            self.conversations.reload()
            self.select_conversation(self.conversation.id)

    def message_sent(self) -> None:
        self.first_run.setVisible(False)
        self.input.clear()

    def clear_attachments(self) -> None:
        self.attachment_bar.clear()

    def show_status(self, text: str, ms: int = 0) -> None:
        self.statusBar().showMessage(text, ms)

    def close_dialog(self) -> None:
        if self.dialog is not None:
            self.dialog.close()

    # attachments -----------------------------------------------------------------------------------------------
    def attach_dialog(self) -> None:
        self.open_dialog(chat_dialogs.attach_dialog(self, self.attach_files))

    def attach_files(self, paths: list[str]) -> None:
        """Attach each file; one that is not text or an image is named in the status bar and left out."""
        refused = self.attachment_bar.add_files(paths)
        if refused:
            self.statusBar().showMessage("Not attached: " + "; ".join(refused), 15000)
        self.input.setFocus()

    def attach_image(self, image) -> None:
        self.attachment_bar.add_pasted(image)
        self.input.setFocus()

    def dragEnterEvent(self, e) -> None:
        if local_files(e.mimeData()):
            e.acceptProposedAction()

    def dropEvent(self, e) -> None:
        files = local_files(e.mimeData())
        if files:
            e.acceptProposedAction()
            self.attach_files(files)

    # the Tools menu ----------------------------------------------------------------------------------------------
    def set_chat_tool(self, server: str, on: bool) -> None:
        if self.conversation is None:
            self.new_chat()
        names = [n for n in self.conversation.tools if n != server] + ([server] if on else [])
        self.session.tools.tools.pop(server, None)          # listed again when next used (it may have been fixed)
        self._save_setting(tools=names)
        self.tools_button.setText(f"Tools ({len(names)})" if names else "Tools")

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

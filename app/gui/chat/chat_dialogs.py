"""The chat window's dialogs, built and handed back unopened (the window opens each window-modal, not blocking,
and holds it as `dialog` while it is open): rename and delete a chat, edit a message, export, import, attach
files; and the files export writes and import reads (their formats: chat_export.py).
Covered by tests/gui/test_gui_chat_messages.py and tests/gui/test_gui_attachments.py.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

from app.gui.chat.chat_export import import_json, to_json, to_markdown
from app.gui.chat.history import ChatHistory, Conversation


def safe_file_name(title: str) -> str:
    """A chat title as a file name: letters, digits, spaces, dashes and dots kept."""
    return re.sub(r"[^\w .-]+", "_", title).strip(" .")[:80] or "chat"


def edit_message_dialog(parent, text: str, send) -> QInputDialog:
    """`send(new_text)` when the user sends the edited message."""
    dlg = QInputDialog(parent)
    dlg.setObjectName("editMessageDialog")
    dlg.setWindowTitle("Edit message")
    dlg.setLabelText("Your message (the old version and its reply stay as a branch):")
    dlg.setOption(QInputDialog.UsePlainTextEditForTextInput)
    dlg.setTextValue(text)
    dlg.setOkButtonText("Send")
    dlg.textValueSelected.connect(lambda t: t.strip() and send(t.strip()))
    return dlg


def rename_dialog(parent, title: str, rename) -> QInputDialog:
    """`rename(new_title)` when the user accepts a title that is not blank."""
    dlg = QInputDialog(parent)
    dlg.setObjectName("renameChatDialog")
    dlg.setWindowTitle("Rename chat")
    dlg.setLabelText("Title:")
    dlg.setTextValue(title)
    dlg.textValueSelected.connect(lambda t: t.strip() and rename(t))
    return dlg


def delete_question(parent, title: str, delete) -> QMessageBox:
    """`delete()` on Yes."""
    box = QMessageBox(QMessageBox.Question, "Delete chat", f"Delete “{title}”?",
                      QMessageBox.Yes | QMessageBox.No, parent)
    box.setObjectName("deleteChatDialog")
    box.setDefaultButton(QMessageBox.No)
    box.accepted.connect(delete)
    return box


def export_dialog(parent, title: str, kind: str, chosen) -> QFileDialog:
    """Where to save a chat as Markdown (`kind` "md") or JSON; `chosen(path)`."""
    dlg = QFileDialog(parent, "Export chat", str(Path.home() / f"{safe_file_name(title)}.{kind}"),
                      "Markdown (*.md)" if kind == "md" else "JSON (*.json)")
    dlg.setObjectName("exportDialog")
    dlg.setAcceptMode(QFileDialog.AcceptSave)
    dlg.setOption(QFileDialog.DontUseNativeDialog)        # window-modal, not blocking, the same everywhere
    dlg.fileSelected.connect(chosen)
    return dlg


def import_dialog(parent, chosen) -> QFileDialog:
    dlg = QFileDialog(parent, "Import a chat", str(Path.home()), "Strata chat (*.json)")
    dlg.setObjectName("importChatDialog")
    dlg.setFileMode(QFileDialog.ExistingFile)
    dlg.setOption(QFileDialog.DontUseNativeDialog)
    dlg.fileSelected.connect(chosen)
    return dlg


def attach_dialog(parent, chosen) -> QFileDialog:
    """`chosen(paths)`."""
    dlg = QFileDialog(parent, "Attach text, code or image files", str(Path.home()))
    dlg.setObjectName("attachDialog")
    dlg.setFileMode(QFileDialog.ExistingFiles)
    dlg.setOption(QFileDialog.DontUseNativeDialog)
    dlg.filesSelected.connect(chosen)
    return dlg


def write_export(history: ChatHistory, conversation_id: int, kind: str, path: str) -> None:
    """The chat's branch shown, as Markdown or JSON, written to `path` (OSError when it cannot be)."""
    conv, msgs = history.get(conversation_id), history.messages(conversation_id)
    text = to_markdown(conv, msgs) if kind == "md" else json.dumps(to_json(conv, msgs), indent=2,
                                                                     ensure_ascii=False)
    Path(path).write_text(text, encoding="utf-8")


def read_import(history: ChatHistory, path: str) -> Conversation:
    """The chat exported as JSON at `path`, added to the history (OSError or ValueError when it cannot be)."""
    return import_json(history, json.loads(Path(path).read_text(encoding="utf-8")))

"""The chat window's own buttons and fields, used as a person does (typing, Enter, clicks, dialogs answered),
against the real service and SmolLM2; and the first-run hint that says where models come from."""
from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QAbstractItemView, QFileDialog, QMessageBox

from gui_util import (SHORT, WAIT, answer_box, answer_text, chat_service, click, dialog_of, double_click,
                      open_desk, type_into)


@pytest.fixture(scope="module")
def service(live_service, smollm2_path):
    return chat_service(live_service)


@pytest.fixture
def desk(qtbot, service):
    d = open_desk(qtbot, service.url, num_predict=8)
    yield d
    d.shutdown()


def replies(chat):
    return [m for m in chat.transcript.messages if m.role in ("assistant", "error")]


def type_message(qtbot, chat, text: str, enter: bool = True) -> None:
    chat.input.setFocus()
    QTest.keyClicks(chat.input, text)
    if enter:
        QTest.keyClick(chat.input, Qt.Key_Return)
    else:
        click(qtbot, chat.send_button)


def test_enter_send_regenerate_and_token_view(qtbot, desk):
    chat = desk.chat
    type_message(qtbot, chat, "Name two fruits.")
    assert chat.busy and not chat.send_button.isEnabled() and chat.stop_button.isEnabled()
    assert chat.input.toPlainText() == ""
    qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)
    [reply] = replies(chat)
    assert reply.role == "assistant" and reply.content.strip()
    # Shift+Enter is a new line, not a send
    chat.input.setFocus()
    QTest.keyClicks(chat.input, "line one")
    QTest.keyClick(chat.input, Qt.Key_Return, Qt.ShiftModifier)
    QTest.keyClicks(chat.input, "line two")
    assert not chat.busy and chat.input.toPlainText() == "line one\nline two"
    click(qtbot, chat.send_button)
    qtbot.waitUntil(lambda: not chat.busy and len(replies(chat)) == 2, timeout=WAIT)
    assert [m.role for m in chat.transcript.messages] == ["user", "assistant", "user", "assistant"]
    # Regenerate replaces the last reply
    first_id = replies(chat)[-1].message_id
    click(qtbot, chat.regen_button)
    qtbot.waitUntil(lambda: not chat.busy and replies(chat) and replies(chat)[-1].message_id != first_id,
                    timeout=WAIT)
    assert [m.role for m in desk.history.messages(chat.conversation.id)] == ["user", "assistant"] * 2
    # the Tokens button shows the reply token by token (alternatives on hover)
    last = replies(chat)[-1]
    assert last.logprobs
    click(qtbot, last.tokens_button)
    assert last.body.toPlainText() == last.content and len(last.body.token_offsets) == len(last.logprobs)
    # Token alternatives off: the next reply comes without them
    click(qtbot, chat.alternatives)
    assert not chat.alternatives.isChecked()
    type_message(qtbot, chat, "Thanks.")
    qtbot.waitUntil(lambda: not chat.busy and len(replies(chat)) == 3, timeout=WAIT)
    assert replies(chat)[-1].logprobs == [] and not replies(chat)[-1].tokens_button.isVisible()


def test_chat_settings_fields_are_kept_with_the_chat(qtbot, desk):
    chat = desk.chat
    click(qtbot, chat.new_button)
    cid = chat.conversation.id
    chat.system_prompt.setFocus()
    QTest.keyClicks(chat.system_prompt, "Answer in French.")
    type_into(chat.temperature, "0.3")
    type_into(chat.num_ctx, "1024")
    QTest.keyClick(chat.num_ctx, Qt.Key_Tab)
    conv = desk.history.get(cid)
    assert (conv.system, conv.temperature, conv.num_ctx) == ("Answer in French.", pytest.approx(0.3), 1024)
    body = chat.request_body()
    assert body["messages"][0] == {"role": "system", "content": "Answer in French."}


def loaded_context(desk) -> dict:
    """The built-in model's context as the service reports it (/api/ps, polled by the app), once loaded."""
    from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME
    m = next((m for m in desk.state.ps if m["name"] == DEFAULT_MODEL_NAME), None)
    return dict((m.get("strata") or {}).get("context") or {}, context_length=m["context_length"]) if m else {}


def test_context_is_auto_until_the_user_sets_one(qtbot, desk):
    """A new chat's context box says "auto" and the chat sends no num_ctx, so the service picks the context (here
    its setting, 2048); a number typed in is sent; the arrow below the smallest context goes back to auto."""
    chat = desk.chat
    click(qtbot, chat.new_button)
    assert chat.num_ctx.text() == "auto" and desk.history.get(chat.conversation.id).num_ctx == 0
    # only what the user chose is sent: no num_ctx, and no seed (the seed box starts at "random", not 0)
    assert desk.history.get(chat.conversation.id).options == {} and chat.options.seed.text() == "random"
    assert "num_ctx" not in chat.request_body()["options"]
    type_message(qtbot, chat, "Hi.")
    qtbot.waitUntil(lambda: not chat.busy and bool(loaded_context(desk).get("limit")), timeout=WAIT)
    assert replies(chat)[-1].role == "assistant", replies(chat)[-1].content
    ctx = loaded_context(desk)
    assert ctx["limit"] != "request" and ctx["num_ctx"] == ctx["context_length"] == 2048, ctx
    type_into(chat.num_ctx, "5")                 # on the way to a number: no context of 5
    assert desk.history.get(chat.conversation.id).num_ctx == 0 and chat.num_ctx.value() == 0
    type_into(chat.num_ctx, "1280")
    QTest.keyClick(chat.num_ctx, Qt.Key_Tab)
    assert desk.history.get(chat.conversation.id).num_ctx == 1280
    type_message(qtbot, chat, "Thanks.")
    qtbot.waitUntil(lambda: not chat.busy and loaded_context(desk).get("num_ctx") == 1280, timeout=WAIT)
    assert loaded_context(desk)["limit"] == "request" and replies(chat)[-1].role == "assistant"
    chat.num_ctx.setFocus()
    QTest.keyClick(chat.num_ctx, Qt.Key_Down)
    assert chat.num_ctx.value() == 256
    QTest.keyClick(chat.num_ctx, Qt.Key_Down)       # below the smallest context: auto
    assert chat.num_ctx.text() == "auto" and desk.history.get(chat.conversation.id).num_ctx == 0
    QTest.keyClick(chat.num_ctx, Qt.Key_Up)
    assert chat.num_ctx.value() == 1024 and desk.history.get(chat.conversation.id).num_ctx == 1024


def test_new_rename_and_delete_buttons_with_their_dialogs(qtbot, desk):
    chat = desk.chat
    click(qtbot, chat.new_button)
    click(qtbot, chat.new_button)
    assert len(desk.history.conversations()) == 2
    cid = chat.conversation.id
    click(qtbot, chat.rename_button)
    dlg = dialog_of(qtbot, chat, "renameChatDialog")
    assert dlg.textValue() == "New chat"
    answer_text(qtbot, dlg, "Holiday plans")
    assert desk.history.get(cid).title == "Holiday plans"
    assert chat.conversations.items[chat.conv_view.currentIndex().row()].title == "Holiday plans"
    # renamed in place in the list: by F2 on the selected title, and by a double-click on it
    for how, title in (("F2", "Trip"), ("double-click", "Trip to Rome")):
        if how == "F2":
            chat.conv_view.setFocus()
            QTest.keyClick(chat.conv_view, Qt.Key_F2)
        else:
            double_click(chat.conv_view, chat.conversations.index(chat.conversations.row_of(cid)))
        qtbot.waitUntil(lambda: chat.conv_view.state() == QAbstractItemView.State.EditingState, timeout=SHORT)
        editor = chat.conv_view.focusWidget()
        editor.selectAll()
        QTest.keyClicks(editor, title)
        QTest.keyClick(editor, Qt.Key_Return)
        qtbot.waitUntil(lambda: desk.history.get(cid).title == title, timeout=SHORT)
    # Delete asks; No keeps the chat, Yes deletes it
    click(qtbot, chat.delete_button)
    box = dialog_of(qtbot, chat, "deleteChatDialog")
    assert "Trip to Rome" in box.text()
    answer_box(qtbot, box, QMessageBox.No)
    assert len(desk.history.conversations()) == 2
    click(qtbot, chat.delete_button)
    answer_box(qtbot, dialog_of(qtbot, chat, "deleteChatDialog"), QMessageBox.Yes)
    qtbot.waitUntil(lambda: len(desk.history.conversations()) == 1, timeout=SHORT)
    assert cid not in [c.id for c in desk.history.conversations()]


def test_first_run_says_where_models_come_from(qtbot, desk, service, dense_gguf):
    """Only the built-in model: the empty chat shows the three ways to get more, each a button."""
    chat = desk.chat
    hint = chat.first_run
    qtbot.waitUntil(hint.isVisible, timeout=WAIT)
    assert "Ollama, LM Studio or the Hugging Face cache" in hint.findChild(type(chat.model_status)).text()
    click(qtbot, hint.buttons["import"])                      # the manager, with its file dialog open
    qtbot.waitUntil(lambda: desk.models is not None and desk.models.isVisible(), timeout=SHORT)
    dlg = dialog_of(qtbot, desk.models, "importDialog")
    assert isinstance(dlg, QFileDialog)
    dlg.reject()
    desk.models.hide()
    click(qtbot, hint.buttons["pull"])
    qtbot.waitUntil(lambda: desk.models.isVisible() and desk.models.pull_panel.name.hasFocus(), timeout=SHORT)
    click(qtbot, hint.buttons["settings"])
    qtbot.waitUntil(lambda: desk.settings is not None and desk.settings.isVisible(), timeout=SHORT)
    assert desk.settings.sources["ollama"].isVisible()
    desk.settings.reject()
    # a chat with messages does not show it
    type_message(qtbot, chat, "Hi")
    assert not hint.isVisible()
    qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)
    click(qtbot, chat.new_button)
    assert hint.isVisible()
    # once a model of one's own is there, it goes away
    from urllib.request import Request, urlopen

    urlopen(Request(service.url + "/api/import", data=f'{{"path": "{dense_gguf}", "stream": false}}'.encode(),
                    headers={"Content-Type": "application/json"}), timeout=120).close()
    qtbot.waitUntil(lambda: not hint.isVisible(), timeout=WAIT)

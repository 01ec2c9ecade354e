"""A message's own buttons, used as a person does, against the real service and SmolLM2: copy a message, copy a
code block (highlighted by Pygments), edit a sent message and switch between its branches (‹ 1/2 ›), ask again
(the old reply stays a branch), continue a reply cut at its length limit, delete a message."""
from __future__ import annotations

import json
import urllib.request

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QTextCursor, QTextDocument
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QDialogButtonBox, QFileDialog, QPlainTextEdit

from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME as MODEL
from gui_util import (SHORT, WAIT, chat_service, choose, click, click_menu, dialog_of, open_desk, open_menu_bar,
                      press, type_into)

CODE = "Here it is:\n\n```python\ndef add(a, b):\n    return a + b  # sum\n```\n\nAnd a shell line:\n\n```sh\nls -l\n```\n"


@pytest.fixture(scope="module")
def service(live_service, smollm2_path):
    return chat_service(live_service)


@pytest.fixture
def desk(qtbot, service):
    d = open_desk(qtbot, service.url, num_predict=6)
    yield d
    d.shutdown()


def shown(chat) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in chat.transcript.messages]


def saved(desk) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in desk.history.messages(desk.chat.conversation.id)]


def send(qtbot, chat, text: str) -> None:
    chat.send(text)
    qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)


def test_code_blocks_are_highlighted_and_copied(qtbot):
    from app.gui.chat.chat_view import MessageWidget

    m = MessageWidget("assistant", CODE)
    qtbot.addWidget(m)
    m.resize(600, 400)
    m.show()
    body = m.body
    assert [b.fence.language for b in body.copy_buttons] == ["python", "sh"]
    # the document's text is the Markdown's own (selecting and copying the message sees the code exactly)
    doc = QTextDocument()
    doc.setMarkdown(CODE)
    assert body.toPlainText() == doc.toPlainText()
    # Pygments colours: the keyword `def` and the comment differ from plain text and from each other
    text = body.toPlainText()

    def color_at(word: str):
        cur = QTextCursor(body.document())
        cur.setPosition(text.index(word) + 1)
        return cur.charFormat().foreground().color().name()

    plain = color_at("Here")
    assert color_at("def") != plain and color_at("# sum") != plain and color_at("def") != color_at("# sum")
    # each Copy button sits over its own block and copies exactly that code
    assert body.copy_buttons[0].isVisible() and body.copy_buttons[0].y() < body.copy_buttons[1].y()
    click(qtbot, body.copy_buttons[0])
    assert QGuiApplication.clipboard().text() == "def add(a, b):\n    return a + b  # sum"
    assert body.copy_buttons[0].text() == "Copied"
    click(qtbot, body.copy_buttons[1])
    assert QGuiApplication.clipboard().text() == "ls -l"
    # the message's Copy button copies the whole Markdown
    click(qtbot, m.tool_buttons["copy"])
    assert QGuiApplication.clipboard().text() == CODE


def test_edit_a_sent_message_keeps_the_old_branch(qtbot, desk):
    chat = desk.chat
    send(qtbot, chat, "Name a fruit.")
    first = shown(chat)
    assert [r for r, _ in first] == ["user", "assistant"]
    user = chat.transcript.messages[0]
    assert not user.tool_buttons["prev"].isVisible()          # one version: no ‹ 1/1 ›
    click(qtbot, user.tool_buttons["edit"])
    dlg = dialog_of(qtbot, chat, "editMessageDialog")
    edit = dlg.findChild(QPlainTextEdit)
    assert edit.toPlainText() == "Name a fruit."
    edit.selectAll()
    QTest.keyClicks(edit, "Name a colour.")
    click(qtbot, _ok(dlg))
    qtbot.waitUntil(lambda: not chat.busy and len(chat.transcript.messages) == 2, timeout=WAIT)
    assert chat.transcript.messages[0].content == "Name a colour."
    assert saved(desk) == shown(chat) and saved(desk)[0] == ("user", "Name a colour.")
    user = chat.transcript.messages[0]
    assert user.branch_label.isVisible() and user.branch_label.text() == "2/2"
    # ‹ shows the first version with its own reply; › comes back
    click(qtbot, user.tool_buttons["prev"])
    qtbot.waitUntil(lambda: shown(chat) == first, timeout=SHORT)
    assert chat.transcript.messages[0].branch_label.text() == "1/2"
    assert saved(desk) == first                                # what the next request would send
    click(qtbot, chat.transcript.messages[0].tool_buttons["next"])
    qtbot.waitUntil(lambda: chat.transcript.messages[0].content == "Name a colour.", timeout=SHORT)
    # reopening the app shows the branch that was shown
    cid = chat.conversation.id
    chat.select_conversation(cid)
    assert chat.transcript.messages[0].branch_label.text() == "2/2"


def _ok(dlg):
    return dlg.findChild(QDialogButtonBox).button(QDialogButtonBox.Ok)


def test_regenerate_keeps_the_old_reply_as_a_branch_and_delete_removes_one(qtbot, desk):
    chat = desk.chat
    send(qtbot, chat, "Say hello.")
    old = chat.transcript.messages[1]
    old_id = old.message_id
    click(qtbot, chat.regen_button)
    qtbot.waitUntil(lambda: not chat.busy and chat.transcript.messages[-1].message_id not in (None, old_id),
                    timeout=WAIT)
    reply = chat.transcript.messages[-1]
    assert reply.branch_label.text() == "2/2"
    click(qtbot, reply.tool_buttons["prev"])
    qtbot.waitUntil(lambda: chat.transcript.messages[-1].message_id == old_id, timeout=SHORT)
    # Delete the old reply: the other one is shown, with no branch switch left
    click(qtbot, chat.transcript.messages[-1].tool_buttons["delete"])
    qtbot.waitUntil(lambda: chat.transcript.messages[-1].message_id != old_id, timeout=SHORT)
    assert not chat.transcript.messages[-1].branch_label.isVisible()
    assert old_id not in [m.id for m in desk.history.messages(chat.conversation.id)]
    # deleting the user message leaves its reply in the chat
    click(qtbot, chat.transcript.messages[0].tool_buttons["delete"])
    qtbot.waitUntil(lambda: [r for r, _ in shown(chat)] == ["assistant"], timeout=SHORT)
    assert [r for r, _ in saved(desk)] == ["assistant"]


def test_continue_a_reply_cut_at_its_length_limit(qtbot, desk):
    chat = desk.chat
    chat.extra_options = {"num_predict": 5, "seed": 1}
    send(qtbot, chat, "Write a long poem about the sea.")
    reply = chat.transcript.messages[-1]
    assert reply.stats.get("done_reason") == "length", reply.stats
    assert reply.tool_buttons["continue"].isVisible() and "length limit" in reply.stats_label.text()
    before = reply.content
    click(qtbot, reply.tool_buttons["continue"])
    assert chat.busy
    qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)
    [(role, text)] = saved(desk)[1:]
    assert role == "assistant" and text.startswith(before) and len(text) > len(before)
    assert chat.transcript.messages[-1].content == text and len(chat.transcript.messages) == 2


# ---- search, files, options ------------------------------------------------------------------------------------

def test_search_finds_chats_by_title_and_by_any_message(qtbot, desk):
    chat = desk.chat
    h = desk.history
    a = h.create(title="Holiday")
    h.add_message(a.id, "user", "Where is the Matterhorn?")
    b = h.create(title="Code")
    h.add_message(b.id, "user", "A regex for 100% of emails")
    old = h.add_message(b.id, "assistant", "an old branch about glaciers")
    h.add_message(b.id, "assistant", "newer", parent_id=old.parent_id)      # glaciers only in a hidden branch
    chat.conversations.reload()
    press(qtbot, chat, Qt.Key_F, Qt.ControlModifier)
    qtbot.waitUntil(chat.search_box.hasFocus, timeout=SHORT)

    def titles():
        return [c.title for c in chat.conversations.items]

    for text, want in (("matterHORN", ["Holiday"]), ("glaciers", ["Code"]), ("100%", ["Code"]), ("%", ["Code"]),
                       ("holiday", ["Holiday"]), ("nothing like this", [])):
        chat.search_box.selectAll()
        QTest.keyClicks(chat.search_box, text)
        assert titles() == want, text
    chat.search_box.clear()
    assert set(titles()) == {"Holiday", "Code"}
    # a new chat while searching clears the search (it would be hidden)
    QTest.keyClicks(chat.search_box, "matterhorn")
    click(qtbot, chat.new_button)
    assert chat.search_box.text() == "" and chat.conversation.id == chat.conversations.items[0].id


def test_export_markdown_and_json_and_import_json(qtbot, desk, tmp_path):
    chat = desk.chat
    send(qtbot, chat, "Show me `print` in Python.")
    conv = chat.conversation
    for kind, name in (("md", "exportMarkdown"), ("json", "exportJson")):
        click_menu(qtbot, open_menu_bar(qtbot, chat, "chatMenu"), name)
        dlg = dialog_of(qtbot, chat, "exportDialog")
        assert isinstance(dlg, QFileDialog)
        dlg.selectFile(str(tmp_path / f"out.{kind}"))
        dlg.accept()
        qtbot.waitUntil((tmp_path / f"out.{kind}").is_file, timeout=SHORT)
    md = (tmp_path / "out.md").read_text()
    reply = desk.history.messages(conv.id)[1].content
    assert md.startswith(f"# {conv.title}\n") and "## You\n\nShow me `print` in Python." in md
    assert f"## Assistant\n\n{reply.rstrip()}" in md
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["format"] == "strata-chat" and [m["role"] for m in data["messages"]] == ["user", "assistant"]
    # import it back: a new chat with the same messages and settings, selected
    click_menu(qtbot, open_menu_bar(qtbot, chat, "chatMenu"), "importChat")
    dlg = dialog_of(qtbot, chat, "importChatDialog")
    dlg.selectFile(str(tmp_path / "out.json"))
    dlg.accept()
    qtbot.waitUntil(lambda: chat.conversation.id != conv.id, timeout=SHORT)
    assert saved(desk) == [("user", "Show me `print` in Python."), ("assistant", reply)]
    assert (chat.conversation.title, chat.conversation.num_ctx) == (conv.title, conv.num_ctx)
    # a malformed file is refused with the field named, and nothing is added
    bad = tmp_path / "bad.json"
    data["messages"][1]["role"] = "wizard"
    bad.write_text(json.dumps(data))
    n = len(desk.history.conversations())
    assert chat.import_file(str(bad)) is None
    assert "messages[1].role" in chat.statusBar().currentMessage()
    assert len(desk.history.conversations()) == n


def test_more_options_are_saved_with_the_chat_and_sent(qtbot, desk, service):
    chat = desk.chat
    chat.extra_options = {}
    click(qtbot, chat.new_button)
    cid = chat.conversation.id
    assert not chat.options.isVisible()
    click(qtbot, chat.more_button)
    assert chat.options.isVisible()
    type_into(chat.options.top_k, "20")
    type_into(chat.options.seed, "42")
    type_into(chat.options.repeat_penalty, "1.1")
    chat.options.stop.setFocus()
    QTest.keyClicks(chat.options.stop, "###|User:")
    QTest.keyClick(chat.options.stop, Qt.Key_Tab)
    want = {"top_k": 20, "seed": 42, "repeat_penalty": 1.1, "stop": ["###", "User:"]}
    assert desk.history.get(cid).options == want
    assert {k: chat.request_body()["options"][k] for k in want} == want
    assert "top_p" not in chat.request_body()["options"]            # "default": not sent
    # another chat has its own; coming back shows these again
    click(qtbot, chat.new_button)
    chat.options.set_values({})
    chat.select_conversation(cid)
    assert chat.options.values() == want
    # the model's default system prompt shows in the empty box
    body = json.dumps({"model": "with-system", "from": MODEL, "system": "You are a pirate."}).encode()
    urllib.request.urlopen(urllib.request.Request(service.url + "/api/create", data=body,
                                                  headers={"Content-Type": "application/json"}), timeout=120).read()
    desk.state.refresh()
    qtbot.waitUntil(lambda: chat.models.row_of("with-system:latest") >= 0, timeout=WAIT)
    choose(qtbot, chat.model_picker, chat.model_picker.itemText(chat.models.row_of("with-system:latest")))
    qtbot.waitUntil(lambda: "You are a pirate." in chat.system_prompt.placeholderText(), timeout=WAIT)




def test_the_theme_follows_the_system_light_or_dark(qtbot, desk):
    """A dark system scheme gives the dark style sheet and palette, and code blocks re-rendered in a dark
    Pygments style; back to light, the light ones."""
    from PySide6.QtWidgets import QApplication

    from app.gui.common.theme import palette_is_dark, style_sheet

    app = QApplication.instance()
    chat = desk.chat
    h = desk.history
    conv = h.create(title="Code")
    h.add_message(conv.id, "assistant", CODE)
    chat.conversations.reload()
    chat.select_conversation(conv.id)
    body = chat.transcript.messages[0].body

    def code_background() -> str:
        return body.document().findBlockByNumber(body.copy_buttons[0].fence.first_block).blockFormat() \
            .background().color().name()

    light = code_background()
    assert "QWidget" in style_sheet(dark=False) and "QWidget" in style_sheet(dark=True)   # the files were found
    try:
        desk.follow_system_theme(dark=True)
        assert app.styleSheet() == style_sheet(dark=True) and palette_is_dark()
        body = chat.transcript.messages[0].body
        assert code_background() != light and QColor(code_background()).lightness() < 100
    finally:
        desk.follow_system_theme(dark=False)
    assert app.styleSheet() == style_sheet(dark=False) and not palette_is_dark()
    body = chat.transcript.messages[0].body
    assert code_background() == light

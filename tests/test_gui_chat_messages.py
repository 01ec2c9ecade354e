"""A message's own buttons, used as a person does, against the real service and SmolLM2: copy a message, copy a
code block (highlighted by Pygments), edit a sent message and switch between its branches (‹ 1/2 ›), ask again
(the old reply stays a branch), continue a reply cut at its length limit, delete a message."""
from __future__ import annotations

import pytest
from PySide6.QtGui import QGuiApplication, QTextCursor
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QPlainTextEdit

from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME as MODEL
from gui_util import SHORT, WAIT, click, dialog_of
from service_util import store_factory

CODE = "Here it is:\n\n```python\ndef add(a, b):\n    return a + b  # sum\n```\n\nAnd a shell line:\n\n```sh\nls -l\n```\n"


@pytest.fixture(scope="module")
def service(tmp_path_factory, smollm2_path):
    from app.service.config import ServiceConfig
    from app.service.server import ServiceThread

    home = tmp_path_factory.mktemp("gui-messages")
    svc = ServiceThread(ServiceConfig(host="127.0.0.1", port=0, n_threads=2, num_parallel=1, num_ctx=2048,
                                      keep_alive="10m"), store_factory=store_factory(home))
    svc.start()
    yield svc
    svc.stop()


@pytest.fixture
def desk(qtbot, service):
    from app.gui.desktop import Desktop

    d = Desktop(service.url, use_tray=False, poll_ms=300)
    qtbot.addWidget(d.chat)
    d.open_chat()
    d.chat.extra_options = {"num_predict": 6, "seed": 5}
    qtbot.waitUntil(lambda: MODEL in d.state.installed_names(), timeout=WAIT)
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
    from app.gui.chat_view import MessageWidget

    m = MessageWidget("assistant", CODE)
    qtbot.addWidget(m)
    m.resize(600, 400)
    m.show()
    body = m.body
    assert [b.fence.language for b in body.copy_buttons] == ["python", "sh"]
    # the document's text is the Markdown's own (selecting and copying the message sees the code exactly)
    from PySide6.QtGui import QTextDocument

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
    from PySide6.QtWidgets import QDialogButtonBox

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

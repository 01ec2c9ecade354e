"""Text and code files attached to a message (button and file dialog, drop on the window, paste in the message
box), against the real service and SmolLM2: their text goes into the message with their names; files that do
not fit the context left are cut, counted with the model's tokenizer through the API, and the message says so."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QGuiApplication
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from gui_util import SHORT, WAIT, chat_service, click, dialog_of, open_desk


@pytest.fixture(scope="module")
def service(live_service, smollm2_path):
    return chat_service(live_service)


@pytest.fixture
def desk(qtbot, service):
    d = open_desk(qtbot, service.url, num_predict=4)
    yield d
    d.shutdown()


def names(chat) -> list[str]:
    return [a.name for a in chat.attachment_bar.items]


def files_mime(*paths) -> QMimeData:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    return mime


def drop_on(widget, mime) -> None:
    """What a drag from a file manager delivers: enter, then drop, at the widget's middle."""
    pos = widget.rect().center()
    enter = QDragEnterEvent(QPoint(pos), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    QApplication.sendEvent(widget, enter)
    assert enter.isAccepted()
    QApplication.sendEvent(widget, QDropEvent(QPointF(pos), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier))


def last_user(desk) -> str:
    return [m for m in desk.history.messages(desk.chat.conversation.id) if m.role == "user"][-1].content


def test_attach_by_button_drop_and_paste_then_send(qtbot, desk, tmp_path):
    chat = desk.chat
    code = tmp_path / "notes.py"
    code.write_text("def greet(name):\n    return f'hello {name}'\n")
    csv = tmp_path / "data.csv"
    csv.write_text("a,b\n1,2\n")
    readme = tmp_path / "README.md"
    readme.write_text("# Project\n")
    binary = tmp_path / "image.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0")
    click(qtbot, chat.attach_button)                                 # the button: a file dialog
    dlg = dialog_of(qtbot, chat, "attachDialog")
    dlg.selectFile(str(code))
    dlg.accept()
    qtbot.waitUntil(lambda: names(chat) == ["notes.py"], timeout=SHORT)
    assert chat.attachment_bar.isVisible()
    drop_on(chat.transcript, files_mime(csv, binary))                 # dropped on the window
    assert names(chat) == ["notes.py", "data.csv"]
    assert "image.png is not a text file" in chat.statusBar().currentMessage()
    QGuiApplication.clipboard().setMimeData(files_mime(readme))      # copied in a file manager, pasted
    chat.input.setFocus()
    QTest.keyClick(chat.input, Qt.Key_V, Qt.ControlModifier)
    assert names(chat) == ["notes.py", "data.csv", "README.md"] and chat.input.toPlainText() == ""
    # × removes one
    [x] = [b for b in chat.attachment_bar.findChildren(type(chat.more_button)) if b.toolTip() == "Remove data.csv"]
    click(qtbot, x)
    qtbot.waitUntil(lambda: names(chat) == ["notes.py", "README.md"], timeout=SHORT)
    QTest.keyClicks(chat.input, "What does this do?")
    QTest.keyClick(chat.input, Qt.Key_Return)
    qtbot.waitUntil(lambda: not chat.busy and chat.transcript.messages[-1].role != "user", timeout=WAIT)
    sent = last_user(desk)
    assert sent.startswith("What does this do?\n\n**notes.py**\n\n```\ndef greet(name):")
    assert "**README.md**\n\n```\n# Project\n\n```" in sent and "data.csv" not in sent and "cut" not in sent
    assert chat.transcript.messages[-1].role == "assistant" and names(chat) == []
    assert not chat.attachment_bar.isVisible()


def test_with_auto_context_a_big_file_is_cut_to_the_context_the_service_gives(qtbot, desk, tmp_path):
    """An auto chat sends no num_ctx: the files are fitted to the context the service gives the model (its
    setting here, 2048, reported by /api/show), not to a number of the app's."""
    chat = desk.chat
    chat.new_chat()
    assert chat.num_ctx.text() == "auto"
    big = tmp_path / "story.txt"
    big.write_text(" ".join(f"word{i}" for i in range(6000)))
    chat.attach_files([str(big)])
    QTest.keyClicks(chat.input, "Summarise.")
    QTest.keyClick(chat.input, Qt.Key_Return)
    qtbot.waitUntil(lambda: not chat.busy and chat.transcript.messages[-1].role != "user", timeout=WAIT)
    reply = chat.transcript.messages[-1]
    assert reply.role == "assistant", reply.content
    assert "**story.txt** (cut to fit the context:" in last_user(desk)
    prompt = reply.stats.get("prompt_eval_count")
    assert prompt and 2048 * 3 // 4 < prompt <= 2048 - 4, prompt       # most of the 2048, minus the reply's 4


def test_a_file_too_big_for_the_context_is_cut_and_says_so(qtbot, desk, tmp_path):
    chat = desk.chat
    chat.new_chat()
    chat.num_ctx.setValue(1024)
    big = tmp_path / "story.txt"
    big.write_text(" ".join(f"word{i}" for i in range(6000)))        # ~20k tokens, far beyond 1024
    small = tmp_path / "after.txt"
    small.write_text("after the big one")
    chat.attach_files([str(big), str(small)])
    QTest.keyClicks(chat.input, "Summarise.")
    QTest.keyClick(chat.input, Qt.Key_Return)
    assert chat.busy
    qtbot.waitUntil(lambda: not chat.busy and chat.transcript.messages[-1].role != "user", timeout=WAIT)
    reply = chat.transcript.messages[-1]
    assert reply.role == "assistant", reply.content          # it fit: no context error
    sent = last_user(desk)
    assert "**story.txt** (cut to fit the context:" in sent and "**after.txt** (cut to fit the context: 0 of" in sent
    kept = sent.split("```\n")[1]
    assert 0 < len(kept) < len(big.read_text())
    prompt = reply.stats.get("prompt_eval_count")
    assert prompt and prompt <= 1024 - 4

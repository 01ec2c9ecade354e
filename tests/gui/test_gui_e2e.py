"""The desktop app against the real service and the real SmolLM2 (pytest-qt, offscreen).

One service per module (loading SmolLM2 costs a second or two); each test gets its own windows and STRATA_HOME
for chat history. Replies are kept short with num_predict so the module stays fast on 2 cores.
"""
from __future__ import annotations

import json
import threading
import urllib.request

import pytest

from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME as MODEL
from gui_util import ENDLESS

# ms: a bound only a hang reaches (the first reply includes loading the model: over 180 s for 24 tokens beside two
# CPU hogs at a higher priority); tests finish far sooner
WAIT = 420_000


@pytest.fixture(scope="module")
def service(live_service, smollm2_path):
    return live_service(n_threads=2, num_parallel=2, num_ctx=2048)


def api(service, path, body=None):
    req = urllib.request.Request(service.url + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read() or b"{}")


def running(service) -> list[dict]:
    return api(service, "/api/ps")["models"]


@pytest.fixture
def desk(qtbot, service):
    from app.gui.desktop import Desktop

    d = Desktop(service.url, use_tray=False, poll_ms=300)
    qtbot.addWidget(d.chat)
    d.chat.extra_options = {"num_predict": 24, "seed": 7}
    d.chat.num_ctx.setValue(2048)          # the service's default: no reload between tests
    # the model listed, and the event stream connected: the loads the tests trigger are announced to the app
    qtbot.waitUntil(lambda: MODEL in d.state.installed_names() and d.state.connected, timeout=WAIT)
    yield d
    d.shutdown()


def reply_of(chat):
    msgs = [m for m in chat.transcript.messages if m.role in ("assistant", "error")]
    return msgs[-1] if msgs else None


def test_send_a_message_and_see_the_streamed_reply(qtbot, desk, strata_home):
    chat = desk.chat
    assert chat.selected_model() == MODEL
    chunks = []
    chat.send("Name three colours.")
    assert chat.busy
    chat.call.item.connect(lambda obj: chunks.append(obj))
    qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)
    reply = reply_of(chat)
    assert reply.role == "assistant", reply.content
    assert reply.content.strip()
    assert len([c for c in chunks if (c.get("message") or {}).get("content")]) > 1     # it streamed
    assert reply.stats["tokens"] > 0 and reply.stats["ttft_ms"] is not None
    assert "tokens" in reply.stats_label.text() and "tok/s" in reply.stats_label.text()
    # what is shown is the whole reply rendered as Markdown (the last coalesced render was not skipped)
    from PySide6.QtGui import QTextDocument

    doc = QTextDocument()
    doc.setMarkdown(reply.content)
    assert reply.body.toPlainText() == doc.toPlainText()
    # token alternatives came with it: the token view maps each token back to its top_logprobs
    assert reply.logprobs and "top_logprobs" in reply.logprobs[0]
    assert "".join(lp["token"] for lp in reply.logprobs) == reply.content
    reply.tokens_button.setChecked(True)
    assert reply.body.toPlainText() == reply.content
    assert len(reply.body.token_offsets) == len(reply.logprobs)
    # saved in SQLite
    [conv] = desk.history.conversations()
    assert conv.title == "Name three colours."
    saved = desk.history.messages(conv.id)
    assert [m.role for m in saved] == ["user", "assistant"]
    assert saved[1].content == reply.content
    assert (strata_home / "chats.db").is_file()


def test_stop_cancels_the_request(qtbot, desk, service):
    from PySide6.QtCore import Qt

    chat = desk.chat
    chat.extra_options = ENDLESS
    chat.send("Write a very long story about a lighthouse keeper, in many chapters.")
    call = chat.call
    cancelled = []
    call.cancelled.connect(lambda: cancelled.append(True))
    qtbot.waitUntil(lambda: len(chat.pending.parts if chat.pending else []) >= 3, timeout=WAIT)
    assert chat.stop_button.isEnabled()
    qtbot.mouseClick(chat.stop_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)
    assert cancelled == [True]
    reply = reply_of(chat)
    assert reply.role == "assistant" and reply.stats.get("stopped") is True
    assert "stopped" in reply.stats_label.text()
    # a stopped stream has no final totals: the count is the tokens received (one logprob entry each), not the
    # chunks (the runner merges tokens into a chunk every 50 ms on a busy CPU, so chunks <= tokens)
    n = reply.stats["tokens"]
    assert n == len(reply.logprobs) and n >= 3
    assert "".join(lp["token"] for lp in reply.logprobs) == reply.content
    # The service saw the stream close: the slot is freed, which an endless reply does only when it is stopped.
    qtbot.waitUntil(lambda: all((m.get("strata") or {}).get("slots_busy", 0) == 0 for m in running(service)),
                    timeout=WAIT)
    saved = desk.history.messages(desk.history.conversations()[0].id)
    assert saved[-1].content == reply.content and saved[-1].stats["stopped"] is True
    # Regenerate drops the stopped reply and asks again
    chat.extra_options = {"num_predict": 8, "seed": 1}
    chat.regenerate()
    qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)
    saved = desk.history.messages(desk.history.conversations()[0].id)
    assert [m.role for m in saved] == ["user", "assistant"]
    assert not saved[-1].stats.get("stopped")


def test_switching_or_deleting_a_chat_while_it_streams(qtbot, desk):
    chat = desk.chat
    chat.extra_options = ENDLESS
    chat.send("Tell me a long story about the sea.")
    first = chat.conversation.id
    qtbot.waitUntil(lambda: len(chat.pending.parts if chat.pending else []) >= 2, timeout=WAIT)
    second = chat.new_chat()                 # stops the stream; the partial reply goes to the first chat
    qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)
    assert chat.conversation.id == second.id and chat.transcript.messages == []
    saved = desk.history.messages(first)
    assert [m.role for m in saved] == ["user", "assistant"] and saved[1].stats["stopped"] is True
    assert desk.history.messages(second.id) == []
    # deleting the chat that is streaming: the stream stops, nothing is saved anywhere, no error
    chat.send("Another long story, please.")
    qtbot.waitUntil(lambda: len(chat.pending.parts if chat.pending else []) >= 2, timeout=WAIT)
    chat.delete_conversation(second.id)
    qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)
    assert [c.id for c in desk.history.conversations()] == [first]
    assert len(desk.history.messages(first)) == 2


def test_a_chat_survives_a_restart(qtbot, service, desk):
    from app.gui.desktop import Desktop

    chat = desk.chat
    chat.system_prompt.setPlainText("You are terse.")
    chat.temperature.setValue(0.3)
    chat.send("Hello there")
    qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)
    first_reply = reply_of(chat).content
    desk.rename_target = desk.history.conversations()[0].id
    chat.rename_conversation(desk.rename_target, "Greeting")
    chat.new_chat()            # a second, empty chat
    desk.shutdown()

    again = Desktop(service.url, use_tray=False, poll_ms=300)
    qtbot.addWidget(again.chat)
    try:
        titles = [c.title for c in again.history.conversations()]
        assert sorted(titles) == ["Greeting", "New chat"]
        again.chat.select_conversation(next(c.id for c in again.history.conversations() if c.title == "Greeting"))
        msgs = again.chat.transcript.messages
        assert [(m.role, m.content) for m in msgs] == [("user", "Hello there"), ("assistant", first_reply)]
        assert again.chat.system_prompt.toPlainText() == "You are terse."
        assert again.chat.temperature.value() == pytest.approx(0.3)
        # delete works and survives too
        again.chat.delete_conversation(again.chat.conversation.id)
        assert [c.title for c in again.history.conversations()] == ["New chat"]
    finally:
        again.shutdown()


def test_errors_show_in_the_chat(qtbot, desk):
    chat = desk.chat
    chat.extra_options = {"temperature": "hot"}      # the service answers 400 with a message
    chat.send("hi")
    qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)
    err = reply_of(chat)
    assert err.role == "error"
    assert "400" in err.content and "temperature" in err.content
    assert chat.send_button.isEnabled()
    saved = desk.history.messages(chat.conversation.id)
    assert saved[-1].role == "error"
    # an error is not sent back to the model as context
    assert all(m["role"] != "error" for m in chat.request_body()["messages"])


def test_what_if_shows_a_refusal_for_an_impossible_plan(qtbot, desk):
    mem = desk.open_memory()
    qtbot.addWidget(mem)
    w = mem.whatif
    qtbot.waitUntil(lambda: w.model_combo.findText(MODEL) >= 0, timeout=WAIT)
    w.model_combo.setCurrentText(MODEL)
    # a plan that fits on this machine
    w.plan()
    qtbot.waitUntil(lambda: w.last_result is not None, timeout=WAIT)
    assert w.last_result["fits"] is True
    assert not w.warning.isVisible()
    assert len(w.view.strip.cells) == 30          # SmolLM2-135M has 30 blocks
    assert w.view.bars.columns[0].device_id == "CPU" and w.view.bars.columns[0].fits
    # a simulated machine with 200 MiB of RAM cannot hold it
    w.last_result = None
    w.num_ctx.setValue(8192)
    picker = w.form_a.picker
    picker.advanced.setChecked(True)             # the JSON editor (advanced): a machine the picker cannot make
    picker.json.setPlainText(json.dumps({"devices": [], "host_ram_total": 1 << 30,
                                         "host_ram_available": 200 << 20, "cpu_cores": 2}))
    w.plan()
    qtbot.waitUntil(lambda: w.last_result is not None, timeout=WAIT)
    assert w.last_result["fits"] is False
    assert not w.warning.isHidden()
    assert "will not fit" in w.warning.text()
    assert w.last_result["suggestions"][0] in w.warning.text()
    assert not w.view.bars.columns[0].fits
    assert w.view.summary.text().startswith("Will not fit.")
    assert "clamped" not in w.view.summary.text()           # 8192 is SmolLM2's own training context
    # a context above the model's training context is clamped, and the summary says so
    w.last_result = None
    w.num_ctx.setValue(131072)
    w.plan()
    qtbot.waitUntil(lambda: w.last_result is not None, timeout=WAIT)
    assert "Context clamped from 131072 to 8192" in w.view.summary.text()
    # bad JSON is a plain message, not a request
    picker.json.setPlainText("{not json")
    w.plan()
    assert "not valid JSON" in w.warning.text()


def test_tray_actions_call_the_api(qtbot, desk, service):
    from PySide6.QtGui import QGuiApplication

    for m in running(service):                 # start from nothing loaded
        api(service, "/api/generate", {"model": m["name"], "keep_alive": 0})
    desk.state.refresh()
    qtbot.waitUntil(lambda: desk.state.ps == [], timeout=WAIT)
    tray = desk.tray
    # no tray on the offscreen platform: the chat window carries the same menu
    assert tray.tray is None
    assert tray.menu is desk.chat.models_menu and tray.menu.menuAction() in desk.chat.menuBar().actions()
    notes, progress, bar_values = [], [], []
    tray.notified.connect(lambda title, msg: notes.append((title, msg)))
    desk.state.load_progress.connect(lambda m, p: progress.append((m, p)))
    mem = desk.open_memory()               # open before the load: its progress bar follows /api/events
    qtbot.addWidget(mem)
    live = mem.live
    live.progress.valueChanged.connect(bar_values.append)
    tray.populate()
    load = tray.find_action(f"load:{MODEL}")
    assert load is not None and load.isEnabled()
    load.trigger()
    qtbot.waitUntil(lambda: desk.state.model_state(MODEL) == "loaded", timeout=WAIT)
    assert [m["name"] for m in running(service)] == [MODEL]
    qtbot.waitUntil(lambda: ("Model loaded", f"{MODEL} is ready") in notes, timeout=WAIT)
    # load progress came through the event stream into the progress bar, which hides when the load is done
    assert progress and all(m == MODEL and 0.0 <= p <= 1.0 for m, p in progress)
    assert bar_values and max(bar_values) <= 100
    assert live.progress.isHidden()
    # the live memory view shows where it sits, predicted vs actual side by side
    qtbot.waitUntil(lambda: desk.state.inventory is not None, timeout=WAIT)
    live.model_combo.setCurrentText(MODEL)
    live.render()
    assert len(live.view.strip.cells) == 30 and {c.device for c in live.view.strip.cells} == {"CPU"}
    # the prompt cache is its own kind: what /api/ps says the runner holds, and its limit in the status line
    cache = running(service)[0]["strata"]["prompt_cache"]
    assert cache["limit"] > 0 and "prompt cache" in live.status.text()
    assert live.view.bars.columns[0].get("prompt_cache") == cache["bytes"]
    assert live.view.bars.columns[0].get("weights") > 0
    [row] = [r for r in live.comparison.rows if r.device_id == "CPU"]
    assert row.predicted > 0 and row.actual and row.actual > 0
    # like with like (llama.cpp's kinds, mapped file pages in "model"): the real load is within 2% of the plan
    assert {p.kind for p in row.parts} >= {"model", "kv", "compute"}
    assert abs(row.diff) <= 0.02 * row.actual, [(p.kind, p.predicted, p.actual) for p in row.parts]
    # unload from the menu
    tray.populate()
    unload = tray.find_action(f"unload:{MODEL}")
    assert unload is not None
    unload.trigger()
    qtbot.waitUntil(lambda: running(service) == [], timeout=WAIT)
    qtbot.waitUntil(lambda: desk.state.ps == [], timeout=WAIT)
    tray.populate()
    assert tray.find_action(f"unload:{MODEL}") is None
    # copy address (the other entries: test_gui_actions.py)
    tray.find_action("copyAddress").trigger()
    assert QGuiApplication.clipboard().text() == service.url


def test_gui_thread_keeps_answering_while_a_long_reply_streams(qtbot, desk):
    """While a reply that only a stop ends streams into the visible window, the GUI thread keeps answering: round
    after round, a call posted to it from another thread (as the bridge's loop thread posts each chunk) runs in the
    GUI thread while the reply is still running, and the window's rendered reply grows (the coalescing render timer
    fires mid-stream, not only at the end). Were the request, the reading of its stream or the rendering done in
    the GUI thread until the reply ends, the first posted call would wait for an end that never comes and the test
    fails at its bound. Only conditions are waited for, so a fast or a slow machine changes nothing."""
    from PySide6.QtCore import QObject, Qt, Signal, Slot

    class Poster(QObject):
        ping = Signal(int)

    answered: list[tuple[int, int, bool]] = []     # (round, thread, the reply still running)

    class Answerer(QObject):
        @Slot(int)
        def answer(self, i):
            answered.append((i, threading.get_ident(), chat.busy))

    chat = desk.open_chat()
    chat.resize(1100, 720)
    poster, answerer = Poster(), Answerer()
    poster.ping.connect(answerer.answer, Qt.QueuedConnection)
    gui_thread = threading.get_ident()
    chat.extra_options = ENDLESS
    chat.send("Write a long essay about the history of bridges, with headings, lists and a code example.")
    widget = chat.pending.widget
    for i in range(5):
        shown = len(widget.body.toPlainText())
        threading.Thread(target=poster.ping.emit, args=(i,)).start()
        qtbot.waitUntil(lambda: len(answered) > i and len(widget.body.toPlainText()) > shown, timeout=WAIT)
        assert answered[i] == (i, gui_thread, True), answered
    assert chat.busy and chat.pending.widget is widget      # the reply never ended: every round came mid-stream
    chat.stop()
    qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)
    assert reply_of(chat).stats.get("stopped") is True


def test_bridge_delivers_a_reply_that_arrives_before_the_caller_connects(qtbot, service):
    """A fast reply can come back before the GUI thread has connected to the Call's signals; it must not be lost."""
    from app.gui.common.bridge import ServiceBridge

    bridge = ServiceBridge(service.url)
    try:
        call = bridge.call(lambda c: c.version())
        call.future.result(30)          # the request is done in the loop thread before anyone listens
        got = []
        call.finished.connect(got.append)
        qtbot.waitUntil(lambda: len(got) == 1, timeout=WAIT)
        assert "version" in got[0]
    finally:
        bridge.close()


def test_quitting_while_a_reply_streams_keeps_what_arrived(qtbot, service, strata_home):
    from app.gui.desktop import Desktop
    from app.gui.chat.history import ChatHistory

    d = Desktop(service.url, use_tray=False, poll_ms=300)
    qtbot.addWidget(d.chat)
    qtbot.waitUntil(lambda: MODEL in d.state.installed_names(), timeout=WAIT)
    d.chat.num_ctx.setValue(2048)
    d.chat.extra_options = ENDLESS
    d.chat.send("Tell me a long story about mountains.")
    qtbot.waitUntil(lambda: len(d.chat.pending.parts if d.chat.pending else []) >= 2, timeout=WAIT)
    d.shutdown()
    qtbot.wait(200)            # late deliveries from the closed bridge must not touch the closed database
    h = ChatHistory()
    [conv] = h.conversations()
    msgs = h.messages(conv.id)
    assert [m.role for m in msgs] == ["user", "assistant"] and msgs[1].stats["stopped"] is True and msgs[1].content

"""The desktop chat with a thinking model: the thinking streams into its own block, collapsed by default and
titled with its token count, kept apart from the answer and in the saved history (pytest-qt, offscreen, the
real service; the model is a synthetic GGUF whose template opens a <think> block, so its reply is thinking)."""
from __future__ import annotations

import json
import urllib.request

import pytest

from gguf_variants import write_llama

WAIT = 180_000
THINK_TEMPLATE = ("{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor -%}"
                  "{%- if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")


@pytest.fixture(scope="module")
def service(live_service, tmp_path_factory, smollm2_path):
    svc = live_service(n_threads=1, num_parallel=1, num_ctx=1024)
    path = write_llama(tmp_path_factory.mktemp("thinker") / "thinker.gguf", template=THINK_TEMPLATE, n_layer=2)
    body = json.dumps({"model": "thinker:test", "from": str(path), "stream": False}).encode()
    req = urllib.request.Request(svc.url + "/api/create", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.status == 200
    yield svc


def test_thinking_is_its_own_collapsed_block(qtbot, service, strata_home):
    from app.gui.desktop import Desktop

    desk = Desktop(service.url, use_tray=False, poll_ms=300)
    qtbot.addWidget(desk.chat)
    try:
        chat = desk.chat
        qtbot.waitUntil(lambda: "thinker:test" in desk.state.installed_names(), timeout=WAIT)
        chat.model_picker.setCurrentIndex(chat.models.row_of("thinker:test"))
        chat.num_ctx.setValue(1024)
        chat.extra_options = {"num_predict": 10, "seed": 3}
        chat.send("Why is the sky blue?")
        qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)
        reply = [m for m in chat.transcript.messages if m.role in ("assistant", "error")][-1]
        assert reply.role == "assistant"
        block = reply.thinking
        assert block.isVisibleTo(reply) and block.text and "<think>" not in block.text
        assert not block.body.isVisibleTo(reply)                          # collapsed by default
        assert block.toggle.text() == f"Thinking · {block.n_tokens} tokens" and block.n_tokens > 0
        assert reply.content == ""                                        # all of it was thinking
        block.toggle.click()
        assert block.body.isVisibleTo(reply) and block.body.text() == block.text
        [conv] = desk.history.conversations()
        saved = desk.history.messages(conv.id)[-1]
        assert saved.blocks["thinking"] == block.text and saved.blocks["thinking_tokens"] == block.n_tokens
        chat.new_chat()
        chat.select_conversation(conv.id)
        again = chat.transcript.messages[-1]
        assert again.thinking.text == block.text and not again.thinking.body.isVisibleTo(again)
    finally:
        desk.shutdown()


def test_tool_call_and_result_blocks(qtbot):
    from app.gui.chat.chat_view import MessageWidget

    calls = [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]
    m = MessageWidget("assistant", "", blocks={"tool_calls": calls})
    qtbot.addWidget(m)
    [block] = [m.calls_box.itemAt(i).widget() for i in range(m.calls_box.count())]
    assert block.kind == "call" and block.plain == 'get_weather({"city": "Paris"})'
    assert not m.thinking.isVisibleTo(m)
    result = MessageWidget("tool", "sunny, 21C")
    qtbot.addWidget(result)
    assert result.title.text() == "Tool result" and result.body.toPlainText() == "sunny, 21C"

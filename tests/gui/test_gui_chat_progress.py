"""The chat says how a long prompt's reading goes (app/gui/chat/chat_session.py: it asks with `return_progress`, the
service's Ollama stream answers with llama-server's `prompt_progress` lines): a ~10k-token message, sent
through the chat window to the Qwen2.5-Coder fixture's random-weight twin (its tokenizer, a thousandth of the
compute), shows "Reading the prompt: N% of T tokens" in the status bar before the reply, and the reply is saved
as usual. Checked by what the status bar said, never by timing."""
from __future__ import annotations

import uuid

import pytest

from agent_replay import serve_model, write_tokenizer_twin
from app.gui.chat.chat_session import progress_text

pytestmark = pytest.mark.timeout(600)

TWIN = "coder-twin:random"
WAIT = 300_000


@pytest.fixture(scope="module")
def service(live_service, qwen_coder_path, tmp_path_factory):
    gguf = write_tokenizer_twin(qwen_coder_path, tmp_path_factory.mktemp("twin") / "coder-twin.gguf", n_ctx=16384)
    return serve_model(live_service, gguf, TWIN, num_ctx=16384, num_parallel=1, keep_alive="10m")


def test_progress_text():
    assert progress_text({"total": 10000, "cache": 0, "processed": 4000, "time_ms": 2000}) == \
        "Reading the prompt: 40% of 10,000 tokens, about 3 s left"
    assert progress_text({"total": 10000, "cache": 2000, "processed": 2000, "time_ms": 0}) == \
        "Reading the prompt: 20% of 10,000 tokens"


def test_the_chat_says_how_a_long_prompt_is_read(qtbot, service):
    from app.gui.desktop import Desktop

    d = Desktop(service.url, use_tray=False, poll_ms=1000)
    qtbot.addWidget(d.chat)
    try:
        chat = d.open_chat()
        qtbot.waitUntil(lambda: chat.models.row_of(TWIN) >= 0, timeout=WAIT)
        chat.model_picker.setCurrentIndex(chat.models.row_of(TWIN))
        said: list[str] = []
        chat.statusBar().messageChanged.connect(said.append)
        words = ("ledger", "harbor", "violet", "copper", "meadow", "signal", "quartz", "lantern", "orbit", "thistle")
        chat.session.extra_options = {"num_predict": 2}
        chat.send(f"[{uuid.uuid4().hex}] " + " ".join(f"{words[i % 10]}{i % 97}" for i in range(3300)))
        qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)
        reading = [m for m in said if m.startswith("Reading the prompt: ")]
        assert reading, said
        assert all(" of " in m and "%" in m for m in reading)
        assert chat.transcript.messages[-1].role == "assistant"
    finally:
        d.shutdown()

"""A chat as a file (gui/chat/chat_export.py, no Qt): Markdown to read, JSON that imports back into another history
as the same chat, and a malformed file refused with a ValueError naming the field. The menu actions that call
these: tests/gui/test_gui_chat_messages.py."""
from __future__ import annotations

import pytest

from app.gui.chat.chat_export import import_json, to_json, to_markdown
from app.gui.chat.history import ChatHistory


@pytest.fixture
def chat(tmp_path):
    h = ChatHistory(tmp_path / "a.db")
    conv = h.create(title="Weather", model="smollm2:135m", system="Be brief.", temperature=0.2, num_ctx=4096,
                    options={"seed": 5})
    h.add_message(conv.id, "user", "Weather in Paris?")
    h.add_message(conv.id, "assistant", "Let me check.", stats={"tokens": 4},
                  blocks={"thinking": "They want the weather.", "tool_calls": [{"name": "get_weather",
                                                                                "arguments": {"city": "Paris"}}]})
    return h, conv


def test_markdown_has_the_title_system_turns_thinking_and_calls(chat):
    h, conv = chat
    md = to_markdown(conv, h.messages(conv.id))
    for part in ("# Weather", "Model: `smollm2:135m`", "## System", "Be brief.", "## You", "Weather in Paris?",
                 "## Assistant", "<summary>Thinking</summary>", "They want the weather.", "Let me check.",
                 '"name": "get_weather"'):
        assert part in md, part
    assert md.index("## You") < md.index("## Assistant")


def test_json_imports_back_as_the_same_chat(chat, tmp_path):
    h, conv = chat
    data = to_json(conv, h.messages(conv.id))
    other = ChatHistory(tmp_path / "b.db")
    got = import_json(other, data)
    assert (got.title, got.model, got.system, got.temperature, got.num_ctx, got.options) == \
        ("Weather", "smollm2:135m", "Be brief.", 0.2, 4096, {"seed": 5})
    assert to_json(got, other.messages(got.id))["messages"] == data["messages"]


@pytest.mark.parametrize("data, says", [
    ({"format": "other"}, "not a Strata chat file"),
    ({"format": "strata-chat", "messages": "no"}, "messages: expected list"),
    ({"format": "strata-chat", "messages": [{"role": "wizard", "content": ""}]}, "messages[0].role: 'wizard'"),
    ({"format": "strata-chat", "messages": [{"role": "user", "content": 3}]}, "messages[0].content: expected str"),
    ({"format": "strata-chat", "messages": [], "temperature": True}, "temperature: expected a number"),
])
def test_a_malformed_file_names_the_field_and_adds_nothing(data, says, tmp_path):
    h = ChatHistory(tmp_path / "c.db")
    with pytest.raises(ValueError) as e:
        import_json(h, data)
    assert says in str(e.value) and h.conversations() == []

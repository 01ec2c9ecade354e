"""The family records (engine/chat/formats.py) are complete: every parser a record names exists, and the
behaviour the rest of the code reads from a record (thinking in templates, the budget's close text, message
preparation) is the family's."""
from __future__ import annotations

import pytest

from app.engine.chat.formats import CR_THINK, FORMATS, GENERIC, MISTRAL_THINK, THINK, detect_family, format_for
from app.service.generation.toolcalls import REPLY_PARSERS
from app.service.generation.toolcalls.syntaxes import READERS


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_parser_a_record_names_exists(name):
    f = FORMATS[name]
    assert f.reply_parser in REPLY_PARSERS
    assert all(s.parser in READERS for s in f.sections)
    assert f.grammar is None or f.grammar.opener is None or f.grammar.opener in {s.start for s in f.sections}


def test_generic_is_the_last_record_and_takes_any_template():
    assert list(FORMATS)[-1] == GENERIC.name and detect_family("anything") == GENERIC.name
    assert format_for(None) is GENERIC and format_for("no-such-family") is GENERIC


def test_how_a_template_shows_thinking():
    assert format_for("hermes").template_thinking("{% if enable_thinking %}<think>{% endif %}") == (
        True, THINK[0], "enable_thinking")
    assert format_for("hermes").template_thinking("plain") == (False, None, None)
    assert format_for("mistral").template_thinking(f"{MISTRAL_THINK[0]} {{% if thinking %}}") == (
        True, MISTRAL_THINK[0], "thinking")
    assert format_for("mistral").template_thinking("<think>") == (True, THINK[0], None)   # the general rule
    assert format_for("command_r").template_thinking("<think>") == (False, CR_THINK[0], None)   # its own only
    assert format_for("command_r").template_thinking(CR_THINK[0]) == (True, CR_THINK[0], None)
    assert format_for("harmony").template_thinking(None) == (True, None, "reasoning_effort")


def test_budget_close_text_and_message_preparation():
    assert format_for("llama3").think_budget == (THINK[0], THINK[1], THINK[1])   # no markers of its own
    assert format_for("command_r").think_budget == (CR_THINK[0], CR_THINK[1], CR_THINK[1])
    assert [n for n, f in FORMATS.items() if f.prepare_messages is not None] == ["mistral"]
    msgs = [{"role": "assistant", "content": "", "tool_calls": [{"id": "ABCDEFGHI", "function": {}}]}]
    assert format_for("mistral").prepare_messages(msgs) == msgs                   # 9 letters/digits stay

"""Fitting a prompt into a sequence's context (runner/prompt/context_fit.py), on token lists and a counting function
instead of a model: how much the reply claims per rule, the token rule for a raw prompt, and Ollama's message
rule (system messages and the last message kept, never starting at a tool result). The same rules on a live
service, with the real template and tokenizer: tests/integration/service/test_context_fit.py."""
from __future__ import annotations

import pytest

from app.engine.runner.prompt.context_fit import (OVERFLOW_DROP, OVERFLOW_ERROR, ContextOverflow, drop_oldest, fits,
                                           reply_room, truncate_tokens)


def test_refusing_counts_the_whole_reply_limit_ollamas_rules_at_most_half():
    assert reply_room(OVERFLOW_ERROR, 900, 1024) == 900
    assert reply_room(OVERFLOW_DROP, 900, 1024) == 512
    assert reply_room(OVERFLOW_DROP, 100, 1024) == 100


@pytest.mark.parametrize("n, reserve, limit, ok", [(100, 0, 100, False), (99, 0, 100, True), (90, 10, 100, True),
                                                   (90, 11, 100, False), (10, -5, 100, True)])
def test_a_prompt_fits_with_room_for_one_token_and_the_reserve(n, reserve, limit, ok):
    assert fits(n, reserve, limit) is ok


def test_truncation_keeps_the_first_n_keep_and_the_most_recent_tokens():
    toks = list(range(100))
    got = truncate_tokens(toks, n_keep=4, reserve=10, limit=50)
    assert got[:4] == [0, 1, 2, 3] and got[4:] == list(range(100 - 36, 100)) and len(got) == 40
    assert truncate_tokens(toks[:30], 4, 10, 50) == toks[:30]          # already fits: unchanged


def chat(n_turns: int) -> list[dict]:
    msgs = [{"role": "system", "content": "S"}]
    for i in range(n_turns):
        msgs += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
    return msgs + [{"role": "user", "content": "last"}]


def tokens_of(msgs: list[dict]) -> int:
    return 10 * len(msgs)                 # every message 10 tokens, as if rendered and tokenized


def test_dropping_keeps_the_system_message_and_the_most_recent_turns_that_fit():
    msgs = chat(5)                        # 12 messages: 120 tokens
    kept, dropped = drop_oldest(msgs, tokens_of, reserve=0, limit=65)
    assert kept[0]["role"] == "system" and kept[-1]["content"] == "last"
    assert tokens_of(kept) < 65 and tokens_of(kept) + 10 >= 65         # the most that fits
    assert dropped == len(msgs) - len(kept)
    assert kept[1:] == msgs[len(msgs) - len(kept) + 1:]                # a contiguous recent tail


def test_dropping_never_starts_at_a_tool_result():
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [{}]},
            {"role": "tool", "content": "r"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}]
    kept, _ = drop_oldest(msgs, tokens_of, reserve=0, limit=35)
    assert kept[0]["role"] != "tool"


def test_when_even_the_last_message_does_not_fit_it_is_an_overflow_with_the_counts():
    with pytest.raises(ContextOverflow) as e:
        drop_oldest(chat(2), tokens_of, reserve=0, limit=15)
    assert e.value.data == {"prompt_tokens": 20, "reserve": 0, "limit": 15,
                            "why": " even with only the system messages and the last message"}
    assert "the prompt is 20 tokens, more than the context of 15 tokens" in str(e.value)


def test_a_shape_the_template_refuses_counts_as_not_fitting():
    msgs = chat(3)
    kept, _ = drop_oldest(msgs, lambda m: None if len(m) > 4 else tokens_of(m), reserve=0, limit=1000)
    assert len(kept) <= 4 and kept[-1]["content"] == "last"

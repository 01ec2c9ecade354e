"""A reply while it streams (app/gui/chat/reply.py, no Qt): the stats from /api/chat's final object, and a reply
stopped before it counts tokens, not chunks."""
from __future__ import annotations

import pytest


def test_chat_stats_from_the_final_object():
    from app.gui.chat.reply import chat_stats

    s = chat_stats({"eval_count": 50, "eval_duration": 500_000_000, "done_reason": "stop"}, 120.0, 49, 1.0)
    assert s == {"tokens": 50, "tok_s": 100.0, "ttft_ms": 120.0, "done_reason": "stop"}
    # a stopped stream has no totals: counted by the client
    s = chat_stats({}, 100.0, 11, 1.1)
    assert s["tokens"] == 11 and s["tok_s"] == pytest.approx(10.0)


def test_a_stopped_reply_counts_tokens_not_chunks():
    """The runner merges tokens into one chunk on a busy CPU: a reply stopped before its final object counts the
    tokens it received (one logprob entry each), whether or not their alternatives are kept for the token view."""
    from app.gui.chat.reply import PendingReply

    def lp(t):
        return {"token": t, "logprob": -0.5, "bytes": list(t.encode())}

    for keep in (True, False):
        p = PendingReply(1, "m", widget=None, keep_logprobs=keep)
        p.add({"message": {"content": "Hello"}, "logprobs": [lp("Hello")], "done": False})
        p.add({"message": {"content": ", world and"}, "logprobs": [lp(","), lp(" world"), lp(" and")], "done": False})
        s = p.stats(stopped=True)
        assert s["tokens"] == 4 and s["stopped"] is True           # 2 chunks, 4 tokens
        assert len(p.logprobs) == (4 if keep else 0)

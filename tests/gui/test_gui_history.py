"""Chat history in SQLite, the item models over it and the pieces of the client that need no service."""
from __future__ import annotations

import asyncio
import sqlite3

import pytest

from app.api_client import parse_sse
from app.gui.chat.history import AUTO_CTX, ChatHistory


def test_conversations_survive_reopening(strata_home):
    h = ChatHistory()
    assert h.path == strata_home / "chats.db"
    c = h.create(model="smollm2:135m", system="Be brief.", temperature=0.2, num_ctx=2048)
    h.add_message(c.id, "user", "hi")
    h.add_message(c.id, "assistant", "hello", stats={"tokens": 2}, logprobs=[{"token": "hello", "logprob": -0.1}])
    h.close()
    h2 = ChatHistory()
    [c2] = h2.conversations()
    assert (c2.model, c2.system, c2.temperature, c2.num_ctx) == ("smollm2:135m", "Be brief.", 0.2, 2048)
    msgs = h2.messages(c2.id)
    assert [(m.role, m.content) for m in msgs] == [("user", "hi"), ("assistant", "hello")]
    assert msgs[1].stats == {"tokens": 2}
    assert msgs[1].logprobs[0]["token"] == "hello"


def test_a_chats_db_from_before_auto_context_turns_the_old_default_into_auto(strata_home):
    """Before "auto", every chat stored (and sent) the context box's 4096 unless the user changed it: such chats
    become auto when the app opens the old chats.db, once; a value the user set stays, and so does a 4096 chosen
    after the upgrade."""
    db = sqlite3.connect(str(strata_home / "chats.db"))           # the chats.db an older app left (its schema)
    db.executescript("""
        CREATE TABLE conversations (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL,
            model TEXT NOT NULL DEFAULT '', system TEXT NOT NULL DEFAULT '', temperature REAL NOT NULL DEFAULT 0.8,
            num_ctx INTEGER NOT NULL DEFAULT 4096, created_at REAL NOT NULL, updated_at REAL NOT NULL);
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id INTEGER NOT NULL,
            role TEXT NOT NULL, content TEXT NOT NULL, stats TEXT NOT NULL DEFAULT '{}',
            logprobs TEXT NOT NULL DEFAULT '[]', created_at REAL NOT NULL);
        INSERT INTO conversations (title, num_ctx, created_at, updated_at) VALUES ('untouched', 4096, 1, 1);
        INSERT INTO conversations (title, num_ctx, created_at, updated_at) VALUES ('chosen', 2048, 2, 2);
        INSERT INTO messages (conversation_id, role, content, created_at) VALUES (1, 'user', 'hi', 1);
    """)
    db.commit()
    db.close()
    h = ChatHistory()
    by_title = {c.title: c for c in h.conversations()}
    assert (by_title["untouched"].num_ctx, by_title["chosen"].num_ctx) == (AUTO_CTX, 2048)
    assert [m.content for m in h.messages(by_title["untouched"].id)] == ["hi"]
    h.update(by_title["chosen"].id, num_ctx=4096)                 # set after the upgrade: the user's choice
    assert h.create(title="new").num_ctx == AUTO_CTX
    h.close()
    h = ChatHistory()
    assert {c.title: c.num_ctx for c in h.conversations()} == {"untouched": AUTO_CTX, "chosen": 4096,
                                                               "new": AUTO_CTX}


def test_rename_delete_and_bad_input():
    h = ChatHistory()
    a, b = h.create(title="a"), h.create(title="b")
    h.add_message(a.id, "user", "x")
    assert h.rename(a.id, "  renamed  ").title == "renamed"
    with pytest.raises(ValueError, match="empty"):
        h.rename(a.id, "   ")
    with pytest.raises(ValueError, match="unknown"):
        h.update(a.id, colour="red")
    h.delete(a.id)
    assert [c.id for c in h.conversations()] == [b.id]
    assert h.messages(a.id) == []          # messages went with it (ON DELETE CASCADE)
    with pytest.raises(KeyError):
        h.get(a.id)


def test_most_recent_first_and_titles():
    h = ChatHistory()
    a = h.create(title="old")
    b = h.create(title="new")
    h.add_message(a.id, "user", "bump")     # a message makes a chat the most recent
    assert [c.id for c in h.conversations()] == [a.id, b.id]
    assert h.title_from("  What is\n the   capital of France? " * 3).endswith("…")
    assert h.title_from("Hi there") == "Hi there"


def test_conversation_list_model_renames_through_set_data(qtbot):
    from PySide6.QtCore import Qt

    from app.gui.chat.chat_lists import ConversationListModel

    h = ChatHistory()
    h.create(title="first")
    m = ConversationListModel(h)
    idx = m.index(0)
    assert m.data(idx) == "first"
    assert m.flags(idx) & Qt.ItemIsEditable
    assert m.setData(idx, "second")
    assert h.conversations()[0].title == "second"
    assert not m.setData(idx, "")           # an empty title is refused, the old one kept
    assert m.data(idx) == "second"


def test_model_list_model_joins_tags_and_ps(qtbot):
    from app.gui.chat.chat_lists import ModelListModel
    from app.gui.common.item_models import StateRole

    m = ModelListModel()
    tags = [{"name": "a:latest", "size": 100 * 1024 * 1024}, {"name": "b:latest", "size": 2048}]
    ps = [{"name": "a:latest", "strata": {"state": "loaded"}}]
    m.set_models(tags, ps, {"b:latest": 0.5})
    assert m.rowCount() == 2
    assert m.data(m.index(0)) == "a:latest · 100.0 MiB · loaded"
    assert m.data(m.index(1)) == "b:latest · 2.0 KiB · loading 50%"
    assert m.data(m.index(1), StateRole) == "loading"


def test_parse_sse_events_and_comments():
    raw = [b": ping\n", b"\n", b"event: load_progress\n", b'data: {"model": "m", "progress": 0.5}\n', b"\n",
           b"event: loaded\n", b"data: {\"model\":\n", b"data: \"m\"}\n", b"\n"]

    async def collect():
        async def lines():
            for r in raw:
                yield r
        return [e async for e in parse_sse(lines())]

    assert asyncio.run(collect()) == [("load_progress", {"model": "m", "progress": 0.5}), ("loaded", {"model": "m"})]


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


def test_token_tooltip_lists_alternatives():
    from app.gui.chat.chat_view import token_tooltip

    lp = {"token": " Paris", "logprob": -0.1,
          "top_logprobs": [{"token": " Paris", "logprob": -0.1}, {"token": " Lyon", "logprob": -2.5}]}
    html = token_tooltip(lp)
    assert "Paris" in html and "Lyon" in html and "90.5%" in html and "8.2%" in html


def test_device_and_comparison_table_models(qtbot):
    from PySide6.QtCore import Qt

    from app.gui.memory.memory_data import predicted_vs_actual
    from app.gui.memory.memory_tables import ComparisonTableModel, DeviceTableModel

    inv = {"devices": [{"id": "CUDA0", "name": "RTX", "kind": "gpu", "total": 8 << 30, "free": 6 << 30}],
           "host_ram_total": 32 << 30, "host_ram_available": 20 << 30}
    m = DeviceTableModel()
    m.set_inventory(inv)
    assert (m.rowCount(), m.columnCount()) == (2, 4)
    assert m.data(m.index(0, 0)) == "System RAM"
    assert m.data(m.index(1, 0)) == "CUDA0: RTX"
    assert m.data(m.index(1, 2)) == "8.0 GiB"
    assert m.data(m.index(1, 3), Qt.ToolTipRole) == f"{6 << 30:,} bytes"
    c = ComparisonTableModel()
    c.set_rows(predicted_vs_actual({"CUDA0": 1000}, {"CUDA0": {"model": 900, "kv": 200}}))
    assert [c.data(c.index(0, i)) for i in range(4)] == ["CUDA0", "1000 B", "1.1 KiB", "+100 B"]
    assert c.rowCount() == 1, "an older service's totals: no kinds to compare"
    # with the plan: each device's total, then its kinds as llama.cpp reports them (mapped file pages in "model")
    layout = {"devices": [{"device_id": "CPU", "weights": {"ffn": 800, "repack": 100}, "kv": 200, "compute": 50,
                           "output": 0, "mapped": 100}]}
    c.set_rows(predicted_vs_actual(None, {"CPU": {"model": 900, "repack": 100, "kv": 200, "compute": 60,
                                                  "output": 0}}, layout))
    table = [[c.data(c.index(r, i)) for i in range(4)] for r in range(c.rowCount())]
    assert table == [["CPU", "1.2 KiB", "1.2 KiB", "+10 B"], ["  model (file mapping)", "900 B", "900 B", "0 B"],
                     ["  repacked weights", "100 B", "100 B", "0 B"], ["  KV cache", "200 B", "200 B", "0 B"],
                     ["  compute graph", "50 B", "60 B", "+10 B"]]
    assert "100 B" in c.data(c.index(1, 1), Qt.ToolTipRole) and "reclaimable" in c.data(c.index(1, 1), Qt.ToolTipRole)
    assert c.data(c.index(0, 0), Qt.ForegroundRole) is None and c.data(c.index(1, 0), Qt.ForegroundRole) is not None

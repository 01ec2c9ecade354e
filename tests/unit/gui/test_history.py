"""Chat history in SQLite (app/gui/chat/history.py, no Qt): conversations and their settings survive reopening,
an older chats.db migrates once, rename/delete and bad input, most recent first."""
from __future__ import annotations

import sqlite3

import pytest

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

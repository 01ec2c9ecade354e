"""Chat history in SQLite (stdlib `sqlite3`), at `app.paths.data_dir()/"chats.db"`.

Conversations carry their own settings (model, system prompt, temperature, context length and the other
sampling options) so reopening the app restores each chat exactly. A context length of AUTO_CTX (0) is "auto":
the request sets no num_ctx and the service picks the context (the largest that fits in memory) and grows it.

Messages form a tree: each has a parent (the message before it), so editing a sent message or asking again
adds a sibling and keeps the old branch; the conversation's `leaf_id` is the last message of the branch shown,
and `messages()` is the path from the first message to it. WAL journal with synchronous=NORMAL: a commit is a write to the log without an
fsync, well under a millisecond, so the GUI thread can save a finished message without stalling.
"""
from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from app import paths

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    title       TEXT NOT NULL,
    model       TEXT NOT NULL DEFAULT '',
    system      TEXT NOT NULL DEFAULT '',
    temperature REAL NOT NULL DEFAULT 0.8,
    num_ctx     INTEGER NOT NULL DEFAULT 0,
    options     TEXT NOT NULL DEFAULT '{}',
    tools       TEXT NOT NULL DEFAULT '[]',
    leaf_id     INTEGER,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role            TEXT NOT NULL,
    content         TEXT NOT NULL,
    stats           TEXT NOT NULL DEFAULT '{}',
    logprobs        TEXT NOT NULL DEFAULT '[]',
    blocks          TEXT NOT NULL DEFAULT '{}',
    parent_id       INTEGER,
    created_at      REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""

DEFAULT_TITLE = "New chat"
AUTO_CTX = 0                 # a chat's num_ctx when the user set none (the chat options' "auto")
OLD_DEFAULT_CTX = 4096       # what every chat stored and sent before "auto" existed (schema version 0)
SCHEMA_VERSION = 1           # PRAGMA user_version: 1 = num_ctx 0 means auto


@dataclass
class Conversation:
    id: int
    title: str
    model: str = ""
    system: str = ""
    temperature: float = 0.8
    num_ctx: int = AUTO_CTX                        # AUTO_CTX: not sent, the service picks the context
    options: dict = field(default_factory=dict)    # more Ollama options: top_p, top_k, repeat_penalty, seed, stop
    tools: list = field(default_factory=list)      # the MCP servers whose tools this chat offers the model
    leaf_id: int | None = None                     # the last message of the branch shown
    created_at: float = 0.0
    updated_at: float = 0.0

    @classmethod
    def from_row(cls, row) -> "Conversation":
        d = dict(row)
        d["options"] = json.loads(d.get("options") or "{}")
        d["tools"] = json.loads(d.get("tools") or "[]")
        return cls(**d)


@dataclass
class Message:
    id: int
    conversation_id: int
    role: str                      # "user" | "assistant" | "error"
    content: str
    stats: dict = field(default_factory=dict)      # tokens, tok_s, ttft_ms, ...
    logprobs: list = field(default_factory=list)   # the API's per-token logprobs, when requested
    created_at: float = 0.0
    blocks: dict = field(default_factory=dict)     # thinking, thinking_tokens, tool_calls (shown as their own blocks)
    parent_id: int | None = None                   # the message before it (None: the first)

    @classmethod
    def from_row(cls, r) -> "Message":
        return cls(r["id"], r["conversation_id"], r["role"], r["content"], json.loads(r["stats"]),
                   json.loads(r["logprobs"]), r["created_at"], json.loads(r["blocks"]), r["parent_id"])


SETTINGS = ("title", "model", "system", "temperature", "num_ctx", "options", "tools")


class ChatHistory:
    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else paths.data_dir() / "chats.db"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # The GUI thread is the only user; check_same_thread stays on to catch mistakes.
        self.db = sqlite3.connect(str(self.path))
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.executescript(SCHEMA)
        self._migrate()
        self.db.commit()

    def _migrate(self) -> None:
        """Columns added since the first chats.db; a linear chat of old becomes one branch."""
        columns = {r["name"] for r in self.db.execute("PRAGMA table_info(messages)")}
        if "blocks" not in columns:           # a chats.db from before thinking/tool blocks
            self.db.execute("ALTER TABLE messages ADD COLUMN blocks TEXT NOT NULL DEFAULT '{}'")
        conv_columns = {r["name"] for r in self.db.execute("PRAGMA table_info(conversations)")}
        if "options" not in conv_columns:
            self.db.execute("ALTER TABLE conversations ADD COLUMN options TEXT NOT NULL DEFAULT '{}'")
        if "tools" not in conv_columns:
            self.db.execute("ALTER TABLE conversations ADD COLUMN tools TEXT NOT NULL DEFAULT '[]'")
        if "parent_id" not in columns:
            self.db.execute("ALTER TABLE messages ADD COLUMN parent_id INTEGER")
            self.db.execute("ALTER TABLE conversations ADD COLUMN leaf_id INTEGER")
            self.db.execute("UPDATE messages SET parent_id = (SELECT MAX(p.id) FROM messages p WHERE "
                            "p.conversation_id = messages.conversation_id AND p.id < messages.id)")
            self.db.execute("UPDATE conversations SET leaf_id = (SELECT MAX(m.id) FROM messages m WHERE "
                            "m.conversation_id = conversations.id)")
        if self.db.execute("PRAGMA user_version").fetchone()[0] < 1:
            # Before auto, the context box started at 4096 and every chat stored and sent it, so a stored 4096 is
            # (nearly always) the untouched default, not a choice: it becomes auto, and such chats now get the
            # service's context from memory and its growth. A deliberate 4096 is rare and costs only a larger
            # context when migrated; any other value was set by the user and stays. Once only (user_version),
            # so a 4096 chosen after this is kept.
            self.db.execute("UPDATE conversations SET num_ctx = ? WHERE num_ctx = ?", (AUTO_CTX, OLD_DEFAULT_CTX))
            self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        self.db.close()

    # conversations ---------------------------------------------------------------------------------------------
    def create(self, title: str = DEFAULT_TITLE, model: str = "", system: str = "", temperature: float = 0.8,
               num_ctx: int = AUTO_CTX, options: dict | None = None) -> Conversation:
        now = time.time()
        cur = self.db.execute(
            "INSERT INTO conversations (title, model, system, temperature, num_ctx, options, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (title, model, system, float(temperature), int(num_ctx), json.dumps(options or {}), now, now))
        self.db.commit()
        return self.get(cur.lastrowid)

    def get(self, conversation_id: int) -> Conversation:
        row = self.db.execute("SELECT * FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        if row is None:
            raise KeyError(f"no conversation with id {conversation_id}")
        return Conversation.from_row(row)

    def conversations(self) -> list[Conversation]:
        """Most recently used first."""
        rows = self.db.execute("SELECT * FROM conversations ORDER BY updated_at DESC, id DESC").fetchall()
        return [Conversation.from_row(r) for r in rows]

    def search(self, text: str) -> list[Conversation]:
        """Chats whose title or any message (any branch) contains `text`, case-insensitively; most recent
        first. Empty text: every chat."""
        if not text.strip():
            return self.conversations()
        pattern = "%" + text.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = self.db.execute(
            "SELECT * FROM conversations c WHERE c.title LIKE ? ESCAPE '\\' OR EXISTS (SELECT 1 FROM messages m "
            "WHERE m.conversation_id = c.id AND m.content LIKE ? ESCAPE '\\') ORDER BY updated_at DESC, id DESC",
            (pattern, pattern)).fetchall()
        return [Conversation.from_row(r) for r in rows]

    def update(self, conversation_id: int, **settings) -> Conversation:
        unknown = set(settings) - set(SETTINGS)
        if unknown:
            raise ValueError(f"unknown conversation settings: {sorted(unknown)}")
        if "title" in settings:
            title = str(settings["title"]).strip()
            if not title:
                raise ValueError("a chat title cannot be empty")
            settings["title"] = title[:200]
        if "options" in settings:
            settings["options"] = json.dumps(settings["options"] or {})
        if "tools" in settings:
            settings["tools"] = json.dumps(list(settings["tools"] or []))
        if settings:
            cols = ", ".join(f"{k} = ?" for k in settings)
            self.db.execute(f"UPDATE conversations SET {cols}, updated_at = ? WHERE id = ?",
                            (*settings.values(), time.time(), conversation_id))
            self.db.commit()
        return self.get(conversation_id)

    def rename(self, conversation_id: int, title: str) -> Conversation:
        return self.update(conversation_id, title=title)

    def delete(self, conversation_id: int) -> None:
        self.db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
        self.db.commit()

    # messages ------------------------------------------------------------------------------------------------
    def add_message(self, conversation_id: int, role: str, content: str, stats: dict | None = None,
                    logprobs: list | None = None, blocks: dict | None = None,
                    parent_id: int | None | bool = True) -> Message:
        """Add a message after `parent_id` (default: the last message shown) and show its branch."""
        if parent_id is True:
            parent_id = self.conversation_leaf(conversation_id)
        now = time.time()
        cur = self.db.execute(
            "INSERT INTO messages (conversation_id, role, content, stats, logprobs, blocks, parent_id, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (conversation_id, role, content, json.dumps(stats or {}), json.dumps(logprobs or []),
             json.dumps(blocks or {}), parent_id, now))
        self.db.execute("UPDATE conversations SET updated_at = ?, leaf_id = ? WHERE id = ?",
                        (now, cur.lastrowid, conversation_id))
        self.db.commit()
        return Message(cur.lastrowid, conversation_id, role, content, stats or {}, logprobs or [], now, blocks or {},
                       parent_id)

    def update_message(self, message_id: int, content: str, stats: dict, logprobs: list, blocks: dict) -> Message:
        """A reply that went on (Continue): its whole text and the new totals."""
        self.db.execute("UPDATE messages SET content = ?, stats = ?, logprobs = ?, blocks = ? WHERE id = ?",
                        (content, json.dumps(stats), json.dumps(logprobs), json.dumps(blocks), message_id))
        self.db.commit()
        return self.message(message_id)

    def conversation_leaf(self, conversation_id: int) -> int | None:
        """The last message of the branch shown (None: an empty chat)."""
        row = self.db.execute("SELECT leaf_id FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return row["leaf_id"] if row else None

    def _all(self, conversation_id: int) -> dict[int, Message]:
        rows = self.db.execute("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id",
                               (conversation_id,)).fetchall()
        return {r["id"]: Message.from_row(r) for r in rows}

    def messages(self, conversation_id: int) -> list[Message]:
        """The branch shown: from the first message to the conversation's leaf."""
        everything = self._all(conversation_id)
        path = []
        mid = self.conversation_leaf(conversation_id)
        while mid is not None and mid in everything:
            path.append(everything[mid])
            mid = everything[mid].parent_id
        return path[::-1]

    def message(self, message_id: int) -> Message:
        row = self.db.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            raise KeyError(f"no message with id {message_id}")
        return Message.from_row(row)

    def siblings(self, message_id: int) -> list[int]:
        """The ids of the messages that share this one's parent (itself included), oldest first: its branches."""
        return self._sibling_ids(self.message(message_id))

    def show_branch(self, message_id: int) -> None:
        """Show the branch through `message_id`: down from it, always the newest child."""
        m = self.message(message_id)
        leaf = message_id
        while True:
            row = self.db.execute("SELECT MAX(id) AS id FROM messages WHERE parent_id = ?", (leaf,)).fetchone()
            if row["id"] is None:
                break
            leaf = row["id"]
        self.set_leaf(m.conversation_id, leaf)

    def set_leaf(self, conversation_id: int, message_id: int | None) -> None:
        self.db.execute("UPDATE conversations SET leaf_id = ? WHERE id = ?", (message_id, conversation_id))
        self.db.commit()

    def delete_message(self, message_id: int) -> None:
        """Remove one message; what followed it now follows its parent. Shown instead of it: its newest branch
        sibling's branch, else its parent."""
        try:
            m = self.message(message_id)
        except KeyError:
            return
        self.db.execute("UPDATE messages SET parent_id = ? WHERE parent_id = ?", (m.parent_id, message_id))
        self.db.execute("DELETE FROM messages WHERE id = ?", (message_id,))
        if self.conversation_leaf(m.conversation_id) == message_id:
            others = [i for i in self._sibling_ids(m) if i != message_id]
            if others:
                self.show_branch(others[-1])
            else:
                self.set_leaf(m.conversation_id, m.parent_id)
        self.db.commit()

    def _sibling_ids(self, m: Message) -> list[int]:
        rows = self.db.execute("SELECT id FROM messages WHERE conversation_id = ? AND parent_id IS ? ORDER BY id",
                               (m.conversation_id, m.parent_id)).fetchall()
        return [r["id"] for r in rows]

    def title_from(self, text: str) -> str:
        """A title from the first user message: its first line, shortened."""
        line = " ".join(text.strip().split())
        return (line[:48] + "…") if len(line) > 48 else (line or DEFAULT_TITLE)

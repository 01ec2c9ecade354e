"""Chat history in SQLite (stdlib `sqlite3`), at `app.paths.data_dir()/"chats.db"`.

Conversations carry their own settings (model, system prompt, temperature, context length) so reopening the
app restores each chat exactly. WAL journal with synchronous=NORMAL: a commit is a write to the log without an
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
    num_ctx     INTEGER NOT NULL DEFAULT 4096,
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
    created_at      REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""

DEFAULT_TITLE = "New chat"


@dataclass
class Conversation:
    id: int
    title: str
    model: str = ""
    system: str = ""
    temperature: float = 0.8
    num_ctx: int = 4096
    created_at: float = 0.0
    updated_at: float = 0.0


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


SETTINGS = ("title", "model", "system", "temperature", "num_ctx")


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
        columns = {r["name"] for r in self.db.execute("PRAGMA table_info(messages)")}
        if "blocks" not in columns:           # a chats.db from before thinking/tool blocks
            self.db.execute("ALTER TABLE messages ADD COLUMN blocks TEXT NOT NULL DEFAULT '{}'")
        self.db.commit()

    def close(self) -> None:
        self.db.close()

    # conversations ---------------------------------------------------------------------------------------------
    def create(self, title: str = DEFAULT_TITLE, model: str = "", system: str = "", temperature: float = 0.8,
               num_ctx: int = 4096) -> Conversation:
        now = time.time()
        cur = self.db.execute(
            "INSERT INTO conversations (title, model, system, temperature, num_ctx, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)", (title, model, system, float(temperature), int(num_ctx), now, now))
        self.db.commit()
        return self.get(cur.lastrowid)

    def get(self, conversation_id: int) -> Conversation:
        row = self.db.execute("SELECT * FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        if row is None:
            raise KeyError(f"no conversation with id {conversation_id}")
        return Conversation(**dict(row))

    def conversations(self) -> list[Conversation]:
        """Most recently used first."""
        rows = self.db.execute("SELECT * FROM conversations ORDER BY updated_at DESC, id DESC").fetchall()
        return [Conversation(**dict(r)) for r in rows]

    def update(self, conversation_id: int, **settings) -> Conversation:
        unknown = set(settings) - set(SETTINGS)
        if unknown:
            raise ValueError(f"unknown conversation settings: {sorted(unknown)}")
        if "title" in settings:
            title = str(settings["title"]).strip()
            if not title:
                raise ValueError("a chat title cannot be empty")
            settings["title"] = title[:200]
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

    # messages --------------------------------------------------------------------------------------------------
    def add_message(self, conversation_id: int, role: str, content: str, stats: dict | None = None,
                    logprobs: list | None = None, blocks: dict | None = None) -> Message:
        now = time.time()
        cur = self.db.execute(
            "INSERT INTO messages (conversation_id, role, content, stats, logprobs, blocks, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (conversation_id, role, content, json.dumps(stats or {}), json.dumps(logprobs or []),
             json.dumps(blocks or {}), now))
        self.db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id))
        self.db.commit()
        return Message(cur.lastrowid, conversation_id, role, content, stats or {}, logprobs or [], now, blocks or {})

    def messages(self, conversation_id: int) -> list[Message]:
        rows = self.db.execute("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id",
                               (conversation_id,)).fetchall()
        return [Message(r["id"], r["conversation_id"], r["role"], r["content"], json.loads(r["stats"]),
                        json.loads(r["logprobs"]), r["created_at"], json.loads(r["blocks"])) for r in rows]

    def delete_message(self, message_id: int) -> None:
        self.db.execute("DELETE FROM messages WHERE id = ?", (message_id,))
        self.db.commit()

    def title_from(self, text: str) -> str:
        """A title from the first user message: its first line, shortened."""
        line = " ".join(text.strip().split())
        return (line[:48] + "…") if len(line) > 48 else (line or DEFAULT_TITLE)

"""The request log on disk: every finished request's record (metadata, timings, usage, the cache report, and its
bounded bodies with credentials already masked by request_log) in SQLite in the data dir (`requests.db`, beside
the store's database), so the Server window lists yesterday's requests after `strata serve` or the app restarts.

- Bounded by count (`MAX_RECORDS`) and bytes (`MAX_BYTES`): the oldest go first, checked every PRUNE_EVERY writes.
- Written on a thread of its own (a queue of records; at most QUEUE_MAX waiting, then the oldest waiting are
  dropped): the event loop never waits on the disk.
- Bodies can be left out (setting `request_log_bodies` / STRATA_REQUEST_LOG_BODIES=0: privacy): then only the
  metadata is kept, here and in memory.
- Searchable by client (User-Agent), model, status class and path (`search`), newest first, paged by id.
Covered by tests/unit/service/http/test_request_history.py and tests/integration/service/test_request_history_api.py."""
from __future__ import annotations

import json
import logging
import queue
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger("strata.service")

FILE_NAME = "requests.db"
MAX_RECORDS = 5000
MAX_BYTES = 64 * 1024 * 1024
PRUNE_EVERY = 50
QUEUE_MAX = 1000

SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    client TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    status INTEGER,
    method TEXT NOT NULL DEFAULT '',
    path TEXT NOT NULL DEFAULT '',
    record TEXT NOT NULL,          -- the list view's record (request_log.RequestRecord.to_dict())
    detail TEXT NOT NULL,          -- headers and bodies (the detail view's extra keys)
    bytes INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_time ON requests(time);
"""
DETAIL_KEYS = ("headers", "request_body", "request_bytes", "reply_body", "reply_bytes", "body_limit")


class RequestHistory:
    def __init__(self, path: str | Path, max_records: int = MAX_RECORDS, max_bytes: int = MAX_BYTES):
        self.path = Path(path)
        self.max_records, self.max_bytes = max_records, max_bytes
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._read = self._connect()
        self._read_lock = threading.Lock()
        self._q: queue.Queue = queue.Queue()
        self._writes = 0
        self._thread = threading.Thread(target=self._writer, name="strata-request-history", daemon=True)
        self._thread.start()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, timeout=10)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(SCHEMA)
        return db

    # ---- writing (a thread of its own) ----------------------------------------------------------------------------
    def add(self, full: dict) -> None:
        """Queue a finished request's record (to_dict(detail=True)) for writing."""
        while self._q.qsize() >= QUEUE_MAX:
            try:
                self._q.get_nowait()
            except queue.Empty:
                break
        self._q.put(full)

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until everything queued is written (tests; shutdown)."""
        done = threading.Event()
        self._q.put(done)
        done.wait(timeout)

    def close(self) -> None:
        self.flush()
        self._q.put(None)
        self._thread.join(timeout=10)
        with self._read_lock:
            self._read.close()

    def _writer(self) -> None:
        db = self._connect()
        try:
            while True:
                item = self._q.get()
                if item is None:
                    return
                if isinstance(item, threading.Event):
                    item.set()
                    continue
                try:
                    self._write(db, item)
                except Exception:  # noqa: BLE001 - the log on disk is an extra; the service goes on
                    log.exception("writing request %s to the history failed", item.get("id"))
        finally:
            db.close()

    def _write(self, db: sqlite3.Connection, full: dict) -> None:
        record = {k: v for k, v in full.items() if k not in DETAIL_KEYS}
        detail = {k: full[k] for k in DETAIL_KEYS if k in full}
        if isinstance(record.get("cache"), dict) and "anatomy" in record["cache"]:
            # the anatomy belongs with the detail, as in memory (a long session's has a part per message)
            record["cache"] = dict(record["cache"])
            detail["anatomy"] = record["cache"].pop("anatomy")
        rtext = json.dumps(record, ensure_ascii=False, default=str)
        dtext = json.dumps(detail, ensure_ascii=False, default=str)
        with db:
            db.execute("INSERT OR REPLACE INTO requests (id, time, client, model, status, method, path, record, "
                       "detail, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (int(full["id"]), float(full.get("time") or 0), full.get("client") or "",
                        full.get("model") or "", full.get("status"), full.get("method") or "",
                        full.get("path") or "", rtext, dtext, len(rtext) + len(dtext)))
        self._writes += 1
        if self._writes % PRUNE_EVERY == 0:
            self.prune(db)

    def prune(self, db: sqlite3.Connection | None = None) -> None:
        """Drop the oldest records beyond the count and byte bounds."""
        own = db is None
        db = db or self._connect()
        try:
            with db:
                db.execute("DELETE FROM requests WHERE id NOT IN (SELECT id FROM requests ORDER BY id DESC "
                           "LIMIT ?)", (self.max_records,))
                total = db.execute("SELECT COALESCE(SUM(bytes), 0) FROM requests").fetchone()[0]
                if total > self.max_bytes:
                    cut, acc = None, 0
                    for rid, b in db.execute("SELECT id, bytes FROM requests ORDER BY id DESC"):
                        acc += b
                        if acc > self.max_bytes:
                            cut = rid
                            break
                    if cut is not None:
                        db.execute("DELETE FROM requests WHERE id <= ?", (cut,))
        finally:
            if own:
                db.close()

    # ---- reading --------------------------------------------------------------------------------------------------
    def last_id(self) -> int:
        with self._read_lock:
            row = self._read.execute("SELECT MAX(id) FROM requests").fetchone()
        return int(row[0] or 0)

    def search(self, *, client: str = "", model: str = "", status: str = "", path: str = "",
               before: int | None = None, limit: int = 200) -> list[dict]:
        """Records newest first: `client` and `model` match a part of the User-Agent / model name (case-insensitive),
        `status` is a code ("404"), a class ("4xx", "5xx"), "error" (>= 400) or "ok" (< 400); `before` pages by id."""
        where: list[str] = []
        args: list[object] = []
        if client:
            where.append("client LIKE ?")
            args.append(f"%{client}%")
        if model:
            where.append("model LIKE ?")
            args.append(f"%{model}%")
        if path:
            where.append("path LIKE ?")
            args.append(f"%{path}%")
        if status:
            s = status.strip().lower()
            if s == "error":
                where.append("status >= 400")
            elif s == "ok":
                where.append("status < 400")
            elif len(s) == 3 and s.endswith("xx") and s[0].isdigit():
                where.append("status BETWEEN ? AND ?")
                args += [int(s[0]) * 100, int(s[0]) * 100 + 99]
            elif s.isdigit():
                where.append("status = ?")
                args.append(int(s))
        if before is not None:
            where.append("id < ?")
            args.append(int(before))
        sql = "SELECT record FROM requests" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY id DESC LIMIT ?"
        args.append(max(1, min(int(limit), 5000)))
        with self._read_lock:
            rows = self._read.execute(sql, args).fetchall()
        return [json.loads(r[0]) for r in rows]

    def get(self, rid: int) -> dict | None:
        """One record with its detail (headers, bodies)."""
        with self._read_lock:
            row = self._read.execute("SELECT record, detail FROM requests WHERE id = ?", (int(rid),)).fetchone()
        if row is None:
            return None
        record, detail = json.loads(row[0]), json.loads(row[1])
        anatomy = detail.pop("anatomy", None)
        if anatomy is not None and isinstance(record.get("cache"), dict):
            record["cache"]["anatomy"] = anatomy
        return {**record, **detail}

    def count(self) -> tuple[int, int]:
        with self._read_lock:
            n, b = self._read.execute("SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM requests").fetchone()
        return int(n), int(b)

"""The request log: what every API request did, kept in memory for the desktop's Server window and
`GET /api/requests`. A ring of the last requests in memory, and the finished ones that carry work (not GET/HEAD:
a client polling /api/tags would push the generations out) in SQLite in the data dir (request_history.py), so
they outlive a restart; while a subscriber of `/api/events` asked for
them (`?include=request`), each request is also published as it starts, gets its model and ends.

Fed without touching the dialects: `middleware` opens a record per HTTP request (route, client, status, the error
message of an error body, bounded bodies with secrets masked) and keeps it in a context variable, so the few hooks
further in find it without being handed it: `note_body`/`note_model` (http/bodies.read_json: the body as read, the model
it names), `leased` (generation/pipeline.generate: the lease's load and queue waits and the GenerationResult, whose
timings, usage, cache and draft counts the record reads when the request ends) and `note_error` (an error rendered
inside a stream that had already answered 200).

A request's timeline is cut at instants it passed, so its parts add up to its time exactly:
prepare (parse, resolve the model) -> load (waiting for the model to load) -> queued (waiting for a slot) ->
prefill (prompt fitted and processed, up to the first output) -> decode (to the last token) -> finish (the answer's
last bytes). A request that is not a generation has one part, `answer`.
Covered by tests/unit/service/http/test_request_log.py and tests/gui/test_gui_server.py."""
from __future__ import annotations

import asyncio
import contextvars
import json
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .metrics import LoadedModels

BODY_LIMIT = 16 * 1024          # bytes of a request or reply body a record keeps (the rest is counted, not kept)
HISTORY_BODY_LIMIT = 1024 * 1024   # ... of a request body the history on disk keeps (enough to replay an agent's)
RING = 500                      # records kept of requests that carry work (anything but GET/HEAD)
RING_READS = 100                # ... and of GET/HEAD requests, kept apart so a client polling /api/tags every few
                                # seconds cannot push the generations out
QUEUED_AFTER = 0.010            # seconds of waiting for a slot that count as "queued"
NOT_LOGGED = ("/api/events", "/api/requests")    # the window's own feed
CLIENT_CLOSED_REQUEST = 499
REPLAY_HEADER = "X-Strata-Replay-Of"     # a replayed request names the one it replays
ID_HEADER = "X-Strata-Request-Id"       # every logged request's answer names its record

# Headers whose values are credentials: shown by name only.
SECRET_HEADERS = {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie", "set-cookie",
                  "x-goog-api-key", "openai-organization", "openai-project"}
SECRET_HEADER_WORDS = ("token", "secret", "password", "api-key", "apikey", "auth")
_SECRET_FIELDS = re.compile(
    r'("(?:api_?key|apiKey|x-api-key|authorization|password|secret|client_secret|access_token|refresh_token|'
    r'token|bearer)"\s*:\s*)"(?:[^"\\]|\\.)*"', re.IGNORECASE)
MASK = "•••"
FLAG_TOKENS = 8                 # a request that computed more than this beyond its new tail is marked
RATE_MIN_TOKENS = 64            # a request that computed fewer prompt tokens does not measure the prefill rate

_current: contextvars.ContextVar["RequestRecord | None"] = contextvars.ContextVar("strata_request", default=None)


def dialect_of(path: str) -> str:
    """Which API a path belongs to, as the window names it."""
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith("/v1/responses"):
        return "openai responses"
    if path.endswith("/rerank"):
        return "rerank"
    if path.startswith("/v1/"):
        return "openai"
    if path in ("/metrics",) or path.startswith(("/api/devices", "/api/layout", "/api/import", "/api/openapi",
                                                 "/api/events", "/api/requests")):
        return "strata"
    if path.startswith("/api/"):
        return "ollama"
    return ""


def safe_headers(headers) -> dict[str, str]:
    """Request headers with every credential's value masked (its name stays, so one can see it was sent)."""
    out = {}
    for k, v in headers.items():
        low = k.lower()
        if low in SECRET_HEADERS or any(w in low for w in SECRET_HEADER_WORDS):
            out[k] = MASK
        else:
            out[k] = v[:512]
    return out


def safe_text(raw: bytes | str | None, limit: int = BODY_LIMIT) -> str:
    """The first `limit` bytes of a body as text, credentials in JSON fields (api_key, password...) masked."""
    if not raw:
        return ""
    text = raw if isinstance(raw, str) else raw[:limit].decode("utf-8", "replace")
    text = text[:limit]
    return _SECRET_FIELDS.sub(lambda m: f'{m.group(1)}"{MASK}"', text)


def error_message(body: bytes | None) -> str:
    """The message of an error body in any dialect's shape: Ollama {"error": "..."}, OpenAI/Anthropic
    {"error": {"message": "..."}}; the text itself when it is not JSON."""
    if not body:
        return ""
    try:
        obj = json.loads(body[:BODY_LIMIT * 4])
    except (ValueError, UnicodeDecodeError):
        return body[:300].decode("utf-8", "replace").strip()
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict):
        err = err.get("message") or err.get("type")
    return str(err or (obj.get("message") if isinstance(obj, dict) else "") or "")[:2000]


@dataclass(eq=False)
class RequestRecord:
    id: int
    method: str
    path: str
    client: str
    started: float = field(default_factory=time.time)           # wall clock, for the list
    t0: float = field(default_factory=time.monotonic)
    route: str = ""
    model: str = ""
    status: int | None = None                                   # None while it runs
    error: str = ""
    headers: dict = field(default_factory=dict)
    request_body: str = ""
    request_bytes: int = 0
    reply_body: str = ""
    request_body_full: str = ""         # a longer request body, until the history has written it
    replay_of: int | None = None        # the request this one replays (POST /api/requests/{id}/replay)
    t_progress: float = 0.0             # when its prefill progress was last published
    reply_bytes: int = 0
    load_wait: float = 0.0
    queue_wait: float = 0.0
    t_slot: float | None = None                                 # monotonic instants the request passed
    t_end: float | None = None
    result: Any = None          # the generation's GenerationResult when it had one (http/ cannot import generation/)
    prefill_rate: float | None = None   # prompt tokens/s of the model when it ended (this request's own, when it
                                        # computed enough of its prompt to measure): what a part of it costs
    log: "RequestLog | None" = field(default=None, repr=False)  # where its updates go out

    @property
    def dialect(self) -> str:
        return dialect_of(self.path)

    def _finished(self):
        return getattr(self.result, "finished", None)

    def phases(self) -> list[tuple[str, float]]:
        """(name, seconds) parts of the request's time so far; they add up to it exactly."""
        end = self.t_end if self.t_end is not None else time.monotonic()
        if self.t_slot is None:
            return [("answer", end - self.t0)]
        t_loaded = self.t_slot - self.queue_wait
        t_lease = t_loaded - self.load_wait
        first = getattr(self.result, "first_output", None)
        fin = getattr(self.result, "finished_at", None)
        marks = [("prepare", t_lease), ("load", t_loaded), ("queued", self.t_slot), ("prefill", first),
                 ("decode", fin), ("finish", end)]
        out, prev = [], self.t0
        for name, t in marks:
            if t is None:
                continue
            t = min(max(t, prev), end)
            out.append((name, t - prev))
            prev = t
        return out

    def to_dict(self, detail: bool = False) -> dict:
        fin = self._finished()
        r = self.result
        end = self.t_end if self.t_end is not None else time.monotonic()
        first = getattr(r, "first_output", None)
        d = {
            "id": self.id, "time": self.started, "method": self.method, "path": self.path,
            "route": self.route or self.path, "dialect": self.dialect, "client": self.client, "model": self.model,
            "status": self.status, "state": "running" if self.t_end is None else "done", "error": self.error,
            "duration": end - self.t0,
            "phases": [[n, s] for n, s in self.phases()],
            "load_wait": self.load_wait, "queue_wait": self.queue_wait,
            "queued": self.queue_wait >= QUEUED_AFTER,
            "ttft": (first - self.t0) if first is not None else None,
            "replay_of": self.replay_of,
            "output_tokens": getattr(r, "output_tokens", 0),
        }
        prog = getattr(r, "progress", None)
        if fin is None and prog is not None and getattr(r, "first_output", None) is None:
            d["progress"] = progress_summary(prog, self.log.prefill_rates.get(self.model) if self.log else None)
        if fin is not None:
            d.update(prompt_tokens=fin.prompt_tokens, cached_tokens=fin.cached_tokens,
                     completion_tokens=fin.completion_tokens, reason=fin.reason,
                     prompt_seconds=fin.prompt_seconds, generation_seconds=fin.generation_seconds,
                     tokens_per_second=(fin.completion_tokens / fin.generation_seconds
                                        if fin.generation_seconds > 0 else None),
                     drafted=fin.draft_tokens, accepted=fin.draft_accepted)
            if fin.report:
                cache = d["cache"] = cache_summary(fin.report, self.prefill_rate, detail)
                prev = cache.get("previous")
                if prev and self.log is not None:
                    prev["record"] = self.log.by_runner_id.get(prev.get("request"))
        if detail:
            keep = self.log is None or self.log.bodies
            d.update(headers=self.headers, request_body=self.request_body, request_bytes=self.request_bytes,
                     reply_body=(self.reply_body or self._reply_from_result()) if keep else "",
                     reply_bytes=self.reply_bytes, body_limit=BODY_LIMIT if keep else 0)
        return d

    def _reply_from_result(self) -> str:
        """A streamed reply's content, from the generation's result (its frames are not kept)."""
        r = self.result
        if r is None:
            return ""
        parts = {}
        if getattr(r, "thinking", ""):
            parts["thinking"] = r.thinking
        parts["content"] = r.text
        calls = getattr(r, "tool_calls", None)
        if calls:
            parts["tool_calls"] = [{"name": c.name, "arguments": c.arguments} for c in calls]
        fin = self._finished()
        if fin is not None:
            parts["done_reason"] = fin.reason
        return safe_text(json.dumps(parts, ensure_ascii=False, indent=1, default=str))


class RequestLog:
    """The rings of records, the totals the Server window's plots read (`stats`), and the bus they go out on."""

    def __init__(self, bus=None, ring: int = RING, ring_reads: int = RING_READS, history=None,
                 bodies: bool = True):
        self.bus = bus
        self.history = history          # request_history.RequestHistory: finished work requests on disk, or None
        self.bodies = bodies            # False: no request or reply bodies are kept (privacy), in memory or on disk
        self._work: deque[RequestRecord] = deque(maxlen=ring)
        self._reads: deque[RequestRecord] = deque(maxlen=ring_reads)
        self.running: set[RequestRecord] = set()
        self._next = (history.last_id() + 1) if history is not None else 1    # ids go on across restarts
        # totals of finished generations (the live part of running ones is added by `totals`)
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.output_tokens = 0
        self.requests = 0
        self.errors = 0
        self.prefill_rates: dict[str, float] = {}      # model -> prompt tokens/s (see _prefill_rate)
        self.by_runner_id: dict[str, int] = {}         # a runner's request id -> its record's (the explainer
                                                        # names the previous prompt by the former)

    def begin(self, request: web.Request) -> RequestRecord:
        rec = RequestRecord(self._next, request.method, request.path, request.headers.get("User-Agent", ""),
                            log=self)
        self._next += 1
        (self._reads if request.method in ("GET", "HEAD") else self._work).append(rec)
        self.running.add(rec)
        self.publish(rec)
        return rec

    def end(self, rec: RequestRecord) -> None:
        rec.t_end = time.monotonic()
        self.running.discard(rec)
        self.requests += 1
        if rec.status is not None and rec.status >= 400:
            self.errors += 1
        fin = rec._finished()
        if fin is not None:
            rec.prefill_rate = self._prefill_rate(rec.model, fin)
            if fin.report and fin.report.get("request"):
                self.by_runner_id[fin.report["request"]] = rec.id
                while len(self.by_runner_id) > RING:
                    self.by_runner_id.pop(next(iter(self.by_runner_id)))
            self.prompt_tokens += fin.prompt_tokens
            self.cached_tokens += fin.cached_tokens
            self.output_tokens += fin.completion_tokens
        elif rec.result is not None:
            self.output_tokens += getattr(rec.result, "output_tokens", 0)
        self.publish(rec)
        if self.history is not None and rec.method not in ("GET", "HEAD"):
            full = rec.to_dict(detail=True)
            if rec.request_body_full:
                full["request_body"], full["body_limit"] = rec.request_body_full, HISTORY_BODY_LIMIT
                rec.request_body_full = ""
            self.history.add(full)

    def attach_history(self, history) -> None:
        """Keep finished work requests on disk from now on (the service's startup opens it); ids go on from the
        last one it holds."""
        self.history = history
        self._next = max(self._next, history.last_id() + 1)

    def _prefill_rate(self, model: str, fin) -> float | None:
        """Prompt tokens a second on `model` as measured now: this request's when it computed at least
        RATE_MIN_TOKENS of its prompt (kept, per model, as a moving average), else the model's last."""
        computed = fin.prompt_tokens - fin.cached_tokens
        if computed >= RATE_MIN_TOKENS and fin.prompt_seconds > 0:
            rate = computed / fin.prompt_seconds
            old = self.prefill_rates.get(model)
            self.prefill_rates[model] = rate if old is None else 0.5 * old + 0.5 * rate
            return rate
        return self.prefill_rates.get(model)

    def publish(self, rec: RequestRecord) -> None:
        if self.bus is not None and self.bus.wants("request"):
            self.bus.publish("request", rec.to_dict())

    def records(self) -> list[RequestRecord]:
        """Newest first."""
        return sorted([*self._work, *self._reads], key=lambda r: r.id, reverse=True)

    def get(self, rid: int) -> RequestRecord | None:
        for r in (*self._work, *self._reads):
            if r.id == rid:
                return r
        return None

    def detail(self, rid: int) -> dict | None:
        """One request with its headers and bodies: from memory, else from the history on disk (whose request body
        may be longer: HISTORY_BODY_LIMIT)."""
        rec = self.get(rid)
        stored = self.history.get(rid) if self.history is not None and (
            rec is None or (rec.t_end is not None and rec.request_bytes > BODY_LIMIT)) else None
        if rec is None:
            return stored
        d = rec.to_dict(detail=True)
        if stored and len(stored.get("request_body") or "") > len(d["request_body"]):
            d["request_body"], d["body_limit"] = stored["request_body"], stored.get("body_limit", d["body_limit"])
        return d

    def listing(self, *, client: str = "", model: str = "", status: str = "", path: str = "",
                before: int | None = None, limit: int | None = None) -> list[dict]:
        """Records newest first (the list view's, without bodies): the rings in memory, and with a history on disk
        the finished requests it holds too (earlier runs of the service included), filtered as
        RequestHistory.search says (case-insensitive parts of the client and model, a status code or class)."""
        rows = {r.id: r.to_dict() for r in self.records()}
        if self.history is not None:
            for d in self.history.search(client=client, model=model, status=status, path=path, before=before,
                                         limit=limit or RING):
                rows.setdefault(int(d["id"]), d)
        out = [d for d in rows.values() if _matches(d, client, model, status, path, before)]
        out.sort(key=lambda d: d["id"], reverse=True)
        return out[:limit] if limit else out

    def totals(self) -> dict:
        """Counters since the service started; generated tokens include what running replies streamed so far."""
        live = 0
        for r in self.running:
            if r.result is not None and r._finished() is None:
                live += getattr(r.result, "output_tokens", 0)
            elif r._finished() is not None:
                live += r._finished().completion_tokens
        return {"requests": self.requests, "errors": self.errors, "running": len(self.running),
                "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                "output_tokens": self.output_tokens + live}


def _matches(d: dict, client: str, model: str, status: str, path: str, before: int | None) -> bool:
    if client and client.lower() not in (d.get("client") or "").lower():
        return False
    if model and model.lower() not in (d.get("model") or "").lower():
        return False
    if path and path.lower() not in (d.get("path") or "").lower():
        return False
    if before is not None and d["id"] >= before:
        return False
    if status:
        code, s = d.get("status"), status.strip().lower()
        if s == "error":
            return code is not None and code >= 400
        if s == "ok":
            return code is not None and code < 400
        if len(s) == 3 and s.endswith("xx") and s[0].isdigit():
            return code is not None and code // 100 == int(s[0])
        if s.isdigit():
            return code == int(s)
    return True


async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    """Every logged request's answer names its record (X-Strata-Request-Id): a replay finds its new record."""
    rec = _current.get()
    if rec is not None:
        response.headers[ID_HEADER] = str(rec.id)


def middleware(log: RequestLog):
    """One record per request, outermost (after the error middleware has made every failure a JSON answer)."""
    @web.middleware
    async def record(request: web.Request, handler):
        if request.path.startswith(NOT_LOGGED):
            return await handler(request)
        rec = log.begin(request)
        token = _current.set(rec)
        rec.headers = safe_headers(request.headers)
        replay = request.headers.get(REPLAY_HEADER, "")
        rec.replay_of = int(replay) if replay.isdigit() else None
        try:
            resp = await handler(request)
            rec.status = resp.status
            if not resp.prepared:
                resp.headers[ID_HEADER] = str(rec.id)
            body = getattr(resp, "body", None) if isinstance(resp, web.Response) else None
            if isinstance(body, (bytes, bytearray)):
                rec.reply_bytes = len(body)
                rec.reply_body = safe_text(bytes(body)) if log.bodies else ""
                if resp.status >= 400 and not rec.error:
                    rec.error = error_message(bytes(body))
            return resp
        except web.HTTPException as e:
            rec.status = e.status
            rec.error = rec.error or e.text or e.reason
            raise
        except (asyncio.CancelledError, ConnectionResetError):
            rec.status = CLIENT_CLOSED_REQUEST
            rec.error = rec.error or "the client closed the connection"
            raise
        except Exception as e:
            rec.status = 500
            rec.error = rec.error or f"{type(e).__name__}: {e}"
            raise
        finally:
            route = request.match_info.route
            rec.route = (route.resource.canonical if route is not None and route.resource is not None
                         else request.path)
            _current.reset(token)
            log.end(rec)
    return record


def progress_summary(p, model_rate: float | None) -> dict:
    """A prompt being read: its counts, the rate measured on it so far (else the model's last), and the seconds
    left at that rate (None when nothing measures it yet)."""
    done = p.processed - p.cached
    rate = done / p.seconds if done >= RATE_MIN_TOKENS and p.seconds > 0 else model_rate
    left = max(0, p.total - p.processed)
    return {"total": p.total, "cached": p.cached, "processed": p.processed, "seconds": p.seconds,
            "rate": rate, "eta": left / rate if rate else None}


def cache_summary(report: dict, rate: float | None, detail: bool) -> dict:
    """A generation's cache report (runner/cache/explain.py) as the log shows it: in the list, the verdict, what was
    reused from where and the divergence; in detail also the anatomy, each part with what it costs to compute at
    the measured prefill `rate` (seconds; None before anything was measured)."""
    keys = ("verdict", "source", "cached", "moved", "new_tail", "recomputed_beyond_tail", "candidates", "previous",
            "divergence", "prompt_tokens")
    out = {k: report[k] for k in keys if k in report}
    out["flagged"] = report.get("recomputed_beyond_tail", 0) > FLAG_TOKENS
    out["prefill_rate"] = rate
    if detail and report.get("anatomy"):
        out["anatomy"] = [dict(p, seconds=(p["tokens"] / rate if rate else None)) for p in report["anatomy"]]
        if "tools_called" in report:      # the offered tools never called so far, and what their schemas cost
            called = set(report["tools_called"])
            out["tools_called"] = report["tools_called"]
            if any(p["kind"] == "tool" for p in report["anatomy"]):     # (a prompt without its tools offers none)
                unused = [p for p in report["anatomy"] if p["kind"] == "tool" and p["label"] not in called]
                out["tools_unused"] = {"names": [p["label"] for p in unused],
                                       "tokens": sum(p["tokens"] for p in unused)}
    return out


# ---- hooks (each a no-op outside a logged request) -----------------------------------------------------------

def note_body(raw: bytes) -> None:
    """The request's body as read (bounded, credentials masked)."""
    rec = _current.get()
    if rec is not None:
        rec.request_bytes = len(raw)
        keep = rec.log is None or rec.log.bodies
        rec.request_body = safe_text(raw) if keep else ""
        if keep and rec.log is not None and rec.log.history is not None and len(raw) > BODY_LIMIT:
            # the history on disk keeps more of it (an agent's 120 KB request can be replayed from there); the
            # record holds it only until it is written
            rec.request_body_full = safe_text(raw, HISTORY_BODY_LIMIT)


def note_model(body: dict) -> None:
    """The model the parsed body names, until a lease says which model it resolved to."""
    rec = _current.get()
    if rec is not None and not rec.model and isinstance(body.get("model"), str):
        rec.model = body["model"][:200]


def leased(lease, result) -> None:
    """A request got its model and slot: its waits, the model's name, and the generation's result it fills in
    (None for a request that is not a generation: embeddings, reranking, token counts)."""
    rec = _current.get()
    if rec is None:
        return
    rec.t_slot = time.monotonic()
    rec.load_wait, rec.queue_wait = lease.load_wait, lease.queue_wait
    rec.model = lease.model.name
    rec.result = result
    if rec.log is not None:
        rec.log.publish(rec)


PROGRESS_EVERY_S = 0.5          # a running request's prefill progress goes out at most this often


def note_progress(progress) -> None:
    """A long prompt's progress (generation.result.PromptProgress; the record reads it from its result): published
    to the window at most every PROGRESS_EVERY_S."""
    rec = _current.get()
    if rec is None or rec.log is None:
        return
    now = time.monotonic()
    if now - rec.t_progress >= PROGRESS_EVERY_S:
        rec.t_progress = now
        rec.log.publish(rec)


def note_error(message: str) -> None:
    """An error that reached the client inside a stream already answered 200."""
    rec = _current.get()
    if rec is not None and not rec.error:
        rec.error = message


# ---- the plots' feed ---------------------------------------------------------------------------------------------

MEMORY_KINDS = {"model": "weights", "repack": "weights", "kv": "kv", "compute": "compute", "output": "compute",
                "projector": "projector", "draft": "draft"}


def server_stats(log: RequestLog, scheduler: LoadedModels | None) -> dict:
    """One sample for the Server window's plots (`stats` events, one a second to a subscriber that asked): the
    request totals, slots busy and queued over every loaded model, and memory by kind (the plan's bytes per kind
    summed over devices, the prompt caches' and context checkpoints' host RAM as they are now)."""
    busy = total = queued = 0
    memory: dict[str, int] = {}
    for m in (scheduler.snapshot() if scheduler is not None else ()):
        if m.state == "failed":
            continue
        busy += m.slots_busy
        total += m.slots_total
        queued += max(0, m.queued)
        for kinds in m.predicted_kinds.values():
            for kind, b in kinds.items():
                if b:
                    name = MEMORY_KINDS.get(kind, kind)
                    memory[name] = memory.get(name, 0) + int(b)
        pc = m.prompt_cache()
        if pc.get("bytes"):
            memory["prompt cache"] = memory.get("prompt cache", 0) + int(pc["bytes"])
        if pc.get("checkpoint_bytes"):
            memory["checkpoints"] = memory.get("checkpoints", 0) + int(pc["checkpoint_bytes"])
    return {"time": time.time(), **log.totals(), "slots_busy": busy, "slots_total": total, "queued": queued,
            "memory": memory}

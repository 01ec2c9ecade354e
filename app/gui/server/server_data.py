"""What the Server window shows, without Qt: the request records as the service's request log sends them
(`GET /api/requests`, `request` events; app/service/http/request_log.py), their cells, their timelines, and the
plots' series built from the `stats` samples (one a second while the window listens).
Covered by tests/gui/test_gui_server.py."""
from __future__ import annotations

import math
import re
import time
from collections import OrderedDict, deque

from app.format import format_bytes

WINDOW_SECONDS = 300            # the plots show the last five minutes
HIT_RATE_SECONDS = 60           # the prompt-cache hit rate is over the last minute's prompts
MAX_RECORDS = 1000              # rows the window keeps (the service keeps its own ring)
OWN_CLIENT = "strata-desktop"   # the User-Agent prefix of this app's own requests

COLUMNS = ("Time", "Client", "API", "Model", "Status", "Prompt", "Cached", "Reuse", "Reply", "TTFT", "Tok/s",
           "Drafted", "Accepted", "Queued", "Duration")

PHASES = ("prepare", "load", "queued", "prefill", "decode", "finish", "answer")
PHASE_COLORS = {"prepare": "#9aa5b1", "load": "#e45756", "queued": "#f58518", "prefill": "#4c78a8",
                "decode": "#54a24b", "finish": "#b279a2", "answer": "#72b7b2"}
PHASE_HELP = {"prepare": "reading the request, finding the model", "load": "waiting for the model to load",
              "queued": "waiting for a free slot", "prefill": "processing the prompt, up to the first output",
              "decode": "generating the reply", "finish": "sending the answer's last bytes",
              "answer": "answering the request"}
MEMORY_ORDER = ("weights", "kv", "compute", "prompt cache", "checkpoints", "draft", "projector")
MEMORY_LABELS = {"weights": "Weights", "kv": "KV cache", "compute": "Compute", "prompt cache": "Prompt cache",
                 "checkpoints": "Checkpoints", "draft": "Draft model", "projector": "Vision projector"}

_VERSION = re.compile(r"^v?\d[\w.\-+]*$")


def client_name(user_agent: str) -> str:
    """The first product of a User-Agent, with a bare version that follows it: "claude-cli/2.1.3 (external, cli)"
    -> "claude-cli/2.1.3", "OpenAI/Python 1.59.9" -> "OpenAI/Python 1.59.9", "ollama-python/0.4.7 (x86_64 linux)
    Python/3.11" -> "ollama-python/0.4.7"; a generic "Python/3.11 aiohttp/3.9" names the library."""
    parts = [p for p in re.split(r"\s+", re.sub(r"\([^)]*\)", " ", user_agent or "")) if p]
    if not parts:
        return "(no User-Agent)" if not user_agent else user_agent[:40]
    if parts[0].lower().startswith("python/") and len(parts) > 1:
        parts = parts[1:]
    name = parts[0]
    if len(parts) > 1 and _VERSION.match(parts[1]):
        name += " " + parts[1]
    return name[:60]


def is_own(rec: dict) -> bool:
    return (rec.get("client") or "").startswith(OWN_CLIENT)


def _ms(seconds) -> str:
    if seconds is None:
        return ""
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def progress_text(p: dict) -> str:
    """A prompt being read: "reading the prompt 42% (8,200 tokens), about 12 s left"."""
    total = int(p.get("total") or 0)
    done = int(p.get("processed") or 0)
    pct = 100 * done // total if total else 0
    eta = p.get("eta")
    return f"reading the prompt {pct}% ({total:,} tokens)" + (f", about {_ms(eta)} left" if eta is not None else "")


def status_text(rec: dict) -> str:
    if rec.get("status") is None:
        if rec.get("state") != "done":
            return progress_text(rec["progress"]) if rec.get("progress") else "running…"
        return f"? {rec.get('error') or ''}".strip()
    s = str(rec["status"])
    if rec.get("error"):
        s += " " + " ".join(str(rec["error"]).split())
    return s


def cell(rec: dict, column: str) -> str:
    """The text of one column for one record."""
    if column == "Time":
        return time.strftime("%H:%M:%S", time.localtime(rec.get("time") or 0))
    if column == "Client":
        return client_name(rec.get("client") or "")
    if column == "API":
        return f"{rec.get('dialect') or ''} {rec.get('method', '')} {rec.get('route') or rec.get('path', '')}".strip()
    if column == "Model":
        return rec.get("model") or ""
    if column == "Status":
        return status_text(rec)
    if column == "Prompt":
        return str(rec["prompt_tokens"]) if "prompt_tokens" in rec else ""
    if column == "Cached":
        return str(rec["cached_tokens"]) if "prompt_tokens" in rec else ""
    if column == "Reuse":
        return reuse_text(rec.get("cache"))
    if column == "Reply":
        if "completion_tokens" in rec:
            return str(rec["completion_tokens"])
        return f"{rec['output_tokens']}…" if rec.get("output_tokens") else ""
    if column == "TTFT":
        return _ms(rec.get("ttft"))
    if column == "Tok/s":
        v = rec.get("tokens_per_second")
        return f"{v:.1f}" if v else ""
    if column == "Drafted":
        return str(rec["drafted"]) if rec.get("drafted") else ""
    if column == "Accepted":
        return str(rec["accepted"]) if rec.get("drafted") else ""
    if column == "Queued":
        if rec.get("queued"):
            return f"yes, {_ms(rec.get('queue_wait'))}"
        return "no" if rec.get("phases") and len(rec["phases"]) > 1 else ""
    if column == "Duration":
        return _ms(rec.get("duration"))
    raise KeyError(column)


# the cache report (runner/cache/explain.py; http/request_log.cache_summary) -------------------------------------
SOURCE_NAMES = {"slot": "the slot", "host": "host RAM", "sequence": "another running sequence", "disk": "disk",
                "none": "nowhere"}
PART_COLORS = {"system": "#4c78a8", "tool": "#f58518", "template": "#9aa5b1", "message": "#54a24b"}


def part_name(part: dict) -> str:
    """"user #3", "system #0", "tool Bash", "template text"."""
    if part.get("kind") == "tool":
        return f"tool {part.get('label', '')}"
    if part.get("kind") in ("message", "system"):
        return f"{part.get('role', '')} #{part.get('index', '')}"
    return part.get("label") or part.get("kind", "")


def reuse_text(c: dict | None) -> str:
    """The Reuse column: what the cache did for a request, in a few words; "⚠" when it computed more than its
    new tail."""
    if not c:
        return ""
    v = c.get("verdict")
    mark = "⚠ " if c.get("flagged") else ""
    if v == "tail":
        return "all but the new tail"
    if v == "changed" or v == "branched":
        div = c.get("divergence") or {}
        where = part_name(div.get("part") or {})
        return f"{mark}{'changed' if v == 'changed' else 'branched'} at {where}"
    if v == "evicted":
        return f"{mark}not in the cache any more"
    if v == "off":
        return "cache off"
    return "new prompt" if v == "new" else str(v or "")


def _esc(text: str) -> str:
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\n", "⏎")
            .replace(" ", "&nbsp;"))


def cache_html(c: dict | None) -> str:
    """The explainer for the detail pane, as HTML: the verdict, the divergence with the changed text highlighted in
    both versions, what was reused from where and what each source offered."""
    if not c:
        return "<p>No cache report for this request (not a generation, or it did not finish).</p>"
    n = int(c.get("prompt_tokens") or 0)
    cached = int(c.get("cached") or 0)
    src = SOURCE_NAMES.get(c.get("source") or "none", c.get("source"))
    lines = [f"<p><b>{_esc(reuse_text(c)) or 'no verdict'}</b> — {cached:,} of {n:,} prompt tokens reused from "
             f"{src}" + (f" ({c['moved']:,} moved after a change)" if c.get("moved") else "") + "; "
             f"{n - cached:,} computed, the new tail is {int(c.get('new_tail') or 0):,}."
             + (f" <span style='color:#d62728'>{c['recomputed_beyond_tail']:,} tokens more than the new tail were "
                "computed.</span>" if c.get("flagged") else "") + "</p>"]
    div = c.get("divergence")
    if div:
        part = div.get("part") or {}
        lines.append(f"<p>Diverged at token {div['token']:,}, {part.get('offset', 0):,} characters into "
                     f"<b>{_esc(part_name(part))}</b>" + (f"; {div['repeated_after']:,} tokens after the change were "
                                                         "the same as before" if div.get("repeated_after") else "")
                     + ":</p>")
        style = "font-family:monospace; white-space:pre-wrap"
        lines.append(f"<p style='{style}'>before: {_esc(div.get('before', ''))}"
                     f"<span style='background:#f4b6b6'>{_esc(div.get('old', ''))}</span>"
                     f"{_esc(div.get('after_old', ''))}<br>"
                     f"now:&nbsp;&nbsp;&nbsp; {_esc(div.get('before', ''))}"
                     f"<span style='background:#b6e3b6'>{_esc(div.get('new', ''))}</span>"
                     f"{_esc(div.get('after_new', ''))}</p>")
    prev = c.get("previous")
    if prev:
        rec = f" (request #{prev['record']})" if prev.get("record") else ""
        lines.append(f"<p>The most similar earlier prompt{rec} has {prev['tokens']:,} tokens; this one shares its "
                     f"first {prev['shared']:,}.</p>")
    cands = c.get("candidates") or {}
    if cands:
        lines.append("<p>Cached prefixes offered: " + ", ".join(
            f"{SOURCE_NAMES.get(k, k)} {v:,}" for k, v in cands.items()) + "</p>")
    return "\n".join(lines)


def anatomy_segments(c: dict | None) -> list[dict]:
    """The anatomy bar's segments in prompt order: the system message, each tool, the template's own text, the
    history by user turn; each split where the cached prefix ends (`computed`: the tokens after it, this request's
    work). Each: name, kind (a PART_COLORS key), tokens, computed, seconds (at the measured prefill rate; None
    when none was measured)."""
    parts = (c or {}).get("anatomy") or []
    cached = int((c or {}).get("cached") or 0)
    rate = (c or {}).get("prefill_rate")
    out: list[dict] = []

    def add(name, kind, tokens, computed):
        if tokens <= 0:
            return
        if out and out[-1]["name"] == name and out[-1]["computed"] == computed:
            out[-1]["tokens"] += tokens
        else:
            out.append({"name": name, "kind": kind, "tokens": tokens, "computed": computed})
    for p in parts:
        kind = p.get("kind")
        if kind == "message":
            name = f"turn {p.get('turn', 0)}"
        elif kind == "tool":
            name = f"tool {p.get('label', '')}"
        else:
            name, kind = ("system", "system") if kind == "system" else ("template", "template")
        start, end = p["token"], p["token"] + p["tokens"]
        add(name, kind, min(end, cached) - start, False)
        add(name, kind, end - max(start, cached), True)
    for seg in out:
        seg["seconds"] = seg["tokens"] / rate if rate else None
    return out


def _sh(text: str) -> str:
    """`text` as one single-quoted shell word."""
    return "'" + text.replace("'", "'\\''") + "'"


MASK = "•••"                    # what the service's request log shows for a credential's value
CURL_SKIPPED = {"host", "content-length", "connection", "accept-encoding", "keep-alive", "transfer-encoding"}


def curl_command(detail: dict, base_url: str) -> str:
    """A logged request (its detail: method, path, headers, body) as a curl command line against `base_url`.
    Headers the log masked (credentials) are left out, except that an Authorization header becomes one that reads
    $STRATA_API_KEY; a body the log did not keep whole is sent as far as it was kept (and said so)."""
    url = base_url.rstrip("/") + (detail.get("path") or "/")
    parts = ["curl", "-sS", "-X", detail.get("method") or "GET", _sh(url)]
    for k, v in (detail.get("headers") or {}).items():
        if k.lower() in CURL_SKIPPED:
            continue
        if v == MASK:
            if k.lower() == "authorization":
                parts += ["-H", '"Authorization: Bearer $STRATA_API_KEY"']
            continue
        parts += ["-H", _sh(f"{k}: {v}")]
    body = detail.get("request_body") or ""
    note = ""
    if body:
        parts += ["--data-binary", _sh(body)]
        size = int(detail.get("request_bytes") or 0)
        if size > len(body.encode("utf-8")):
            note = f"# the log kept {len(body.encode('utf-8'))} of this body's {size} bytes\n"
    return note + " ".join(parts)


def matches(rec: dict, client: str = "", model: str = "", status: str = "") -> bool:
    """The window's search: a part of the client (User-Agent) and of the model, case-insensitive, and a status
    ("ok", "error", "4xx", "5xx", or a code); as the service's `GET /api/requests` filters."""
    if client and client.lower() not in (rec.get("client") or "").lower():
        return False
    if model and model.lower() not in (rec.get("model") or "").lower():
        return False
    s, code = status.strip().lower(), rec.get("status")
    if not s:
        return True
    if code is None:
        return False
    if s == "ok":
        return code < 400
    if s == "error":
        return code >= 400
    if len(s) == 3 and s.endswith("xx") and s[0].isdigit():
        return code // 100 == int(s[0])
    return s.isdigit() and code == int(s)


def timeline(rec: dict) -> list[tuple[str, float, float]]:
    """(phase, start, seconds) from the request's arrival; the parts end where the next begins, and the last ends
    at the request's duration."""
    out, t = [], 0.0
    for name, secs in rec.get("phases") or ():
        out.append((name, t, float(secs)))
        t += float(secs)
    return out


def summary(rec: dict) -> str:
    """One paragraph about a request, for the detail pane."""
    parts = [f"#{rec.get('id')} {rec.get('method', '')} {rec.get('path', '')}", status_text(rec)]
    if rec.get("model"):
        parts.append(f"model {rec['model']}")
    if "prompt_tokens" in rec:
        parts.append(f"prompt {rec['prompt_tokens']} tokens ({rec.get('cached_tokens', 0)} from the cache)")
        if rec.get("cache"):
            parts.append(f"cache: {reuse_text(rec['cache'])}")
        reason = f" ({rec['reason']})" if rec.get("reason") else ""
        parts.append(f"reply {rec.get('completion_tokens', 0)} tokens{reason}")
    if rec.get("ttft") is not None:
        parts.append(f"first token after {_ms(rec['ttft'])}")
    if rec.get("tokens_per_second"):
        parts.append(f"{rec['tokens_per_second']:.1f} tok/s")
    if rec.get("drafted"):
        parts.append(f"{rec['accepted']} of {rec['drafted']} drafted tokens accepted")
    if rec.get("load_wait", 0) >= 0.01:
        parts.append(f"waited {_ms(rec['load_wait'])} for the model to load")
    if rec.get("queued"):
        parts.append(f"queued {_ms(rec.get('queue_wait'))} for a slot")
    parts.append(f"{_ms(rec.get('duration'))} in all")
    return " · ".join(p for p in parts if p)


class ServerFeed:
    """The records the window holds (newest first) and the samples behind its plots. Fed from the GUI thread."""

    def __init__(self, window_s: float = WINDOW_SECONDS):
        self.window_s = window_s
        self.records: "OrderedDict[int, dict]" = OrderedDict()
        self.samples: deque[dict] = deque()
        self._prompt_bins: dict[int, float] = {}     # wall second -> prompt tokens processed in it
        self._spread: set[int] = set()               # records whose prompt is in the bins

    # records ---------------------------------------------------------------------------------------------------
    def upsert(self, rec: dict) -> bool:
        """Add or update a record; True when it is new."""
        rid = rec.get("id")
        if not isinstance(rid, int):
            return False
        new = rid not in self.records
        old = self.records.get(rid) or {}
        if old.get("state") == "done" and rec.get("state") != "done":
            return False                             # an earlier event arriving after the snapshot's final one
        self.records[rid] = rec
        if new:
            while len(self.records) > MAX_RECORDS:
                self.records.pop(min(self.records))
        if rec.get("state") == "done":
            self._spread_prompt(rec)
        return new

    def ordered(self, hide_own: bool = False, client: str = "", model: str = "", status: str = "") -> list[dict]:
        recs = sorted(self.records.values(), key=lambda r: r["id"], reverse=True)
        if hide_own:
            recs = [r for r in recs if not (is_own(r) and r.get("method") in ("GET", "HEAD"))]
        if client or model or status:
            recs = [r for r in recs if matches(r, client, model, status)]
        return recs

    def clear(self) -> None:
        self.records.clear()

    def settle_missing(self, in_log: set[int]) -> None:
        """Requests shown as running that the service's log no longer holds: their end was missed and the log
        has moved on, so they stop counting as running."""
        for rid, rec in list(self.records.items()):
            if rec.get("state") == "running" and rid not in in_log:
                self.records[rid] = {**rec, "state": "done", "error": "its end was not received"}

    def running(self) -> int:
        return sum(1 for r in self.records.values() if r.get("state") == "running")

    def _spread_prompt(self, rec: dict) -> None:
        """A finished generation's processed prompt tokens (not those from the cache) over its prefill, so the
        prompt rate shows when the work happened, not when the request ended."""
        rid = rec["id"]
        if rid in self._spread or "prompt_tokens" not in rec:
            return
        self._spread.add(rid)
        work = max(0, int(rec["prompt_tokens"]) - int(rec.get("cached_tokens") or 0))
        start, span = None, 0.0
        for name, t, secs in timeline(rec):
            if name == "prefill":
                start, span = float(rec.get("time") or 0) + t, secs
        if not work or start is None:
            return
        first, last = int(start), int(start + max(span, 1e-3))
        n = last - first + 1
        for s in range(first, last + 1):
            self._prompt_bins[s] = self._prompt_bins.get(s, 0.0) + work / n

    # samples ---------------------------------------------------------------------------------------------------
    def add_sample(self, sample: dict) -> None:
        self.samples.append(sample)
        horizon = float(sample.get("time") or time.time()) - self.window_s - HIT_RATE_SECONDS
        while self.samples and float(self.samples[0].get("time") or 0) < horizon:
            self.samples.popleft()
        old = int(horizon)
        for s in [s for s in self._prompt_bins if s < old]:
            del self._prompt_bins[s]

    def series(self, now: float | None = None) -> dict[str, tuple[list[float], list[float]]]:
        """Plot series, x in seconds before `now` (negative): "prompt tok/s", "generation tok/s", "busy slots",
        "queued", "slots", "cache hit %", and "memory <kind>" (bytes) for each kind seen."""
        now = now if now is not None else (float(self.samples[-1]["time"]) if self.samples else time.time())
        pts = [s for s in self.samples if float(s["time"]) >= now - self.window_s - HIT_RATE_SECONDS]
        out: dict[str, tuple[list[float], list[float]]] = {}

        def put(name, x, y):
            xs, ys = out.setdefault(name, ([], []))
            xs.append(x)
            ys.append(y)

        prev = None
        kinds = sorted({k for s in pts for k in (s.get("memory") or {})},
                       key=lambda k: MEMORY_ORDER.index(k) if k in MEMORY_ORDER else len(MEMORY_ORDER))
        for s in pts:
            t = float(s["time"])
            x = t - now
            if x < -self.window_s:
                prev = s
                continue
            if prev is not None:
                dt = max(1e-3, t - float(prev["time"]))
                put("generation tok/s", x, max(0.0, (s["output_tokens"] - prev["output_tokens"]) / dt))
            put("busy slots", x, float(s.get("slots_busy") or 0))
            put("queued", x, float(s.get("queued") or 0))
            put("slots", x, float(s.get("slots_total") or 0))
            # the hit rate of the prompts that finished in the last minute (a gap where none did)
            base = next((p for p in pts if float(p["time"]) >= t - HIT_RATE_SECONDS), s)
            prompt = s["prompt_tokens"] - base["prompt_tokens"]
            cached = s["cached_tokens"] - base["cached_tokens"]
            put("cache hit %", x, 100.0 * cached / prompt if prompt > 0 else math.nan)
            for k in kinds:
                put(f"memory {k}", x, float((s.get("memory") or {}).get(k, 0)))
            prev = s
        start = int(now - self.window_s)
        xs = [float(sec) + 0.5 - now for sec in range(start, int(now) + 1)]
        out["prompt tok/s"] = (xs, [self._prompt_bins.get(sec, 0.0) for sec in range(start, int(now) + 1)])
        return out


def memory_text(sample: dict | None) -> str:
    if not sample or not sample.get("memory"):
        return "no model loaded"
    mem = sample["memory"]
    return ", ".join(f"{MEMORY_LABELS.get(k, k)} {format_bytes(v)}" for k, v in
                     sorted(mem.items(), key=lambda kv: MEMORY_ORDER.index(kv[0]) if kv[0] in MEMORY_ORDER else 99))

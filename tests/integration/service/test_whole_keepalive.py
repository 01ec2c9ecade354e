"""Non-streamed requests that wait (service/dialects/whole.py): the answer starts with leading spaces while the
request is queued, so a client with a short read timeout gets its reply instead of giving up; a failure after that
start is the dialect's error body; a request resent after its client gave up takes the abandoned one over (its
place in the queue, what it computed) instead of being computed again.

A live server on loopback with SmolLM2 on one slot. The test holds the model's only slot itself (a lease taken on
the server's loop), so a request stays queued until the test lets go: long past the clients' read timeouts,
whatever the machine's speed. The official openai, anthropic and ollama clients read the answers."""
from __future__ import annotations

import json
import socket
import threading
import time
from urllib.parse import urlsplit

import anthropic
import httpx
import ollama
import openai
import pytest

from service_util import HeldSlots, wait_for

MODEL = "smollm2:135m"
READ_TIMEOUT = 2.0          # the clients' read timeout: the test holds their requests far longer


@pytest.fixture(scope="module")
def server(live_service, smollm2_path):
    svc = live_service(n_threads=1, num_ctx=1024, num_parallel=1, keep_alive="10m")
    httpx.post(svc.url + "/api/generate", json={"model": MODEL}, timeout=120)      # loaded once for the module
    return svc


@pytest.fixture
def fast_keepalive(monkeypatch):
    from app.service.dialects import whole

    monkeypatch.setattr(whole, "WHOLE_KEEPALIVE_S", 0.25)
    monkeypatch.setattr(whole, "WHOLE_KEEPALIVE_START_S", 0.25)


def _queued(url: str) -> int:
    models = httpx.get(url + "/api/ps", timeout=30).json()["models"]
    return next(m["strata"]["queued"] for m in models if m["name"] == MODEL)


def _held_past_the_timeouts(url: str, n: int, errors: list) -> None:
    """Wait until `n` requests are queued, then keep them there for several of the clients' read timeouts."""
    wait_for(lambda: errors or _queued(url) == n, what=f"{n} requests queued")
    end = time.monotonic() + 3 * READ_TIMEOUT
    wait_for(lambda: errors or time.monotonic() > end, what="the clients' read timeouts passed")
    assert not errors, errors


def test_clients_with_a_short_read_timeout_get_their_answers(server, fast_keepalive):
    slot = HeldSlots(server, MODEL)
    out: dict = {}
    errors: list[BaseException] = []
    msgs = [{"role": "user", "content": "Hi"}]

    def chat():
        c = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=READ_TIMEOUT)
        out["openai"] = c.chat.completions.create(model=MODEL, max_tokens=4, messages=msgs)

    def messages():
        c = anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0, timeout=READ_TIMEOUT)
        out["anthropic"] = c.messages.create(model=MODEL, max_tokens=4, messages=msgs)

    def ollama_chat():
        out["ollama"] = ollama.Client(host=server.url, timeout=READ_TIMEOUT).chat(
            model=MODEL, messages=msgs, stream=False, options={"num_predict": 4})

    def run(fn):
        try:
            fn()
        except BaseException as e:          # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in (chat, messages, ollama_chat)]
    try:
        for t in threads:
            t.start()
        _held_past_the_timeouts(server.url, 3, errors)
    finally:
        slot.release()
        for t in threads:
            t.join(timeout=300)
    assert not errors, errors
    assert out["openai"].choices[0].finish_reason in ("stop", "length") and out["openai"].usage.completion_tokens
    assert out["anthropic"].stop_reason in ("end_turn", "max_tokens") and out["anthropic"].content
    assert out["ollama"].done and out["ollama"].eval_count


def test_a_failure_after_the_answer_began_is_the_dialects_error_body(server, fast_keepalive):
    """The status went out with the first space: a prompt refused once the slot came is a 200 whose body is the
    OpenAI error object (what a 400 would have carried), and the request log records the error."""
    slot = HeldSlots(server, MODEL)
    prompt = "word " * 12000                 # beyond SmolLM2's training context: no larger context can hold it
    got: dict = {}

    def send():
        r = httpx.post(server.url + "/v1/chat/completions", timeout=300,
                       json={"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": prompt}]})
        got["status"], got["body"] = r.status_code, r.text

    t = threading.Thread(target=send)
    try:
        t.start()
        _held_past_the_timeouts(server.url, 1, [])
    finally:
        slot.release()
        t.join(timeout=300)
    assert got["status"] == 200 and got["body"].startswith(" ")
    err = json.loads(got["body"])["error"]
    assert err["code"] == "context_length_exceeded", err
    recs = httpx.get(server.url + "/api/requests", timeout=30).json()["requests"]
    rec = next(r for r in recs if r["path"] == "/v1/chat/completions")
    assert rec["status"] == 200 and rec["error"]


def _abandoned_request(url: str, path: str, body: bytes) -> socket.socket:
    """Send a request and close the connection before any answer, as a client whose read timeout ran out."""
    u = urlsplit(url)
    s = socket.create_connection((u.hostname, u.port), timeout=30)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return s


def test_a_resent_request_takes_over_the_abandoned_one(server):
    from app.service import appkeys

    joins = server.app[appkeys.JOINS]
    metrics = server.app[appkeys.METRICS]
    body = json.dumps({"model": MODEL, "max_tokens": 6, "temperature": 0,
                       "messages": [{"role": "user", "content": "Name a colour."}]}).encode()
    path = "/v1/chat/completions"
    slot = HeldSlots(server, MODEL)
    got: dict = {}
    try:
        # two live clients with the same request are two computations (one may want two samples)
        live = [threading.Thread(target=lambda i=i: got.setdefault(i, httpx.post(
            server.url + path, content=body, headers={"Content-Type": "application/json"}, timeout=300)))
            for i in range(2)]
        for t in live:
            t.start()
        wait_for(lambda: _queued(server.url) == 2, what="two identical live requests queued")
        assert joins.adopted == 0
        # a third is sent and abandoned: its computation keeps its place in the queue ...
        sock = _abandoned_request(server.url, path, body)
        wait_for(lambda: _queued(server.url) == 3, what="the third queued")
        sock.close()
        wait_for(lambda: joins.orphans, what="the abandoned request kept for a resend")
        assert _queued(server.url) == 3
        # ... and the same request sent again takes it over instead of queueing a fourth
        resent = threading.Thread(target=lambda: got.setdefault("resent", httpx.post(
            server.url + path, content=body, headers={"Content-Type": "application/json"}, timeout=300)))
        resent.start()
        wait_for(lambda: joins.adopted == 1, what="the resent request took the abandoned one over")
        assert _queued(server.url) == 3 and not joins.orphans
        before = metrics.tokens[(MODEL, "completion")]
    finally:
        slot.release()
        for t in live:
            t.join(timeout=300)
    resent.join(timeout=300)
    answers = [got[0], got[1], got["resent"]]
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers]
    usage = [r.json()["usage"]["completion_tokens"] for r in answers]
    # three answers, three computations: the two live ones and the one the resend took over (not a fourth)
    assert metrics.tokens[(MODEL, "completion")] - before == sum(usage)
    assert _queued(server.url) == 0

"""Runner faults seen through the service: a runner killed with SIGKILL in the middle of streams, a runner that
aborts (as a GGML_ASSERT would; tests/integration/engine/test_runner.py checks the same hook at the client level), one that is
stopped (SIGSTOP) and one stuck inside a decode step. Requests the dead runner was serving get an error that
names the model and how its runner ended (an error line in the NDJSON stream, an error event in the SSE stream,
a 500 JSON for a non-streamed call), with the runner's last stderr lines; requests only queued for it are served
by the reloaded model; the next request loads the model again in a new process, nothing hangs (every call has a
deadline), and no slot stays busy. No assertion here depends on speed (docs/architecture.md, "When a runner dies
or hangs")."""
from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time

import httpx
import pytest

from app.engine import stderr_tail
from app.engine.runner.testhooks import ABORT_MESSAGE

MODEL = "smollm2:135m"
ABORT_MARKER = "__strata_test_abort__"
HANG_MARKER = "__strata_test_hang__"
# replies that are still running whenever the runner is killed, however fast it decodes: no length limit and the
# end of text ignored (Ollama's dialect shifts a full context); the other dialects cap theirs at 2,000 tokens
LONG = {"num_predict": -1, "ignore_eos": True, "temperature": 0.8}
NO_EOS = {"options": {"ignore_eos": True}}       # Ollama's options, taken as an extra field by every dialect
DEADLINE = 120.0        # seconds any single call may take before the test calls it a hang


@pytest.fixture(scope="module")
def server(live_service, smollm2_path):
    # read by the runner when it is spawned (multiprocessing passes the parent's environment)
    old = os.environ.get("STRATA_TEST_ABORT_MARKER")
    os.environ["STRATA_TEST_ABORT_MARKER"] = ABORT_MARKER
    svc = live_service(n_threads=1, num_ctx=2048, num_parallel=3, keep_alive="10m")
    yield svc
    svc.stop()
    if old is None:
        os.environ.pop("STRATA_TEST_ABORT_MARKER", None)
    else:
        os.environ["STRATA_TEST_ABORT_MARKER"] = old


def _entry(c: httpx.Client) -> dict | None:
    return next((m for m in c.get("/api/ps").json()["models"] if m["name"] == MODEL), None)


def _loaded_pid(c: httpx.Client) -> int:
    r = c.post("/api/generate", json={"model": MODEL, "keep_alive": "10m"})
    assert r.status_code == 200 and r.json()["done_reason"] == "load", r.text
    e = _entry(c)
    assert e["strata"]["state"] == "loaded"
    return e["strata"]["pid"]


def _wait(cond, what: str, timeout: float = DEADLINE) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


class Stream(threading.Thread):
    """One streaming request read line by line in a thread; keeps every line and how it ended."""

    def __init__(self, url: str, path: str, body: dict):
        super().__init__(daemon=True)
        self.url, self.path, self.body = url, path, body
        self.lines: list[str] = []
        self.status: int | None = None
        self.ended: str | None = None            # "eof" or the exception

    def run(self):
        try:
            with httpx.Client(base_url=self.url, timeout=httpx.Timeout(DEADLINE)) as c:
                with c.stream("POST", self.path, json=self.body) as r:
                    self.status = r.status_code
                    for line in r.iter_lines():
                        if line.strip():
                            self.lines.append(line)
            self.ended = "eof"
        except Exception as e:  # noqa: BLE001 - recorded for the assertions
            self.ended = f"{type(e).__name__}: {e}"

    def under_way(self) -> bool:
        """Text has arrived (the request is decoding)."""
        return any('"done":false' in l.replace(" ", "") or '"delta"' in l for l in self.lines)


def _assert_idle(c: httpx.Client) -> None:
    _wait(lambda: (e := _entry(c)) is None or (e["strata"]["slots_busy"] == 0 and e["strata"]["queued"] == 0),
          "slots free")


def _failure(r: httpx.Response, status: int = 500):
    """The error a non-streamed answer carries: the body of an HTTP `status`, or, where the answer had already begun
    with keepalive spaces when it failed (a request pending over 5 s: app/service/dialects/whole.py), a 200 whose
    body is that same error object. Which of the two depends on the machine's speed, not on the behaviour tested."""
    assert r.status_code in (status, 200), r.text
    body = r.json()
    assert "error" in body, r.text
    return body["error"]


def _post(url: str, path: str, body: dict, out: dict, key) -> threading.Thread:
    """A non-streamed request in a thread; its response (or exception) lands in out[key]."""
    def call():
        try:
            out[key] = httpx.post(url + path, json=body, timeout=DEADLINE)
        except Exception as e:  # noqa: BLE001 - recorded for the assertions
            out[key] = e

    t = threading.Thread(target=call, daemon=True)
    t.start()
    return t


def test_sigkill_mid_stream(server):
    """Three streams decoding (every slot), three requests queued behind them: kill -9 the runner. The streams
    get an error naming the model and SIGKILL; the queued requests (never sent to that runner) and one sent right
    after the kill are served by the reloaded model."""
    with httpx.Client(base_url=server.url, timeout=DEADLINE) as c:
        pid = _loaded_pid(c)
        ollama_stream = Stream(server.url, "/api/generate", {"model": MODEL, "prompt": "Tell a long story.",
                                                              "options": LONG})
        chat_stream = Stream(server.url, "/api/chat", {"model": MODEL, "options": LONG,
                                                        "messages": [{"role": "user", "content": "Go on forever."}]})
        openai_stream = Stream(server.url, "/v1/chat/completions", {
            "model": MODEL, "stream": True, "max_tokens": 2000, "messages": [{"role": "user", "content": "Talk."}],
            **NO_EOS})
        streams = [ollama_stream, chat_stream, openai_stream]
        for s in streams:
            s.start()
        _wait(lambda: all(s.under_way() for s in streams), "all three streams under way")
        short = {"num_predict": 3}
        results: dict = {}
        queued = [_post(server.url, "/api/generate", {"model": MODEL, "prompt": "Write.", "stream": False,
                                                      "options": short}, results, "generate"),
                  _post(server.url, "/api/chat", {"model": MODEL, "stream": False, "options": short,
                                                  "messages": [{"role": "user", "content": "Hi"}]}, results, "chat"),
                  _post(server.url, "/v1/completions", {"model": MODEL, "prompt": "Once", "max_tokens": 3},
                        results, "openai")]
        _wait(lambda: _entry(c)["strata"]["queued"] == 3, "three requests queued behind the streams")
        os.kill(pid, signal.SIGKILL)
        after = _post(server.url, "/api/generate", {"model": MODEL, "prompt": "After.", "stream": False,
                                                    "options": short}, results, "after")
        for s in streams:
            s.join(DEADLINE)
            assert not s.is_alive(), f"{s.path}: still streaming after the runner died"
        for t in queued + [after]:
            t.join(DEADLINE)
            assert not t.is_alive(), "a queued request hung"

        for s in (ollama_stream, chat_stream):
            assert s.status == 200 and s.ended == "eof", (s.path, s.ended)
            last = json.loads(s.lines[-1])
            assert "error" in last, (s.path, s.lines[-1])
            assert "SIGKILL" in last["error"] and "ended unexpectedly" in last["error"]
            assert last["error"].count(MODEL) == 1, last["error"]          # named once, not once per layer
            assert not any('"done":true' in l.replace(" ", "") for l in s.lines)
        assert openai_stream.status == 200 and openai_stream.ended == "eof"
        events = [l[6:] for l in openai_stream.lines if l.startswith("data: ")]
        assert events[-1] == "[DONE]"
        err = json.loads(events[-2])["error"]
        assert "SIGKILL" in err["message"] and err["type"] == "server_error", err
        assert err["message"].count(MODEL) == 1, err

        # the queued requests and the one sent after the kill: served by the reloaded model, not failed
        for key, r in results.items():
            assert isinstance(r, httpx.Response) and r.status_code == 200, (key, r if not isinstance(
                r, httpx.Response) else r.text)
        assert results["generate"].json()["done"] and results["chat"].json()["done"]
        assert results["openai"].json()["choices"][0]["finish_reason"] == "length"
        new_pid = _entry(c)["strata"]["pid"]
        assert new_pid and new_pid != pid
        _assert_idle(c)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)                                   # the old runner is gone (reaped)


def _sse_error(stream: Stream) -> dict:
    """The data of an SSE stream's `error` event (Anthropic's and the Responses API's way to end a stream)."""
    datas = [json.loads(l[6:]) for l in stream.lines if l.startswith("data: ") and l[6:] != "[DONE]"]
    errors = [d for d in datas if d.get("type") == "error"]
    assert errors, (stream.path, stream.lines[-3:])
    return errors[-1].get("error") or errors[-1]


def test_a_killed_runner_is_named_once_in_the_anthropic_and_responses_streams(server):
    """kill -9 under an Anthropic Messages stream, a Responses API stream and an Ollama stream: each ends with its
    dialect's error event, whose message names the model once and says how its runner ended."""
    with httpx.Client(base_url=server.url, timeout=DEADLINE) as c:
        pid = _loaded_pid(c)
        ask = [{"role": "user", "content": "Count from 1 to 1000, one number per line."}]
        anthropic = Stream(server.url, "/v1/messages", {"model": MODEL, "stream": True, "max_tokens": 2000,
                                                        "messages": ask, **NO_EOS})
        responses = Stream(server.url, "/v1/responses", {"model": MODEL, "stream": True,
                                                         "max_output_tokens": 2000, "input": ask, **NO_EOS})
        ollama = Stream(server.url, "/api/generate", {"model": MODEL, "prompt": "Tell a long story.",
                                                      "options": LONG})
        streams = [anthropic, responses, ollama]
        for s in streams:
            s.start()
        _wait(lambda: all(s.under_way() for s in streams), "all three streams under way")
        os.kill(pid, signal.SIGKILL)
        for s in streams:
            s.join(DEADLINE)
            assert not s.is_alive() and s.status == 200 and s.ended == "eof", (s.path, s.ended)
        said = [_sse_error(anthropic)["message"], _sse_error(responses)["message"],
                json.loads(ollama.lines[-1])["error"]]
        for message in said:
            assert message.count(MODEL) == 1 and "ended unexpectedly" in message and "SIGKILL" in message, message
        assert _sse_error(anthropic)["type"] == "api_error", _sse_error(anthropic)
        _assert_idle(c)


def test_sigkill_between_requests(server):
    """A runner that dies while idle is noticed: the next request reloads instead of failing."""
    with httpx.Client(base_url=server.url, timeout=DEADLINE) as c:
        pid = _loaded_pid(c)
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: (e := _entry(c)) is None or e["strata"]["pid"] != pid, "dead runner dropped")
        r = c.post("/api/chat", json={"model": MODEL, "stream": False, "options": {"num_predict": 2},
                                      "messages": [{"role": "user", "content": "Hi"}]})
        assert r.status_code == 200, r.text
        r = c.post("/api/embed", json={"model": MODEL, "input": ["one", "two"]})
        assert r.status_code == 200 and len(r.json()["embeddings"]) == 2
        _assert_idle(c)


def test_runner_abort_mid_stream(server, caplog):
    """An abort (as a GGML_ASSERT's): the error names the model and SIGABRT and quotes what the runner printed
    last on stderr, and the service log keeps those lines."""
    caplog.set_level(logging.WARNING, logger="strata.engine")
    with httpx.Client(base_url=server.url, timeout=DEADLINE) as c:
        pid = _loaded_pid(c)
        victim = Stream(server.url, "/api/generate", {"model": MODEL, "prompt": "Count slowly.", "options": LONG})
        victim.start()
        _wait(victim.under_way, "stream under way")
        r = c.post("/api/generate", json={"model": MODEL, "prompt": ABORT_MARKER, "raw": True, "stream": False,
                                          "options": {"num_predict": 4}})
        err = _failure(r)
        assert "SIGABRT" in err and "ended unexpectedly" in err and err.count(MODEL) == 1, err
        tail = stderr_tail.supported()                        # POSIX: the runner's stderr is the service's pipe
        assert ABORT_MESSAGE in err or not tail, err          # the runner's last stderr line
        victim.join(DEADLINE)
        assert not victim.is_alive() and victim.ended == "eof"
        last = json.loads(victim.lines[-1])
        assert "SIGABRT" in last.get("error", "") and (ABORT_MESSAGE in last["error"] or not tail), victim.lines[-1]
        logged = [rec.getMessage() for rec in caplog.records if str(pid) in rec.getMessage()]
        assert any("stderr lines" in m and (ABORT_MESSAGE in m or not tail) for m in logged), logged

        # OpenAI dialect: an abort before the first token is an HTTP error with an OpenAI-shaped body
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": ABORT_MARKER, "max_tokens": 4})
        err = _failure(r)
        assert err["type"] == "server_error" and err["code"] == "runner_exited", r.text

        r = c.post("/api/generate", json={"model": MODEL, "prompt": "Hi", "stream": False,
                                          "options": {"num_predict": 2}})
        assert r.status_code == 200, r.text
        assert _entry(c)["strata"]["pid"] not in (None, pid)
        _assert_idle(c)
        metrics = c.get("/metrics").text
        assert 'strata_model_loads_total{model="smollm2:135m",result="ok"}' in metrics


def test_sigkill_while_loading(server):
    """A runner killed before it finishes loading: every request waiting for the load gets the failure (no
    hang), /api/ps shows it failed, and the next request loads the model from scratch."""
    with httpx.Client(base_url=server.url, timeout=DEADLINE) as c:
        c.post("/api/generate", json={"model": MODEL, "keep_alive": 0})          # unload
        _wait(lambda: _entry(c) is None, "model unloaded")
        results: list = []

        def ask(i):
            try:
                results.append(httpx.post(server.url + "/api/chat", timeout=DEADLINE, json={
                    "model": MODEL, "stream": False, "options": {"num_predict": 2},
                    "messages": [{"role": "user", "content": f"Hi {i}"}]}))
            except Exception as e:  # noqa: BLE001
                results.append(e)

        waiters = [threading.Thread(target=ask, args=(i,), daemon=True) for i in range(3)]
        for t in waiters:
            t.start()
        killed: list[int] = []

        def kill_while_loading() -> bool:
            e = _entry(c)
            if e and e["strata"]["state"] == "loading" and e["strata"]["pid"]:
                os.kill(e["strata"]["pid"], signal.SIGKILL)
                killed.append(e["strata"]["pid"])
                return True
            return bool(e and e["strata"]["state"] == "loaded")     # too late: the load won the race

        _wait(kill_while_loading, "runner seen loading")
        for t in waiters:
            t.join(DEADLINE)
            assert not t.is_alive(), "a request waiting for the killed load hung"
        assert all(isinstance(r, httpx.Response) for r in results), results
        if not killed:
            pytest.skip("the load finished before the runner could be killed (very fast machine)")
        statuses = sorted(r.status_code for r in results)
        failed = [r for r in results if r.status_code != 200 or "error" in r.json()]
        assert failed, statuses           # the waiters of the killed load were answered with its failure
        for r in failed:
            err = _failure(r)
            assert "load" in err and "SIGKILL" in err, r.text
        # the next request loads again, in a new process
        r = c.post("/api/generate", json={"model": MODEL, "prompt": "Hi", "stream": False,
                                          "options": {"num_predict": 2}})
        assert r.status_code == 200, r.text
        assert _entry(c)["strata"]["pid"] != killed[0]
        _assert_idle(c)


def _runner_children() -> set[int]:
    """Runner processes started by this test process (multiprocessing spawn children, not its helpers)."""
    me, out = os.getpid(), set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and b"spawn_main" in cmd:
            out.add(int(d))
    return out


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_delete_while_planning_leaves_no_runner_behind(server):
    """A model removed while its load is still being planned (dry run in a child process) must not get a runner
    started afterwards that nobody owns (it would hold the model's memory until the service exits)."""
    with httpx.Client(base_url=server.url, timeout=DEADLINE) as c:
        assert c.post("/api/create", json={"model": "short-lived", "from": MODEL, "stream": False}).status_code == 200
        _loaded_pid(c)                                # the fixture's model, so the count below is stable
        before = _runner_children()                   # (a child of an earlier test still exiting may be in it)
        out: dict = {}

        def load():
            out["r"] = httpx.post(server.url + "/api/generate", timeout=DEADLINE, json={
                "model": "short-lived", "options": {"num_ctx": 1000 + int(time.time()) % 500}})   # a new dry run

        t = threading.Thread(target=load, daemon=True)
        t.start()
        _wait(lambda: any(m["name"] == "short-lived:latest" and m["strata"]["state"] == "loading"
                          for m in c.get("/api/ps").json()["models"]), "load under way")
        planning = next(m for m in c.get("/api/ps").json()["models"] if m["name"] == "short-lived:latest")
        r = c.request("DELETE", "/api/delete", json={"model": "short-lived"})
        assert r.status_code == 200, r.text
        t.join(DEADLINE)
        assert not t.is_alive()
        assert out["r"].status_code in (200, 503) and out["r"].json(), out["r"].text
        if planning["strata"]["pid"] is not None:
            pytest.skip("the runner had already started when the model was deleted (fast machine)")
        _wait(lambda: "short-lived:latest" not in [m["name"] for m in c.get("/api/ps").json()["models"]],
              "the deleted model still listed")
        _wait(lambda: _runner_children() <= before, "no runner left behind for the deleted model")


def test_a_stopped_runner_is_noticed_and_its_queue_served(live_service, tmp_path):
    """A runner stopped with SIGSTOP (a frozen process; a driver can hang one the same way), with the default
    watchdog: the two requests it was serving get a 500 naming the model and the freeze, the one queued behind
    them is served by the reloaded model, and so is the next request."""
    svc = live_service(n_threads=1, num_ctx=1024, num_parallel=2, keep_alive="10m", home=tmp_path)
    assert svc.config.runner_watchdog_s > 0                   # the default watchdog is on
    try:
        with httpx.Client(base_url=svc.url, timeout=DEADLINE) as c:
            pid = _loaded_pid(c)
            os.kill(pid, signal.SIGSTOP)
            try:
                results: dict = {}
                body = {"model": MODEL, "prompt": "Hi", "stream": False, "options": {"num_predict": 3}}
                sent = [_post(svc.url, "/api/generate", body, results, i) for i in range(2)]
                _wait(lambda: (e := _entry(c)) is None or e["strata"]["pid"] != pid or e["strata"]["slots_busy"] == 2,
                      "both slots taken")
                sent.append(_post(svc.url, "/api/generate", body, results, "queued"))
                _wait(lambda: (e := _entry(c)) is None or e["strata"]["pid"] != pid or e["strata"]["queued"] == 1,
                      "a third request queued")
                for t in sent:
                    t.join(DEADLINE)
                    assert not t.is_alive(), "a request to a stopped runner is still waiting"
            finally:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            for key in (0, 1):
                r = results[key]
                assert isinstance(r, httpx.Response), r
                err = _failure(r)
                assert MODEL in err and "froze: no heartbeat" in err and "SIGKILL" in err and "loads" in err, err
            r = results["queued"]
            assert isinstance(r, httpx.Response) and r.status_code == 200 and r.json()["done"], r
            with pytest.raises(ProcessLookupError):
                _wait(lambda: os.kill(pid, 0) and False, "the stopped runner was killed", timeout=30)
            r = c.post("/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 2})
            assert r.status_code == 200, r.text
            assert _entry(c)["strata"]["pid"] not in (None, pid)
            _assert_idle(c)
    finally:
        svc.stop()


def test_a_runner_stuck_in_one_step_is_killed_by_its_step_limit(live_service, tmp_path, monkeypatch):
    """The heartbeat goes on but one decode step never returns (a test hook hangs the context thread in it, like
    a driver call that does not come back): past the step limit (a small floor here; the measured prediction of
    SmolLM2's steps is far below it) the runner is killed and the request gets a 500 that says it was stuck."""
    monkeypatch.setenv("STRATA_TEST_HANG_MARKER", HANG_MARKER)     # read by the runner when it is spawned
    svc = live_service(n_threads=1, num_ctx=1024, num_parallel=2, keep_alive="10m", runner_step_floor_s=5, home=tmp_path)
    try:
        with httpx.Client(base_url=svc.url, timeout=DEADLINE) as c:
            pid = _loaded_pid(c)
            r = c.post("/v1/completions", json={"model": MODEL, "prompt": HANG_MARKER, "max_tokens": 2})
            err = _failure(r)
            assert err["code"] == "runner_frozen" and "is stuck: one decode step" in err["message"], err
            assert MODEL in err["message"] and "measured steps predict" in err["message"], err
            r = c.post("/api/generate", json={"model": MODEL, "prompt": "Hi", "stream": False,
                                              "options": {"num_predict": 2}})
            assert r.status_code == 200, r.text
            assert _entry(c)["strata"]["pid"] not in (None, pid)
    finally:
        svc.stop()

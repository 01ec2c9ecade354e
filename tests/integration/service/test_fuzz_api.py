"""API fuzzing with schemathesis against the service's own OpenAPI document (/api/openapi.json), every
operation, valid-by-schema (positive) and invalid-by-schema (negative) requests. Checks on every answer:

- no 5xx (pull and push always get the built-in model's name, which is refused before any network use),
- no hang: every request answers within REQUEST_TIMEOUT (a generation is capped to a few tokens),
- every error (>= 400) has a JSON body with an "error" member,
and at the end: the service still answers, no slot is left busy, the runner never died.

About half the generated requests that carry a model name get the real SmolLM2 name instead of a random
string, so the fuzzed options, prompts, formats and messages reach the scheduler and the runner too.
Bounded: STRATA_FUZZ_EXAMPLES examples per operation and mode (default 25: about 30-60 s on 2 cores)."""
from __future__ import annotations

import json
import os
import time

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode


MODEL = "smollm2:135m"
EXAMPLES = int(os.environ.get("STRATA_FUZZ_EXAMPLES", "25"))
REQUEST_TIMEOUT = 90.0
NOT_SUPPORTED = ()       # routes that answer 501 by design (none since pulls exist)
OFFLINE = ("/api/pull", "/api/push")     # their names are always made local ones (see _offline)
SKIP = {("GET", "/api/events")}      # a stream that never ends by design; it takes no input (checked below)


@pytest.fixture(scope="module")
def server(live_service, smollm2_path):
    return live_service(n_threads=1, num_ctx=512, num_parallel=2, keep_alive="10m", max_body=256 * 1024, max_queue=16)


def _cap_generation(path: str, body: dict) -> dict:
    """Use the real model and keep its work tiny (the fuzzer would otherwise ask for unbounded output)."""
    body = dict(body)
    for key in ("model", "name", "source"):
        if key in body:
            body[key] = MODEL
    opts = body.get("options")
    if isinstance(opts, dict) or opts is None:      # null options would be no limit (type confusion covers them)
        opts = dict(opts or {})
        opts["num_predict"] = 2
        opts.pop("num_ctx", None)          # a random num_ctx would reload the model on every request
        opts.pop("num_thread", None)
        body["options"] = opts
    if path.startswith("/v1/"):
        body["max_tokens"] = 2
        body.pop("max_completion_tokens", None)
    if body.get("keep_alive") is not None:
        body["keep_alive"] = "10m"         # an unload per request would turn the fuzz into a load benchmark
    return body


def _offline(body: dict) -> dict:
    """A pull or push of any name that parses would go to a registry on the network, and tests never go online:
    string names become the built-in model's (refused before any connection). The name parser has its own
    tests (test_pull.py)."""
    body = dict(body)
    for key in ("model", "name", "source"):
        if isinstance(body.get(key), str):
            body[key] = MODEL
    return body


def _check(case, response: requests.Response, elapsed: float, failures: list[str]) -> None:
    method, path = case.operation.method.upper(), case.operation.path
    where = f"{method} {case.formatted_path if hasattr(case, 'formatted_path') else path}"
    status = response.status_code
    body_text = response.text[:300]
    if status >= 500 and not (status == 501 and path.startswith(NOT_SUPPORTED)):
        failures.append(f"{where}: {status} for body {json.dumps(case.body, default=str)[:300]} -> {body_text}")
    if status >= 400:
        try:
            doc = response.json()
        except ValueError:
            failures.append(f"{where}: {status} without a JSON body: {body_text!r}")
            return
        if not isinstance(doc, dict) or not doc.get("error"):
            failures.append(f"{where}: {status} JSON body without 'error': {body_text!r}")


def _fuzz_operation(server, op, mode: GenerationMode, failures: list[str], counts: dict) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(generation_mode=mode), real=st.booleans())
    def run(case, real):
        if real and isinstance(case.body, dict):
            case.body = _cap_generation(op.path, case.body)
        if op.path in OFFLINE and isinstance(case.body, dict):
            case.body = _offline(case.body)
        t0 = time.monotonic()
        try:
            response = case.call(base_url=server.url, timeout=REQUEST_TIMEOUT)
        except requests.exceptions.Timeout:
            failures.append(f"{op.method.upper()} {op.path}: no answer within {REQUEST_TIMEOUT:.0f} s for "
                            f"{json.dumps(case.body, default=str)[:300]}")
            return
        except requests.exceptions.ConnectionError as e:
            failures.append(f"{op.method.upper()} {op.path}: connection failed ({e}) for "
                            f"{json.dumps(case.body, default=str)[:300]}")
            return
        counts[response.status_code] = counts.get(response.status_code, 0) + 1
        _check(case, response, time.monotonic() - t0, failures)

    try:
        run()
    except Unsatisfiable:
        # negative mode on an operation with no inputs (GET /api/tags): there is nothing to make invalid
        if mode != GenerationMode.NEGATIVE:
            raise


def test_every_operation_holds_under_fuzzing(server):
    schema = schemathesis.openapi.from_url(server.url + "/api/openapi.json")
    ops = [r.ok() for r in schema.get_all_operations()]
    seen = {(op.method.upper(), op.path) for op in ops}
    assert {("POST", "/api/generate"), ("POST", "/v1/chat/completions"), ("POST", "/api/layout"),
            ("GET", "/v1/models/{model}"), ("DELETE", "/api/delete")} <= seen
    failures: list[str] = []
    counts: dict[int, int] = {}
    t0 = time.monotonic()
    for op in ops:
        if (op.method.upper(), op.path) in SKIP:
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzz_operation(server, op, mode, failures, counts)
    print(f"fuzzed {len(ops)} operations in {time.monotonic() - t0:.0f} s; answers by status: "
          f"{dict(sorted(counts.items()))}")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(dict.fromkeys(failures))
    assert sum(counts.values()) >= len(ops) * EXAMPLES       # the fuzzer really sent requests
    assert counts.get(200, 0) > 0 and sum(n for s, n in counts.items() if 400 <= s < 500) > 0

    # the service is alive, nothing is left busy, and the model's runner was never replaced
    with httpx.Client(base_url=server.url, timeout=60) as c:
        assert c.get("/api/version").status_code == 200
        r = c.post("/api/generate", json={"model": MODEL, "prompt": "Hi", "stream": False,
                                          "options": {"num_predict": 2}})
        assert r.status_code == 200 and r.json()["done"]
        entry = next(m for m in c.get("/api/ps").json()["models"] if m["name"] == MODEL)
        assert entry["strata"]["slots_busy"] == 0 and entry["strata"]["queued"] == 0
        metrics = c.get("/metrics").text
    assert 'strata_model_loads_total{model="smollm2:135m",result="failed"}' not in metrics


def test_events_stream_answers_and_can_be_left(server):
    """The one operation the fuzzer skips: it opens, sends its greeting, and a client that leaves is fine."""
    with httpx.Client(base_url=server.url, timeout=30) as c:
        with c.stream("GET", "/api/events", params={"x": "\u0000\uffff", "refresh": "2"}) as r:
            assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
            assert next(r.iter_lines()).startswith(": connected")
        assert c.get("/api/version").status_code == 200


# ---- type confusion: every field of every body, every JSON type -------------------------------------------

ODD_VALUES = [None, True, 0, -1, 1.5, 2**63, -(2**63) - 1, 1e308, float("nan"), float("inf"), "", "x" * 3,
              "\u0000", [], [1, "a"], {}, {"a": [1]}]
OPTION_KEYS = ("num_ctx", "num_predict", "temperature", "top_k", "top_p", "min_p", "seed", "stop",
               "repeat_penalty", "num_gpu", "main_gpu", "num_thread", "num_batch", "tensor_split", "kv_type")
MESSAGES = [{"role": "user", "content": "hi"}]
BASE_BODIES = [
    ("POST", "/api/generate", {"model": MODEL, "prompt": "hi", "stream": False, "options": {"num_predict": 1}}),
    ("POST", "/api/chat", {"model": MODEL, "messages": MESSAGES, "stream": False, "options": {"num_predict": 1}}),
    ("POST", "/api/embed", {"model": MODEL, "input": ["hi"]}),
    ("POST", "/api/embeddings", {"model": MODEL, "prompt": "hi"}),
    ("POST", "/api/show", {"model": MODEL}),
    ("POST", "/api/create", {"model": "confused", "from": MODEL, "stream": False}),
    ("POST", "/api/copy", {"source": MODEL, "destination": "confused-copy"}),
    ("DELETE", "/api/delete", {"model": "not-there"}),
    ("POST", "/api/layout", {"model": MODEL, "options": {}}),
    ("POST", "/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "max_tokens": 1}),
    ("POST", "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 1}),
    ("POST", "/v1/embeddings", {"model": MODEL, "input": "hi"}),
    ("POST", "/v1/messages", {"model": MODEL, "messages": MESSAGES, "max_tokens": 1}),
    ("POST", "/v1/messages/count_tokens", {"model": MODEL, "messages": MESSAGES}),
    ("POST", "/v1/responses", {"model": MODEL, "input": "hi", "max_output_tokens": 1}),
]


def _paths(method: str, path: str, body: dict, doc: dict) -> list[tuple]:
    """Every place in the body to put an odd value: each documented top-level field, plus nested ones."""
    op = doc["paths"][path][method.lower()]
    props = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    keys = set(props.get("properties", {})) | set(body)
    out = [(k,) for k in sorted(keys)]
    if "messages" in body:
        out += [("messages", 0, "role"), ("messages", 0, "content"), ("messages", 0, "images"),
                ("messages", 0, "tool_calls"), ("messages", 0)]
    if "options" in keys:
        out += [("options", k) for k in OPTION_KEYS]
    if "format" in keys:
        out += [("format", "type"), ("format", "properties")]
    if path == "/v1/chat/completions":
        out += [("response_format", "type"), ("response_format", "json_schema"), ("stream_options", "include_usage"),
                ("n",), ("top_logprobs",), ("logit_bias",), ("max_completion_tokens",)]
    if "input" in body:
        out += [("input", 0)]
    return out


def _put(body: dict, where: tuple, value):
    body = json.loads(json.dumps(body))
    node = body
    for step in where[:-1]:
        if isinstance(step, int):
            node = node[step]
        else:
            if not isinstance(node.get(step), (dict, list)):
                node[step] = {}
            node = node[step]
    last = where[-1]
    if isinstance(node, list):
        node[last] = value
    else:
        node[last] = value
    return body


# The reply-length fields: an odd value there (or options that are not an object, so no num_predict) may mean "no
# limit", and such a reply ends only where the model stops writing (a context shift carries it on past num_ctx; a
# sampled "hi" once ran 107 s), which no test may depend on: sent streamed and left after its first event, which is
# as far as the field's type matters.
LIMIT_FIELDS = {("options", "num_predict"), ("max_tokens",), ("max_completion_tokens",), ("max_output_tokens",)}
SLOW_REQUEST_S = 5.0        # printed as it happens, so a run cut off by pytest-timeout still shows where time went


def _send(c: httpx.Client, method: str, path: str, body: dict, streamed: bool) -> tuple[int, str]:
    raw = json.dumps(body)               # NaN/Infinity as Python writes them (JSON5-ish, as some clients do)
    headers = {"Content-Type": "application/json"}
    if not streamed:
        r = c.request(method, path, content=raw, headers=headers)
        return r.status_code, r.text
    with c.stream(method, path, content=raw, headers=headers) as r:
        if r.status_code >= 400:
            return r.status_code, r.read().decode("utf-8", "replace")
        first = next((line for line in r.iter_lines() if line.strip()), "")
        return r.status_code, first          # leaving the stream here: the server cancels the rest


def test_type_confusion_in_every_field(server):
    """Each field of each request body, replaced by each JSON type (and NaN, Infinity, 2**63...): a 2xx or a
    4xx with a JSON error, never a 5xx. Deterministic and exhaustive where random fuzzing is sparse."""
    failures = []
    n = 0
    slow: dict = {}
    with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT) as c:
        doc = c.get("/api/openapi.json").json()
        for method, path, base in BASE_BODIES:
            for where in _paths(method, path, base, doc):
                for value in ODD_VALUES:
                    body = _put(base, where, value)
                    if path.startswith(("/api/generate", "/api/chat")) and where != ("options",):
                        body.setdefault("options", {})
                        if isinstance(body["options"], dict) and where != ("options", "num_predict"):
                            body["options"]["num_predict"] = 1
                    if path.startswith(("/api/generate", "/api/chat")) and where == ("options",) \
                            and isinstance(body.get("options"), dict):
                        body["options"] = {"num_predict": 1, **body["options"]}    # an options object without a limit
                    streamed = where in LIMIT_FIELDS or (where == ("options",) and not isinstance(value, dict)
                                                         and path.startswith(("/api/generate", "/api/chat")))
                    if streamed:
                        body["stream"] = True
                    if body.get("keep_alive") not in (None, "") and where != ("keep_alive",):
                        body.pop("keep_alive")
                    n += 1
                    t_req = time.monotonic()
                    try:
                        status, text = _send(c, method, path, body, streamed)
                    except httpx.TimeoutException:
                        failures.append(f"{method} {path} {where}={value!r}: no answer (hang)")
                        continue
                    took = time.monotonic() - t_req
                    slow[(path, where)] = slow.get((path, where), 0.0) + took
                    if took > SLOW_REQUEST_S:
                        print(f"slow request: {method} {path} {where}={value!r}: {took:.1f} s", flush=True)
                    if status >= 500 and status != 507:
                        failures.append(f"{method} {path} {where}={value!r}: {status} {text[:200]}")
                    elif status >= 400:
                        try:
                            assert json.loads(text)["error"]
                        except Exception:  # noqa: BLE001
                            failures.append(f"{method} {path} {where}={value!r}: {status} non-JSON {text[:100]!r}")
                    elif streamed and not text.strip():
                        failures.append(f"{method} {path} {where}={value!r}: {status} with an empty stream")
                    if path == "/api/create" and status == 200:
                        c.request("DELETE", "/api/delete", json={"model": body.get("model")})
                    if path == "/api/copy" and status == 200:
                        c.request("DELETE", "/api/delete", json={"model": body.get("destination")})
        assert c.get("/api/version").status_code == 200
    top = sorted(slow.items(), key=lambda kv: -kv[1])[:12]
    print(f"type confusion: {n} requests; slowest fields: " + ", ".join(f"{p}{w} {t:.1f}s" for (p, w), t in top))
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:40])


def test_undocumented_methods_and_paths_get_json_errors(server):
    """Methods the document does not list, on every documented path, and paths near the real ones: a 4xx with
    a JSON body (never a 5xx, never aiohttp's plain-text page)."""
    with httpx.Client(base_url=server.url, timeout=30) as c:
        doc = c.get("/api/openapi.json").json()
        problems = []
        for path, ops in doc["paths"].items():
            concrete = path.replace("{model}", MODEL).replace("{digest}", "sha256-00")
            for method in ("PUT", "PATCH", "DELETE", "POST", "GET", "PROPFIND"):
                if method.lower() in ops or (path == "/api/events" and method == "GET"):
                    continue
                r = c.request(method, concrete, content=b"{}")
                documented_501 = r.status_code == 501 and concrete.startswith(NOT_SUPPORTED)
                if (r.status_code >= 500 and not documented_501) or r.status_code < 400:
                    problems.append(f"{method} {concrete}: {r.status_code}")
                    continue
                try:
                    assert r.json()["error"]
                except Exception:  # noqa: BLE001
                    problems.append(f"{method} {concrete}: {r.status_code} non-JSON {r.text[:80]!r}")
        for path in ("/api", "/api/", "/api/generate/", "/API/GENERATE", "/v1", "/v1/", "/v1/models/",
                     "/api/tags/../version/x", "/%00", "/api/%2e%2e/%2e%2e/etc/passwd", "/" + "a" * 2000):
            r = c.get(path)
            if r.status_code >= 500 or r.status_code == 200 and path != "/v1/models/":
                problems.append(f"GET {path[:60]}: {r.status_code}")
            elif r.status_code >= 400:
                try:
                    assert r.json()["error"]
                except Exception:  # noqa: BLE001
                    problems.append(f"GET {path[:60]}: {r.status_code} non-JSON {r.text[:80]!r}")
        assert not problems, "\n".join(problems)


@pytest.mark.parametrize("raw", [
    b"GET /api/tags HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",
    b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n",
    b"POST /api/generate HTTP/1.1\r\nHost: localhost\r\nContent-Length: -5\r\n\r\n",
    b"POST /api/generate HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST /api/generate HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\nContent-Length: 20\r\n\r\n{}",
    b"GARBAGE\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64),          # a TLS ClientHello
], ids=["long header", "long URL", "negative length", "bad chunk", "two lengths", "no HTTP", "TLS"])
def test_malformed_http_framing_is_refused_and_survived(server, raw):
    """Bytes that are not valid HTTP/1.1 are refused by the HTTP parser (aiohttp answers a plain-text 400: such a
    request never reaches the app, so this is the one error that is not JSON) and the service keeps serving."""
    import socket

    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(raw)
        head = s.recv(200)
    assert head.startswith(b"HTTP/1.") and b" 400 " in head.split(b"\r\n")[0], head
    assert httpx.get(server.url + "/api/version", timeout=30).status_code == 200


def _nested(depth: int) -> dict:
    node: dict = {"type": "string"}
    for _ in range(depth):
        node = {"type": "object", "properties": {"a": node}, "required": ["a"]}
    return node


@pytest.mark.parametrize("schema", [
    {"type": "string", "minLength": 10**9},                           # hung the runner (a 5 GB grammar string)
    {"type": "array", "items": {"type": "integer"}, "minItems": 10**7},
    {"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": 900} for i in range(40)}},
    _nested(400),
], ids=["minLength 1e9", "minItems 1e7", "40 x maxLength 900", "nested 400"])
def test_schemas_too_big_for_a_grammar_are_400_and_the_runner_lives(server, schema):
    with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT) as c:
        c.post("/api/generate", json={"model": MODEL})
        pid = next(m for m in c.get("/api/ps").json()["models"] if m["name"] == MODEL)["strata"]["pid"]
        r = c.post("/api/generate", json={"model": MODEL, "prompt": "x", "stream": False, "format": schema,
                                          "options": {"num_predict": 2}})
        assert r.status_code == 400 and "schema" in r.json()["error"], r.text[:300]
        r = c.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 2, "messages": MESSAGES,
                                                 "response_format": {"type": "json_schema",
                                                                     "json_schema": {"name": "x", "schema": schema}}})
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", r.text[:300]
        r = c.post("/api/generate", json={"model": MODEL, "prompt": "x", "stream": False, "options": {"num_predict": 2},
                                          "format": {"type": "string", "maxLength": 20}})
        assert r.status_code == 200
        assert next(m for m in c.get("/api/ps").json()["models"] if m["name"] == MODEL)["strata"]["pid"] == pid


@pytest.mark.parametrize("schema", [
    {"type": "string", "maxLength": 20000},                           # written out: SIGSEGV in llama.cpp's grammar parser
    {"type": "array", "items": {"type": "integer"}, "maxItems": 20000},
    {"type": "string", "pattern": "^a{1,20000}$"},
], ids=["maxLength 2e4", "maxItems 2e4", "pattern {1,20000}"])
def test_upper_bounds_no_reply_reaches_are_served_and_the_runner_lives(server, schema):
    """An upper bound past what a reply reaches (agents bound tool strings at maxLength 524288) means "unbounded" for
    the grammar: served, never a 400, and never written out into a grammar llama.cpp cannot hold."""
    with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT) as c:
        c.post("/api/generate", json={"model": MODEL})
        pid = next(m for m in c.get("/api/ps").json()["models"] if m["name"] == MODEL)["strata"]["pid"]
        r = c.post("/api/generate", json={"model": MODEL, "prompt": "x", "stream": False, "format": schema,
                                          "options": {"num_predict": 2}})
        assert r.status_code == 200, r.text[:300]
        r = c.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 2, "messages": MESSAGES,
                                                 "response_format": {"type": "json_schema",
                                                                     "json_schema": {"name": "x", "schema": schema}}})
        assert r.status_code == 200, r.text[:300]
        assert r.json()["choices"][0]["finish_reason"] in ("length", "stop")
        assert next(m for m in c.get("/api/ps").json()["models"] if m["name"] == MODEL)["strata"]["pid"] == pid


@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000,
                                  b'{"model": "m", "format": ' + b'{"a":' * 20_000 + b"1" + b"}" * 20_001])
def test_bodies_nested_too_deeply_are_400(server, body):
    r = httpx.post(server.url + "/api/generate", content=body, headers={"Content-Type": "application/json"},
                   timeout=REQUEST_TIMEOUT)
    assert r.status_code == 400 and "deeply" in r.json()["error"], r.text[:200]


@pytest.mark.parametrize("num_batch", [1, 2])
def test_batch_smaller_than_the_slots_still_loads(server, num_batch):
    """num_batch below num_parallel made llama.cpp abort the load (GGML_ASSERT n_outputs_max): a 500 that also
    unloaded the working model. The batch is raised to the slot count instead."""
    with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT) as c:
        failed_before = c.get("/metrics").text.count('result="failed"')
        r = c.post("/api/generate", json={"model": MODEL, "prompt": "hi", "stream": False,
                                          "options": {"num_predict": 2, "num_batch": num_batch}})
        assert r.status_code == 200, r.text[:300]
        assert c.get("/metrics").text.count('result="failed"') == failed_before

"""Codex CLI's own requests, replayed: what Codex 0.171 sent to `POST /v1/responses` (recorded through the logging
proxy, tests/support/fixtures/agents/codex/: a custom provider with wire_api "responses", and `codex --oss`) sent
again to a live loopback service with Qwen2.5-Coder-0.5B-Instruct, plus the official `openai` client's
`responses.create` with a custom (freeform) tool and a namespace.

Each replay must answer 200 with a well-formed Responses event stream: response.created first, then
response.in_progress, every output item opened and closed with the same item, the final response holding exactly
the closed items, sequence numbers counting every event, and every call carrying its call_id and naming a tool
Codex offered (a namespace's member with its `namespace`). Hosted tools Codex offers (web_search) are named in
X-Strata-Dropped-Tools. Nothing depends on the words the model writes: `max_output_tokens` keeps replies short
and greedy sampling keeps them the same, but a reply is only checked for its structure.

The model file comes from `make test-models` (tests/support/model_cache.py); without it these tests skip, and in CI
(STRATA_REQUIRE_TEST_MODELS=1) they fail.
"""
from __future__ import annotations

import json

import httpx
import openai
import pytest

from agent_replay import serve_model, sse_blocks
from repo_paths import FIXTURES

# a Codex request is 5,000-9,000 tokens of prompt: its first reading takes minutes on a busy 2-core machine
pytestmark = pytest.mark.timeout(1800)

MODEL = "coder:0.5b"
RECORDED = FIXTURES / "agents" / "codex"
REPLY_TOKENS = 48          # enough for one exec_command call to close; the rest is cut (response.incomplete)


def recorded_requests() -> list:
    """Every recorded POST /v1/responses body, by file name."""
    out = []
    for path in sorted(RECORDED.glob("*/*-post-v1_responses.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        out.append(pytest.param(record["request"]["body"]["json"], id=f"{path.parent.name}/{path.stem}"))
    return out


def offered(body: dict) -> dict:
    """(namespace, name) -> tool type, of every tool the body offers that can run here."""
    tools: dict = {}
    for t in body.get("tools") or ():
        if t["type"] == "namespace":
            tools.update({(t["name"], m["name"]): m["type"] for m in t["tools"]})
        elif t["type"] in ("function", "custom"):
            tools[(None, t["name"])] = t["type"]
    return tools


def events_of(text: str) -> list[dict]:
    """An SSE body -> its events' data; each event's `event:` name must equal its data's `type`."""
    events = []
    for lines in sse_blocks(text, comments=False):
        name = next(value.strip() for field, value in lines if field == "event")
        data = json.loads("\n".join(value.strip() for field, value in lines if field == "data"))
        assert data["type"] == name, (name, data["type"])
        events.append(data)
    return events


def check_stream(events: list[dict], body: dict) -> dict:
    """The stream is well formed (see the module's docstring); -> the final response object."""
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds[:3]
    assert kinds[-1] in ("response.completed", "response.incomplete"), kinds[-1]
    assert "error" not in kinds and "response.failed" not in kinds
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    added = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.added"}
    done = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.done"}
    assert sorted(added) == sorted(done) == list(range(len(done)))
    final = events[-1]["response"]
    assert final["output"] == [done[i] for i in range(len(done))]
    assert final["status"] == ("incomplete" if kinds[-1] == "response.incomplete" else "completed")
    tools = offered(body)
    for i, item in done.items():
        assert added[i]["type"] == item["type"] and added[i]["id"] == item["id"]
        if item["type"] in ("function_call", "custom_tool_call"):
            assert item["call_id"].startswith("call_") and added[i]["call_id"] == item["call_id"]
            kind = tools[(item.get("namespace"), item["name"])]
            if item["type"] == "function_call":
                assert kind == "function" and isinstance(json.loads(item["arguments"]), dict)
            else:
                assert kind == "custom" and isinstance(item["input"], str)
        else:
            assert item["type"] in ("message", "reasoning"), item["type"]
    assert final["usage"]["input_tokens"] > 0
    return final


@pytest.fixture(scope="module")
def server(live_service, qwen_coder_path):
    # Codex's first request is about 10k tokens (instructions and tool schemas): one sequence of 16k
    return serve_model(live_service, qwen_coder_path, MODEL, num_ctx=16384, num_parallel=1, keep_alive="10m",
                       max_body=4 * 1024 * 1024)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=1800) as c:
        yield c


@pytest.fixture(scope="module")
def ai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=1800)


def test_recordings_are_there():
    """The capture covers both modes, each with a first request and a turn that sends a call's output back."""
    modes = {p.name for p in RECORDED.iterdir() if p.is_dir()}
    assert modes >= {"custom-provider", "oss"}, modes
    bodies = [p.values[0] for p in recorded_requests()]
    assert any(offered(b) and any(t["type"] == "namespace" for t in b["tools"]) for b in bodies)
    assert any(item.get("type") == "function_call_output" for b in bodies for item in b["input"])


def test_codex_oss_probes_answered_as_ollama(http):
    """What `codex --oss` asks before its first request, answered as Ollama would: a server is there
    (/v1/models), its version is one with /v1/responses (0.13.4 or newer), the model is installed (/api/tags)."""
    probes = sorted(RECORDED.glob("oss/*-get-*.json"))
    assert [json.loads(p.read_text())["request"]["path"] for p in probes] == ["/v1/models", "/api/version",
                                                                               "/api/tags"]
    assert MODEL in [m["id"] for m in http.get("/v1/models").json()["data"]]
    version = http.get("/api/version").json()["version"]
    assert tuple(int(x) for x in version.split(".")) >= (0, 13, 4)
    assert MODEL in [m["name"] for m in http.get("/api/tags").json()["models"]]


@pytest.mark.parametrize("body", recorded_requests())
def test_codex_request_replayed(http, body):
    body = {**body, "model": MODEL, "max_output_tokens": REPLY_TOKENS, "temperature": 0}
    r = http.post("/v1/responses", json=body, headers={"Accept": "text/event-stream"})
    assert r.status_code == 200, r.text[:500]
    assert r.headers["content-type"].startswith("text/event-stream")
    final = check_stream(events_of(r.text), body)
    hosted = [t["type"] for t in body.get("tools") or () if t["type"] not in ("function", "custom", "namespace")]
    if hosted:
        assert r.headers["X-Strata-Dropped-Tools"].split(", ") == hosted
    assert final["tools"] == body.get("tools", []) and final["store"] is False


def test_codex_namespace_member_called(http):
    """Codex's first request, the model made to call a namespace's member: the call comes back with its
    namespace and its own name, as Codex looks it up."""
    first = next(p.values[0] for p in recorded_requests() if any(t["type"] == "namespace"
                                                                 for t in p.values[0]["tools"]))
    ns = next(t for t in first["tools"] if t["type"] == "namespace")
    member = ns["tools"][0]["name"]
    body = {**first, "model": MODEL, "max_output_tokens": 200, "temperature": 0,
            "tool_choice": {"type": "function", "name": member, "namespace": ns["name"]}}
    r = http.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text[:500]
    final = check_stream(events_of(r.text), body)
    calls = [o for o in final["output"] if o["type"] == "function_call"]
    assert calls and calls[0]["namespace"] == ns["name"] and calls[0]["name"] == member


PATCH = {"type": "custom", "name": "apply_patch", "description": "Apply a patch to files. The input is the patch.",
         "format": {"type": "grammar", "syntax": "lark",
                    "definition": 'start: "*** Begin Patch" LF hunk+ "*** End Patch" LF?\nhunk: /(.+)/ LF\n%import common.LF'}}
SHELL = {"type": "namespace", "name": "terminal", "description": "A shell", "tools": [
    {"type": "function", "name": "run", "description": "Run a command",
     "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]}
ASK = "Create hello.txt containing hi."


def test_openai_client_custom_tool_call(ai):
    r = ai.responses.create(model=MODEL, input=ASK, tools=[PATCH, SHELL, {"type": "web_search"}],
                            tool_choice={"type": "custom", "name": "apply_patch"}, max_output_tokens=120,
                            temperature=0)
    call = next(o for o in r.output if o.type == "custom_tool_call")
    assert call.name == "apply_patch" and isinstance(call.input, str) and call.call_id.startswith("call_")
    # the call and its output sent back: the next turn reads them (a custom_tool_call_output answers it)
    nxt = ai.responses.create(model=MODEL, tools=[PATCH, SHELL], max_output_tokens=8, temperature=0, input=[
        {"role": "user", "content": ASK},
        {"type": "custom_tool_call", "call_id": call.call_id, "name": "apply_patch", "input": call.input},
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done: hello.txt created"}])
    assert nxt.status in ("completed", "incomplete") and nxt.usage.input_tokens > r.usage.input_tokens


def test_openai_client_streams_custom_and_namespaced_calls(ai):
    with ai.responses.create(model=MODEL, input=ASK, tools=[PATCH, SHELL], stream=True, temperature=0,
                             tool_choice={"type": "function", "name": "run", "namespace": "terminal"},
                             max_output_tokens=120) as stream:
        events = list(stream)
    done = [e.item for e in events if e.type == "response.output_item.done"]
    call = next(i for i in done if i.type == "function_call")
    assert (call.namespace, call.name) == ("terminal", "run") and "cmd" in json.loads(call.arguments)
    assert events[-1].type == "response.completed" and events[-1].response.output[-1].call_id == call.call_id
    with ai.responses.create(model=MODEL, input=ASK, tools=[PATCH], stream=True, temperature=0,
                             tool_choice={"type": "custom", "name": "apply_patch"}, max_output_tokens=120) as stream:
        events = list(stream)
    deltas = "".join(e.delta for e in events if e.type == "response.custom_tool_call_input.delta")
    finished = next(e for e in events if e.type == "response.custom_tool_call_input.done")
    item = next(e.item for e in events if e.type == "response.output_item.done")
    assert item.type == "custom_tool_call" and deltas == finished.input == item.input

"""Claude Code's own requests replayed on a live server: what Claude Code 2.1 sent to `strata serve` (recorded
through tests/support/recording_proxy.py, kept under tests/support/fixtures/agents/claude-code/) goes back to
`/v1/messages?beta=true` with its recorded headers and body, on the Qwen2.5-Coder-0.5B fixture imported under the
name Claude Code asked for (`coder:0.5b`), and each answer must be a 200 and a well-formed Anthropic event stream:
message_start first, message_stop last, every content block opened and closed in order, a tool_use block's input
JSON that parses to an object and names an offered tool, a message_delta with a stop_reason and the whole usage.
The recordings: `full-*` is Claude Code's first request as it comes by default (24 tools, 64 KB of schemas,
~18,700 prompt tokens); `run-*` are requests of one whole run with `--tools Write,Read,Bash` (~2,800 prompt tokens
and growing: tool results, and Claude Code's background-task notifications as system turns inside `messages`),
streamed here in order, so each reuses the last one's prompt from the prompt cache. The full request goes to
`/v1/messages/count_tokens` (the same body, as Claude Code counts), where its size costs no generation.
`session-8-requests.jsonl` is a whole 8-request session of Claude Code 2.1.197 (bench/bench_agent_replay.py
--record: tool calls scripted by a stand-in for Anthropic's API), trimmed to fit a test (the system blocks and
reminders cut short, three of its 26 tools kept, the machine's paths replaced): each request repeats the last one
and appends the tool call and its result, the `cache_control` marker moving to the newest block. Replayed in
order, every request after the first must take all of the previous prompt from the prompt cache, computing only
the new tail; a new session (another billing nonce, another date) must reuse the system prompt and the tools.

Where an assertion is about the prompt and not the reply (the session's cache reuse; run-07's 1,800 new tokens of
turns and system notifications, checked for the stream's shape), the request goes to the fixture's twin
(agent_replay.write_tokenizer_twin: Qwen2.5-Coder's own tokenizer and chat template on two random layers), where a
prompt renders and tokenizes to the same tokens and costs a thousandth of the compute; the requests whose reply is
checked as the real model's (run-01, run-02, the official client's) stay on Qwen2.5-Coder.

Body changes: `max_tokens` is lowered so a reply ends soon on 2 cores (the structure is what is checked, not
the words of a sampled reply), and `model` names the twin where a request goes to it. Nothing here depends on
timing or on what the model chooses to say.
The model file comes from `make test-models`; without it these tests skip (CI sets STRATA_REQUIRE_TEST_MODELS)."""
from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from agent_replay import serve_model, sse_blocks, write_tokenizer_twin
from repo_paths import FIXTURES

# run-01 is a 2,750-token prompt on Qwen2.5-Coder: a minute on two busy cores, many more on a shared CI machine
pytestmark = pytest.mark.timeout(1800)

MODEL = "coder:0.5b"
TWIN = "coder-twin:random"        # write_tokenizer_twin of the fixture: the same prompts' tokens, random weights
REPLY_TOKENS = 96
RECORDED = sorted((FIXTURES / "agents" / "claude-code").glob("*.json"))
FULL = [p for p in RECORDED if p.name.startswith("full-")]
SESSION = FIXTURES / "agents" / "claude-code" / "session-8-requests.jsonl"
MESSAGES = [p for p in RECORDED if p.name.startswith("run-")]
# the recorded request -> the model it is replayed on: the last one's long new tail (Claude Code's background-task
# notifications as system turns) is checked for the stream's shape, which is the twin's as much as Qwen's
REPLAYED_ON = {p.stem: TWIN if p.stem == "run-07-system-notifications" else MODEL for p in MESSAGES}
# recorded headers that belong to the recorded connection, not to the request
CONNECTION_HEADERS = {"host", "content-length", "connection", "accept-encoding", "x-api-key", "authorization"}


def recorded(path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))["request"]


@pytest.fixture(scope="module")
def server(live_service, qwen_coder_path):
    return serve_model(live_service, qwen_coder_path, MODEL, num_ctx=32768, num_parallel=1, keep_alive="10m",
                       max_body=8 * 1024 * 1024)


@pytest.fixture(scope="module")
def twin(server, qwen_coder_path, tmp_path_factory):
    gguf = write_tokenizer_twin(qwen_coder_path, tmp_path_factory.mktemp("twin") / "coder-twin.gguf")
    with httpx.Client(base_url=server.url, timeout=300) as c:
        r = c.post("/api/create", json={"model": TWIN, "from": str(gguf), "stream": False})
        assert r.status_code == 200, r.text
    return TWIN


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=None) as c:
        yield c


def sse(text: str) -> list[tuple[str, dict]]:
    """An event stream -> [(event name, data object)]; every event has both lines and its data is JSON."""
    out = []
    for block in sse_blocks(text):
        lines = dict(block)
        assert set(lines) == {"event", "data"}, block
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"], block
        out.append((lines["event"], data))
    return out


def check_stream(events: list[tuple[str, dict]], tools: set[str], model: str = MODEL) -> dict:
    """Anthropic's event grammar: message_start (ping)* (block)* message_delta message_stop, each block
    content_block_start delta* content_block_stop with indices 0, 1, ...; -> the message as the client builds it."""
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"], names
    message = events[0][1]["message"]
    assert message["role"] == "assistant" and message["model"] == model and message["content"] == []
    blocks: list[dict] = []
    open_block = None
    for name, data in events[1:-2]:
        if name == "ping":
            continue
        if name == "content_block_start":
            assert open_block is None and data["index"] == len(blocks), data
            open_block = dict(data["content_block"], _json="")
            blocks.append(open_block)
        elif name == "content_block_delta":
            assert open_block is not None and data["index"] == len(blocks) - 1, data
            delta = data["delta"]
            if delta["type"] == "text_delta":
                open_block["text"] += delta["text"]
            elif delta["type"] == "input_json_delta":
                open_block["_json"] += delta["partial_json"]
            else:
                assert delta["type"] == "thinking_delta", delta
        elif name == "content_block_stop":
            assert open_block is not None and data["index"] == len(blocks) - 1, data
            open_block = None
        else:
            raise AssertionError(f"unexpected event {name}: {data}")
    assert open_block is None, "a content block was left open"
    final = events[-2][1]
    for b in blocks:
        if b["type"] == "tool_use":
            b["input"] = json.loads(b["_json"])
            assert isinstance(b["input"], dict) and b["name"] in tools and b["id"].startswith("toolu_"), b
    reason = final["delta"]["stop_reason"]
    assert reason in ("end_turn", "max_tokens", "tool_use", "stop_sequence"), final
    assert (reason == "tool_use") == any(b["type"] == "tool_use" for b in blocks) or reason == "max_tokens"
    usage = final["usage"]
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] > 0 and usage["output_tokens"] > 0, usage
    return {"content": blocks, "stop_reason": reason, "usage": usage}


def test_the_recordings_are_claude_codes_requests():
    assert FULL and MESSAGES, "no recorded /v1/messages requests"
    for p in RECORDED:
        rec = recorded(p)
        assert rec["headers"]["user-agent"].startswith("claude-cli/"), p.name
        assert all(v == "<redacted>" for k, v in rec["headers"].items() if k in ("x-api-key", "authorization"))


@pytest.mark.parametrize("path", MESSAGES, ids=[p.stem for p in MESSAGES])
def test_recorded_request_streams_a_well_formed_message(http, twin, path):
    rec = recorded(path)
    model = REPLAYED_ON[path.stem]
    body = dict(rec["body"]["json"], max_tokens=REPLY_TOKENS, model=model)
    headers = {k: v for k, v in rec["headers"].items() if k not in CONNECTION_HEADERS}
    with http.stream("POST", rec["path"], params=rec["query"], headers=headers, json=body) as r:
        text = r.read().decode()
    assert r.status_code == 200, text[:2000]
    assert r.headers["content-type"].startswith("text/event-stream")
    tools = {t["name"] for t in body.get("tools") or ()}
    message = check_stream(sse(text), tools, model)
    assert message["content"], message


@pytest.mark.parametrize("path", FULL + MESSAGES[:1], ids=[p.stem for p in FULL + MESSAGES[:1]])
def test_recorded_body_counts_its_tokens(http, path):
    """count_tokens takes the whole messages body (stream, max_tokens, thinking and all): 24 tools and a system
    turn inside `messages` in the full request."""
    body = recorded(path)["body"]["json"]
    r = http.post("/v1/messages/count_tokens", params={"beta": "true"}, json=body)
    assert r.status_code == 200, r.text
    without_tools = http.post("/v1/messages/count_tokens", json={k: v for k, v in body.items() if k != "tools"})
    assert r.json()["input_tokens"] > without_tools.json()["input_tokens"] > 0


def test_first_recorded_request_through_the_anthropic_client(server):
    """The official client (its beta namespace, as Claude Code calls it) streams the recorded body."""
    body = dict(recorded(MESSAGES[0])["body"]["json"], max_tokens=REPLY_TOKENS)
    body.pop("stream")
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=None)
    with client.beta.messages.stream(**body, betas=["claude-code-20250219", "context-management-2025-06-27",
                                                    "effort-2025-11-24"]) as s:
        message = s.get_final_message()
    assert message.stop_reason in ("end_turn", "max_tokens", "tool_use") and message.content
    assert message.usage.output_tokens > 0


def test_anthropics_own_tools_are_left_out_and_named(http):
    """Claude Code's WebSearch asks with Anthropic's server tool `web_search_20250305`: it cannot run here, so the
    request is served without it and the response says so."""
    rec = recorded(MESSAGES[0])
    body = dict(rec["body"]["json"], max_tokens=8, stream=False,
                tools=rec["body"]["json"]["tools"] + [{"type": "web_search_20250305", "name": "web_search",
                                                       "max_uses": 8}])
    r = http.post("/v1/messages", params={"beta": "true"}, json=body)
    assert r.status_code == 200, r.text
    assert r.headers["X-Strata-Dropped-Tools"] == "web_search"
    assert r.json()["type"] == "message"


def test_unknown_model_is_anthropics_404_naming_it(http):
    body = dict(recorded(FULL[0])["body"]["json"], model="claude-haiku-4-5-20251001", max_tokens=8)
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = http.post(path, params={"beta": "true"}, json=body)
        assert r.status_code == 404, r.text
        err = r.json()
        assert err["type"] == "error" and err["error"]["type"] == "not_found_error"
        assert "claude-haiku-4-5-20251001" in err["error"]["message"]


def session_requests() -> list[dict]:
    """The recorded bodies under the twin's name, without their thinking budget (31,999 tokens, which a short
    max_tokens must exceed; Qwen2.5 does not think anyway)."""
    bodies = [dict(json.loads(line), model=TWIN) for line in SESSION.read_text(encoding="utf-8").splitlines()]
    return [{k: v for k, v in b.items() if k != "thinking"} for b in bodies]


def test_the_session_recording_only_appends():
    bodies = session_requests()
    assert len(bodies) == 8
    for a, b in zip(bodies, bodies[1:]):
        assert a["system"] == b["system"] and a["tools"] == b["tools"]
        assert len(b["messages"]) == len(a["messages"]) + 2
        bare = [{**m, "content": [{k: v for k, v in c.items() if k != "cache_control"} for c in m["content"]]}
                if isinstance(m["content"], list) else m for m in a["messages"] + b["messages"]]
        assert bare[:len(a["messages"])] == bare[len(a["messages"]):2 * len(a["messages"])]


def test_a_recorded_session_reuses_all_but_each_new_tail(http, twin):
    """Each request's cached prompt tokens are exactly the previous request's prompt (the template renders the
    previous prompt as a token prefix of the next: the reply it ended with was the model's own, not the recorded
    call, so the cache holds nothing more); only the appended call, result and generation prompt are computed."""
    previous = None
    for i, body in enumerate(session_requests()):
        r = http.post("/v1/messages", json=dict(body, max_tokens=8, stream=False, temperature=0))
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        prompt = usage["input_tokens"] + usage["cache_read_input_tokens"]
        if previous is not None:
            assert usage["cache_read_input_tokens"] == previous, (i + 1, usage, previous)
            assert 0 < usage["input_tokens"] < 200, (i + 1, usage)
        previous = prompt


def test_a_new_session_reuses_the_system_prompt_and_tools(http, twin):
    """The next session: Claude Code's billing block has a new nonce (the dialect drops that block) and the date
    in the first message's reminders is another day's. Everything before the date is reused."""
    first = session_requests()[0]
    system = [dict(b, text=b["text"] + " cch=4d2f;") if b["text"].startswith("x-anthropic-billing-header:") else b
              for b in first["system"]]
    content = [dict(c, text=c["text"].replace("Today's date is 2026-11-27", "Today's date is 2026-11-28"))
               for c in first["messages"][0]["content"]]
    assert content != first["messages"][0]["content"]
    head = {"model": TWIN, "system": system, "tools": first["tools"], "max_tokens": 8}
    shared = http.post("/v1/messages/count_tokens", json={**head, "messages": [
        {"role": "user", "content": content[:2]}]}).json()["input_tokens"]
    http.post("/v1/messages", json=dict(first, max_tokens=8)).raise_for_status()    # the slot holds session 1 again
    r = http.post("/v1/messages", json={**head, "temperature": 0,
                                        "messages": [{"role": "user", "content": content}]})
    assert r.status_code == 200, r.text
    # the system prompt, the tools and the first two reminders are cached: all but the end of count_tokens' prompt
    # (its closing <|im_end|> and the generation prompt), up to the changed date
    assert r.json()["usage"]["cache_read_input_tokens"] >= shared - 8, (r.json()["usage"], shared)


# ---- a session past the input budget: Claude Code compacts, nothing is refused ------------------------------------
# `compact-session.jsonl`: every /v1/messages request of one run of bench/agents_e2e.py's `claude-compact` (Claude
# Code 2.1.197 through `strata launch claude --model coder:0.5b -- -p "..." --tools Read,Write,Bash` on Qwen2.5-Coder-
# 0.5B with a 32,768 context: launch tells it CLAUDE_CODE_AUTO_COMPACT_WINDOW, so it compacts past 11,576 tokens),
# recorded by the logging proxy, the run's temp paths replaced. Its second reply called Write and Read (of a 37 KB
# file): with that result the conversation passes the compaction point by Claude Code's own estimate, so before
# sending it Claude Code asks for a summary of the turns before the newest (its compaction request: those turns and
# COMPACT_ASK), then goes on from the summary (COMPACT_CONTINUED) with the newest turn kept as it was. Every request
# was a 200; the agent ended on its own (exit 0).
COMPACTED = FIXTURES / "agents" / "claude-code" / "compact-session.jsonl"
COMPACT_ASK = "Your task is to create a detailed summary of"
COMPACT_CONTINUED = "This session is being continued from a previous conversation"
COMPACTS_PAST = 32768 - 8192 - 13000


def compact_session() -> list[dict]:
    return [json.loads(line) for line in COMPACTED.read_text(encoding="utf-8").splitlines()]


def message_texts(message: dict) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    out = []
    for block in content:
        if block.get("type") == "text":
            out.append(block["text"])
        elif block.get("type") == "tool_result":
            inner = block.get("content")
            out += [inner] if isinstance(inner, str) else [b.get("text", "") for b in inner or ()]
    return "\n".join(out)


def compaction_points(session: list[dict]) -> list[int]:
    """Indices of the requests that ask for the summary (COMPACT_ASK in their last user turn)."""
    return [i for i, rec in enumerate(session)
            if COMPACT_ASK in message_texts([m for m in rec["body"]["messages"] if m["role"] == "user"][-1])]


def tool_ids(messages: list[dict]) -> set[str]:
    return {b["id"] for m in messages if isinstance(m["content"], list) for b in m["content"]
            if b.get("type") == "tool_use"}


def test_the_compaction_recording_compacts_and_goes_on():
    session = compact_session()
    assert all(rec["status"] == 200 for rec in session), [rec["status"] for rec in session]
    assert all(rec["headers"]["user-agent"].startswith("claude-cli/2.1.197") for rec in session)
    asks = compaction_points(session)
    assert asks and asks[0] + 1 < len(session), asks
    summarized, after = session[asks[0]]["body"]["messages"], session[asks[0] + 1]["body"]["messages"]
    assert COMPACT_CONTINUED in message_texts(after[0])
    # the summarized turns are gone (the summary stands for them); the newest turn, a Read of the 37 KB file, is kept
    assert tool_ids(summarized) and not tool_ids(summarized) & tool_ids(after)
    assert any(len(message_texts(m)) > 30_000 for m in after if m["role"] == "user")


def test_a_session_past_its_budget_is_served_through_its_compaction(http, twin):
    """Replayed in order on the tokenizer twin (the same prompts' tokens): every request, the compaction request
    among them, is a 200 and a well-formed stream; the conversation after the compaction (the summary and the kept
    turn with the file) is past the compaction point and is served too."""
    prompts = []
    for rec in compact_session():
        body = {k: v for k, v in rec["body"].items() if k != "thinking"}
        body.update(model=twin, max_tokens=REPLY_TOKENS)
        with http.stream("POST", rec["path"], params=rec["query"], headers=rec["headers"], json=body) as r:
            text = r.read().decode()
        assert r.status_code == 200, text[:2000]
        assert r.headers["content-type"].startswith("text/event-stream")
        usage = check_stream(sse(text), {t["name"] for t in body.get("tools") or ()}, twin)["usage"]
        prompts.append(usage["input_tokens"] + usage["cache_read_input_tokens"])
    first = compaction_points(compact_session())[0]
    assert prompts[first] < COMPACTS_PAST < prompts[first + 1] <= 32768 - 8192, prompts

"""Agent replay: a real coding agent's session (system prompt, tool schemas, several turns of tool calls and
results) replayed against Strata and llama-server from the same llama.cpp, time to first token and cached prompt
tokens per turn, beside the new tail each turn should be all that is computed.

    # 1. record: Claude Code against a scripted stand-in for Anthropic's API (no model needed: it answers each
    #    request with the next tool call of a short script, then a final text), every request kept as JSON lines;
    #    --agent opencode: OpenCode against a stand-in for an OpenAI-compatible server, the same script
    .venv/bin/python bench/bench_agent_replay.py --record /tmp/claude-session.jsonl [--agent opencode]
    # 2. replay the recorded requests (those that carry the tools: the agent's main loop) against both engines
    .venv/bin/python bench/bench_agent_replay.py --replay /tmp/claude-session.jsonl --model PATH [--threads 1]
    # only what the requests change and each one's new tail (Strata renders them; nothing is generated)
    .venv/bin/python bench/bench_agent_replay.py --replay /tmp/claude-session.jsonl --model PATH --tails
    # the next day: OpenCode's session again with tomorrow's date in its system prompt, after yesterday's last
    # request; Strata with cache_reuse N against llama-server with --cache-reuse N
    .venv/bin/python bench/bench_agent_replay.py --replay /tmp/opencode-session.jsonl --model PATH --next-day 256

The recording also shows what the agent changes between requests (printed by --replay: the first differing
character of each request's system prompt against the previous one, whether the tools are the same, and whether
the earlier messages are repeated unchanged or only their `cache_control` markers moved). Each request is rendered
by Strata's runner (/apply-template, after the Anthropic dialect's parse for Claude Code's bodies) and tokenized
with the model's vocabulary: its "new tail" is what follows its longest common token prefix with the request
before, all that a prompt cache has to compute (the table's uncached = prompt - cached should equal it).
Both servers run with the same model, threads, one slot, --ctx tokens and their default prompt caching;
requests go exactly as recorded through /v1/messages (Claude Code's) or /v1/chat/completions (OpenCode's),
both served by both, streamed, max_tokens 1 (--max-tokens): the time to the first token is then the time to the
whole one-token reply on both engines (with longer replies, a tool call's first delta on both comes once its name
is complete, both stream its arguments in pieces; text held back as a possible marker delays it too). TTFT and the
cached prompt tokens per turn (`usage.cache_read_input_tokens`, `usage.prompt_tokens_details.cached_tokens` or
llama-server's `timings.cache_n`); turn 1 is cold for both; engines alternate which goes first each turn.

--next-day N: OpenCode names the day in its system message, before its tool schemas (an `<env>` block), so the next
day's session shares only the text before the date with yesterday's. Yesterday's first request is sent first (cold,
it fills each engine's one slot); then the whole session again with the next day's date. (Not yesterday's last
request: a replay repeats yesterday's messages word for word, which a real next day would not, and Strata would move
them from its host-RAM copy of yesterday's prompt on every turn.) Strata runs the model with
`PARAMETER cache_reuse N` (cached chunks of at least N tokens that the new prompt repeats after the change are moved
into place), llama-server with `--cache-reuse N`. "reusable": the request's tokens a cache reuse with this N could
take from the previous prompt (its common prefix and the chunks after it; app/engine/runner/cache/chunk_reuse.py).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_long_context import Engine, free_port, llama_server, load_text, strata  # noqa: E402

# the session Claude Code is driven through: each tool call answers one request, then a final reply
SCRIPT = [("Bash", {"command": "ls", "description": "List files"}),
          ("Read", {"file_path": "{cwd}/notes.txt"}),
          ("Bash", {"command": "wc -l notes.txt", "description": "Count lines"}),
          ("Grep", {"pattern": "harbor", "path": "{cwd}"}),
          ("Bash", {"command": "date", "description": "Show the date"}),
          ("Read", {"file_path": "{cwd}/notes.txt", "offset": 1, "limit": 2}),
          ("Bash", {"command": "echo done", "description": "Finish"})]


def sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def serve_stand_in(port: int, routes: list) -> web.AppRunner:
    """A stand-in API on loopback: `routes` (method, path, handler), every other path answered with {}."""
    async def other(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application(client_max_size=64 << 20)
    for method, route, handler in routes:
        app.router.add_route(method, route, handler)
    app.router.add_route("*", "/{tail:.*}", other)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def scratch_project() -> Path:
    """A temporary home with a `project` folder holding the notes.txt the scripted sessions read."""
    work = Path(tempfile.mkdtemp(prefix="agent-replay-"))
    (work / "project").mkdir()
    (work / "project" / "notes.txt").write_text("the harbor lantern\nthe orchard gate\nthe canyon bridge\n")
    return work


async def fake_anthropic(log_path: Path, cwd: str, port: int):
    """A stand-in for api.anthropic.com: each /v1/messages request that carries tools gets the next scripted tool
    call (streamed as Anthropic streams), the others (titles, quota checks) a short text; all are logged."""
    state = {"step": 0}
    log = open(log_path, "w")

    async def messages(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        log.write(json.dumps({"t": time.time(), "path": request.path, "body": body}) + "\n")
        log.flush()
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        mid = f"msg_{state['step']}_{int(time.time() * 1000)}"
        await resp.write(sse("message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": body.get("model"), "content": [],
            "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 1}}}))
        if body.get("tools") and state["step"] < len(SCRIPT):
            name, args = SCRIPT[state["step"]]
            state["step"] += 1
            args = json.loads(json.dumps(args).replace("{cwd}", cwd))
            await resp.write(sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
                "type": "tool_use", "id": f"toolu_{state['step']:04d}", "name": name, "input": {}}}))
            await resp.write(sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(args)}}))
            stop = "tool_use"
        else:
            await resp.write(sse("content_block_start", {"type": "content_block_start", "index": 0,
                                                         "content_block": {"type": "text", "text": ""}}))
            await resp.write(sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                         "delta": {"type": "text_delta", "text": "Done."}}))
            stop = "end_turn"
        await resp.write(sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
        await resp.write(sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop},
                                               "usage": {"output_tokens": 5}}))
        await resp.write(sse("message_stop", {"type": "message_stop"}))
        await resp.write_eof()
        return resp

    return await serve_stand_in(port, [("POST", "/v1/messages", messages)]), log


async def record(path: Path) -> None:
    port = free_port()
    work = scratch_project()
    runner, log = await fake_anthropic(path, str(work / "project"), port)
    env = dict(os.environ, HOME=str(work), ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}",
               ANTHROPIC_API_KEY="sk-unused", DISABLE_TELEMETRY="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    proc = await asyncio.create_subprocess_exec(
        "claude", "-p", "Look at the files here and tell me what notes.txt says.", "--permission-mode", "acceptEdits", "--allowedTools", "Bash Read Grep",
        "--model", "claude-sonnet-4-5", cwd=str(work / "project"), env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 600)
    await runner.cleanup()
    log.close()
    n = sum(1 for _ in open(path))
    print(f"claude exited {proc.returncode}; {n} requests recorded in {path}; stdout: {out.decode()[:200]!r} "
          f"stderr: {err.decode()[-300:]!r}", file=sys.stderr)


# OpenCode's tools are lower-case and take camelCase paths
OPENCODE_SCRIPT = [("bash", {"command": "ls", "description": "List files"}),
                   ("read", {"filePath": "{cwd}/notes.txt"}),
                   ("bash", {"command": "wc -l notes.txt", "description": "Count lines"}),
                   ("grep", {"pattern": "harbor", "path": "{cwd}"}),
                   ("bash", {"command": "date", "description": "Show the date"}),
                   ("read", {"filePath": "{cwd}/notes.txt", "offset": 1, "limit": 2}),
                   ("bash", {"command": "echo done", "description": "Finish"})]


async def fake_openai(log_path: Path, cwd: str, port: int):
    """A stand-in for an OpenAI-compatible server (what OpenCode's provider calls): each streamed
    /v1/chat/completions request that carries tools gets the next scripted tool call, the others (titles) a short
    text; all are logged."""
    state = {"step": 0}
    log = open(log_path, "w")

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        log.write(json.dumps({"t": time.time(), "path": request.path, "body": body}) + "\n")
        log.flush()
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        base = {"id": f"chatcmpl-{state['step']}", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": body.get("model")}

        async def chunk(delta: dict, finish=None, usage=None):
            d = dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}])
            if usage:
                d["usage"] = usage
            await resp.write(f"data: {json.dumps(d)}\n\n".encode())
        tools = {t.get("function", {}).get("name") for t in body.get("tools") or []}
        if tools and state["step"] < len(OPENCODE_SCRIPT) and OPENCODE_SCRIPT[state["step"]][0] in tools:
            name, args = OPENCODE_SCRIPT[state["step"]]
            state["step"] += 1
            args = json.loads(json.dumps(args).replace("{cwd}", cwd))
            await chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": f"call_{state['step']:04d}",
                         "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]})
            finish = "tool_calls"
        else:
            await chunk({"role": "assistant", "content": "Done."})
            finish = "stop"
        await chunk({}, finish, {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "bench", "object": "model"}]})

    return await serve_stand_in(port, [("POST", "/v1/chat/completions", chat), ("GET", "/v1/models", models)]), log


async def record_opencode(path: Path) -> None:
    port = free_port()
    work = scratch_project()
    runner, log = await fake_openai(path, str(work / "project"), port)
    config = {"$schema": "https://opencode.ai/config.json",
              "provider": {"bench": {"npm": "@ai-sdk/openai-compatible", "name": "Bench",
                                     "options": {"baseURL": f"http://127.0.0.1:{port}/v1"},
                                     "models": {"bench": {"name": "bench", "tool_call": True,
                                                          "limit": {"context": 32768, "output": 4096}}}}},
              "model": "bench/bench", "small_model": "bench/bench", "autoupdate": False, "share": "disabled",
              "permission": {"bash": "allow", "edit": "allow"}}
    env = dict(os.environ, HOME=str(work), XDG_CONFIG_HOME=str(work / ".config"), XDG_DATA_HOME=str(work / ".data"),
               XDG_CACHE_HOME=str(work / ".cache"), XDG_STATE_HOME=str(work / ".state"),
               OPENCODE_CONFIG_CONTENT=json.dumps(config), OPENCODE_DISABLE_AUTOUPDATE="1",
               OPENCODE_DISABLE_SHARE="1", PWD=str(work / "project"))     # OpenCode takes its folder from PWD
    proc = await asyncio.create_subprocess_exec(
        "opencode", "run", "Look at the files here and tell me what notes.txt says.",
        cwd=str(work / "project"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 600)
    await runner.cleanup()
    log.close()
    n = sum(1 for _ in open(path))
    print(f"opencode exited {proc.returncode}; {n} requests recorded in {path}; stdout: {out.decode()[-300:]!r} "
          f"stderr: {err.decode()[-300:]!r}", file=sys.stderr)


def system_text(body: dict) -> str:
    s = body["messages"][0].get("content") if is_chat(body) else body.get("system")
    return s if isinstance(s, str) else "".join(b.get("text", "") for b in s or [])


def describe_changes(bodies: list[dict]) -> None:
    """What each request changes against the previous one: where its system prompt first differs, whether the tools
    are the same, and which of the previous request's messages it no longer repeats as they were (a request that
    only appends leaves them all; a moved `cache_control` marker is named, since no template renders it)."""
    def bare(m):
        strip = lambda x: {k: v for k, v in x.items() if k != "cache_control"} if isinstance(x, dict) else x
        c = m.get("content")
        return json.dumps(dict(m, content=[strip(x) for x in c] if isinstance(c, list) else c), sort_keys=True)
    for i in range(1, len(bodies)):
        a, b = system_text(bodies[i - 1]), system_text(bodies[i])
        k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
        tools_same = json.dumps(bodies[i - 1].get("tools")) == json.dumps(bodies[i].get("tools"))
        where = "identical" if a == b else f"first difference at character {k} of {len(b)}: {b[max(0, k - 40):k + 40]!r}"
        old, new = bodies[i - 1].get("messages") or [], bodies[i].get("messages") or []
        same = next((j for j in range(min(len(old), len(new))) if json.dumps(old[j]) != json.dumps(new[j])),
                    min(len(old), len(new)))
        if same == len(old):
            msgs = f"messages: {len(old)} repeated unchanged, {len(new) - len(old)} appended"
        elif all(bare(old[j]) == bare(new[j]) for j in range(same, len(old))):
            msgs = (f"messages: {len(old)} repeated, {len(new) - len(old)} appended; only cache_control markers "
                    f"moved (from message {same + 1} on)")
        else:
            msgs = f"messages: CHANGED from message {same + 1} of {len(old)} on"
        print(f"request {i + 1} vs {i}: system prompt {where}; tools {'identical' if tools_same else 'DIFFER'}; {msgs}",
              file=sys.stderr)


async def rendered_tokens(strata_engine: Engine, model_path: str, bodies: list[dict]) -> list[list[int]]:
    """Each request's prompt as Strata's runner renders it (the Anthropic dialect's parse in this process, then
    /apply-template over the same messages and tools), tokenized with the model's own vocabulary: what the
    prompt cache compares from request to request."""
    import llama_cpp
    from app.service.dialects.anthropic.parse import parse_messages_request
    vocab = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
    out = []
    assert strata_engine.session is not None
    for body in bodies:
        if is_chat(body):
            chat = {"model": strata_engine.model, "messages": body["messages"], "tools": body.get("tools")}
        else:
            req, _ = parse_messages_request(body, count_only=True)
            chat = {"model": strata_engine.model, "messages": req.messages, "tools": req.tools}
        async with strata_engine.session.post(strata_engine.url + "/apply-template", json=chat) as r:
            if r.status != 200:
                raise RuntimeError(f"/apply-template: HTTP {r.status}: {(await r.text())[:400]}")
            rendered = await r.json()
        toks = vocab.tokenize(rendered["prompt"].encode(), add_bos=False, special=True)
        if len(toks) != rendered["n_tokens"]:
            print(f"note: {len(toks)} tokens here, {rendered['n_tokens']} by the runner", file=sys.stderr)
        out.append(toks)
    return out


def common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))


def is_chat(body: dict) -> bool:
    """An OpenAI chat completions body (OpenCode's) rather than an Anthropic Messages one (Claude Code's)."""
    return bool(body.get("messages")) and body["messages"][0].get("role") == "system"


async def replay_one(e: Engine, body: dict, max_tokens: int = 1) -> dict:
    chat = is_chat(body)
    body = dict(body, model=e.model, stream=True, max_tokens=max_tokens, temperature=0.0)
    body.pop("thinking", None)
    body.pop("metadata", None)
    if chat:
        body["stream_options"] = {"include_usage": True}
    t0 = time.perf_counter()
    first, usage = None, {}
    assert e.session is not None
    async with e.session.post(e.url + ("/v1/chat/completions" if chat else "/v1/messages"), json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"{e.name}: HTTP {r.status}: {(await r.text())[:400]}")
        async for raw in r.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            d = json.loads(line[6:])
            if d.get("type") == "message_start":
                usage.update(d["message"].get("usage") or {})
            elif d.get("type") == "message_delta":
                usage.update(d.get("usage") or {})
            elif d.get("type") == "content_block_delta" and first is None:
                first = time.perf_counter()
            elif chat:
                if d.get("usage"):
                    usage.update(d["usage"])
                if d.get("timings"):                       # llama-server's own count of the cached prompt
                    usage["cache_n"] = d["timings"].get("cache_n")
                delta = (d.get("choices") or [{}])[0].get("delta") or {}
                if first is None and (delta.get("content") or delta.get("tool_calls") or
                                      delta.get("reasoning_content")):
                    first = time.perf_counter()
    t_end = time.perf_counter()
    if chat:
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or usage.get("cache_n") or 0
        prompt = usage.get("prompt_tokens") or 0
    else:
        cached = usage.get("cache_read_input_tokens") or 0
        prompt = (usage.get("input_tokens") or 0) + cached
    return {"ttft": (first or t_end) - t0, "prompt": prompt, "cached": cached}


def next_day(body: dict) -> dict:
    """`body` on the day after the one its system message names (OpenCode's `Today's date: Fri Nov 27 2026`)."""
    import datetime
    import re
    system = system_text(body)
    m = re.search(r"Today's date: (\w{3} \w{3} \d{1,2} \d{4})", system)
    if m is None:
        raise SystemExit("--next-day: no \"Today's date: ...\" in the system message (an OpenCode recording?)")
    day = datetime.datetime.strptime(m.group(1), "%a %b %d %Y") + datetime.timedelta(days=1)
    text = system.replace(m.group(0), "Today's date: " + day.strftime("%a %b %d %Y").replace(" 0", " "))
    return dict(body, messages=[dict(body["messages"][0], content=text), *body["messages"][1:]])


async def replay_next_day(args, bodies: list[dict]) -> None:
    from app.engine.runner.cache.chunk_reuse import reuse_chunks
    n = args.next_day
    days = [next_day(b) for b in bodies]
    engines = [strata(args.model, args.threads, args.ctx, tempfile.mkdtemp(prefix="strata-bench-replay-"),
                      f"reuse:cache_reuse={n}")]
    if not args.only_strata:
        engines.append(llama_server(args.model, args.threads, args.ctx))
        engines[-1].cmd += ["--cache-reuse", str(n)]
    res: dict = {e.name: [] for e in engines}
    try:
        for e in engines:
            await e.start()
            await e.complete("Hello", 4)
        toks = await rendered_tokens(engines[0], args.model, [bodies[0]] + days)
        reusable, tails = [], []
        for i in range(1, len(toks)):
            k = common_prefix(toks[i - 1], toks[i])
            moved = sum(c.n for c in reuse_chunks(toks[i - 1], toks[i], k, n, len(toks[i]) - 1, 1 << 30)) if k else 0
            reusable.append(k + moved)
            tails.append(len(toks[i]) - k)
        print(f"yesterday's first request: {len(toks[0])} tokens; the next day's first shares "
              f"{common_prefix(toks[0], toks[1])} by prefix, {reusable[0]} with cache reuse", file=sys.stderr)
        cold = {}
        for e in engines:                       # yesterday: the session's first request, cold
            cold[e.name] = await replay_one(e, bodies[0], args.max_tokens)
            cold[e.name]["load"] = load_text()
            print(f"yesterday {e.name}: {cold[e.name]}", file=sys.stderr, flush=True)
        for i, body in enumerate(days):
            for e in (engines if i % 2 == 0 else engines[::-1]):
                r = await replay_one(e, body, args.max_tokens)
                r["load"] = load_text()
                res[e.name].append(r)
                print(f"next day, turn {i + 1} {e.name}: prompt {r['prompt']} ({r['cached']} cached, reusable "
                      f"{reusable[i]}), TTFT {r['ttft']:.2f} s, load {r['load']}", file=sys.stderr, flush=True)
    finally:
        for e in engines:
            await e.stop()
    names = list(res)
    print(f"\n## The next day: {len(days)} requests of {Path(args.replay).name} with the next day's date, "
          f"{Path(args.model).name}, threads {args.threads}, cache reuse {n}\n")
    print("yesterday (the session's first request, cold): " + "; ".join(
        f"{k} {v['prompt']} tokens, TTFT {v['ttft']:.2f} s (load {v['load']})" for k, v in cold.items()) + "\n")
    print("new tail: tokens after the common prefix with the previous request; reusable: prefix + what cache reuse "
          f"with chunks of {n} can move from the previous prompt (turn 1: from yesterday's)\n")
    print("| turn | prompt | new tail | reusable | " + " | ".join(f"{x} cached | {x} computed | {x} TTFT s"
                                                          for x in names) +
          (" | TTFT ratio" if len(names) == 2 else "") + " | load |")
    print("| ---: | ---: | ---: | ---: |" + " ---: | ---: | ---: |" * len(names) + (" ---: |" if len(names) == 2 else "")
          + " --- |")
    for i in range(len(days)):
        row = [f"{res[x][i]['cached']} | {res[x][i]['prompt'] - res[x][i]['cached']} | {res[x][i]['ttft']:.2f}"
               for x in names]
        ratio = f" | {res[names[0]][i]['ttft'] / res[names[1]][i]['ttft']:.2f}" if len(names) == 2 else ""
        prompts = "/".join(sorted({str(res[x][i]["prompt"]) for x in names}))
        print(f"| {i + 1} | {prompts} | {tails[i]} | {reusable[i]} | " + " | ".join(row) + ratio +
              f" | {res[names[0]][i]['load']} |")
    print(f"load at end: {load_text()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"tails": tails, "reusable": reusable, "cold": cold, **res}, indent=1))


async def replay(args) -> None:
    bodies = [json.loads(line)["body"] for line in open(args.replay)]
    bodies = [b for b in bodies if b.get("tools")]            # the agent's own loop (not titles, quota checks)
    if args.tools:                                            # a shorter prompt for a slow machine: the same
        keep = set(args.tools.split(","))                     # session with only these tools' schemas
        bodies = [dict(b, tools=[t for t in b["tools"] if t.get("name") in keep]) for b in bodies]
    if args.turns:
        bodies = bodies[:args.turns]
    if args.next_day:
        await replay_next_day(args, bodies)
        return
    describe_changes(bodies)
    engines = [strata(args.model, args.threads, args.ctx, tempfile.mkdtemp(prefix="strata-bench-replay-"))]
    if not (args.only_strata or args.tails):
        engines.append(llama_server(args.model, args.threads, args.ctx))
    res: dict = {e.name: [] for e in engines}
    try:
        for e in engines:
            await e.start()
            await e.complete("Hello", 4)
        toks = await rendered_tokens(engines[0], args.model, bodies)
        # the tail a perfect prompt cache computes: what follows the common token prefix with the request before
        tails = [len(toks[0])] + [len(toks[i]) - common_prefix(toks[i - 1], toks[i]) for i in range(1, len(toks))]
        for i in range(1, len(toks)):
            k = common_prefix(toks[i - 1], toks[i])
            print(f"request {i + 1}: {len(toks[i])} tokens, {k} shared with request {i}, new tail {tails[i]}; "
                  f"previous tokens after the shared prefix: {len(toks[i - 1]) - k}", file=sys.stderr)
        if args.tails:
            print(json.dumps({"prompt": [len(t) for t in toks], "tails": tails}))
            return
        for i, body in enumerate(bodies):
            for e in (engines if i % 2 == 0 else engines[::-1]):
                r = await replay_one(e, body, args.max_tokens)
                r["load"] = load_text()
                res[e.name].append(r)
                print(f"turn {i + 1} {e.name}: prompt {r['prompt']} ({r['cached']} cached, new tail {tails[i]}), "
                      f"TTFT {r['ttft']:.2f} s, load {r['load']}", file=sys.stderr, flush=True)
    finally:
        for e in engines:
            await e.stop()
    names = list(res)
    print(f"\n## Agent replay: {len(bodies)} requests of {Path(args.replay).name}, {Path(args.model).name}, "
          f"threads {args.threads}\n")
    print("new tail: tokens of the request after its longest common token prefix with the previous request (Strata's "
          "rendering); uncached: prompt - cached (the last prompt token is always computed again: tail + 1 is all "
          "but the changed tail)\n")
    print("| turn | prompt | new tail | " + " | ".join(f"{n} cached | {n} uncached | {n} TTFT s" for n in names) +
          (" | TTFT ratio" if len(names) == 2 else "") + " | load |")
    print("| ---: | ---: | ---: |" + " ---: | ---: | ---: |" * len(names) + (" ---: |" if len(names) == 2 else "")
          + " --- |")
    for i in range(len(bodies)):
        row = [f"{res[n][i]['cached']} | {res[n][i]['prompt'] - res[n][i]['cached']} | {res[n][i]['ttft']:.2f}"
               for n in names]
        ratio = f" | {res[names[0]][i]['ttft'] / res[names[1]][i]['ttft']:.2f}" if len(names) == 2 else ""
        prompts = "/".join(sorted({str(res[n][i]["prompt"]) for n in names}))
        print(f"| {i + 1} | {prompts} | {tails[i]} | " + " | ".join(row) + ratio + f" | {res[names[0]][i]['load']} |")
    for n in names:
        later = res[n][1:]
        print(f"\n{n}: turns 2-{len(bodies)} TTFT sum {sum(r['ttft'] for r in later):.2f} s; uncached prompt tokens "
              f"{sum(r['prompt'] - r['cached'] for r in later)} of {sum(r['prompt'] for r in later)} (new tails: "
              f"{sum(tails[1:])})")
    print(f"load at end: {load_text()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"tails": tails, **res}, indent=1))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", default=None, help="record a Claude Code session into this JSONL file")
    ap.add_argument("--agent", default="claude", choices=("claude", "opencode"), help="the agent --record drives")
    ap.add_argument("--replay", default=None, help="replay this JSONL file (bench/agent_proxy.py's or --record's)")
    ap.add_argument("--model", default=None, help="GGUF path")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--turns", type=int, default=0, help="replay only the first N requests")
    ap.add_argument("--tools", default="", help="keep only these tools' schemas (comma-separated), e.g. Bash,Read,Grep")
    ap.add_argument("--max-tokens", type=int, default=1, help="the reply's limit: with 1 (the default) the time to "
                    "the first token is the time to the whole reply for both engines; with more, a tool call's "
                    "first delta comes once its name is complete (both stream its arguments in pieces)")
    ap.add_argument("--only-strata", action="store_true")
    ap.add_argument("--tails", action="store_true", help="only render the requests (Strata's /apply-template) and "
                    "print each one's tokens and new tail, replaying nothing")
    ap.add_argument("--next-day", type=int, default=0, metavar="N", help="OpenCode's session again on the next "
                    "day, after yesterday's first request: Strata with cache_reuse N, llama-server with --cache-reuse N")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    if a.record:
        asyncio.run(record(Path(a.record)) if a.agent == "claude" else record_opencode(Path(a.record)))
    elif a.replay:
        if not a.model:
            sys.exit("--model is required with --replay")
        asyncio.run(replay(a))
    else:
        ap.print_help()

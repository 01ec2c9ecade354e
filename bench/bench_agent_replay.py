"""Agent replay: a real coding agent's session (system prompt, tool schemas, several turns of tool calls and
results) replayed against Strata and llama-server from the same llama.cpp, time to first token and cached prompt
tokens per turn.

    # 1. record: Claude Code against a scripted stand-in for Anthropic's API (no model needed: it answers each
    #    request with the next tool call of a short script, then a final text), every request kept as JSON lines
    .venv/bin/python bench/bench_agent_replay.py --record /tmp/claude-session.jsonl
    # 2. replay the recorded requests (those that carry the tools: the agent's main loop) against both engines
    .venv/bin/python bench/bench_agent_replay.py --replay /tmp/claude-session.jsonl --model PATH [--threads 1]

The recording also shows what the agent changes between requests at the start of its prompt (printed by
--replay: the first differing character of each request's system prompt against the previous one). Both servers
run with the same model, threads, one slot, --ctx tokens and their default prompt caching; requests go through
/v1/messages (Anthropic's API, which both serve) exactly as recorded, streamed, max_tokens capped to 16 so the
numbers are about the prompt. TTFT and `usage.cache_read_input_tokens` per turn; turn 1 is cold for both.
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

    async def other(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/messages", messages)
    app.router.add_route("*", "/{tail:.*}", other)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, log


async def record(path: Path) -> None:
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="agent-replay-"))
    (work / "project").mkdir()
    (work / "project" / "notes.txt").write_text("the harbor lantern\nthe orchard gate\nthe canyon bridge\n")
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


def system_text(body: dict) -> str:
    s = body.get("system")
    return s if isinstance(s, str) else "".join(b.get("text", "") for b in s or [])


def describe_changes(bodies: list[dict]) -> None:
    """Where each request's system prompt and tools first differ from the previous request's."""
    for i in range(1, len(bodies)):
        a, b = system_text(bodies[i - 1]), system_text(bodies[i])
        k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
        tools_same = json.dumps(bodies[i - 1].get("tools")) == json.dumps(bodies[i].get("tools"))
        where = "identical" if a == b else f"first difference at character {k} of {len(b)}: {b[max(0, k - 40):k + 40]!r}"
        print(f"request {i + 1} vs {i}: system prompt {where}; tools {'identical' if tools_same else 'DIFFER'}",
              file=sys.stderr)


async def replay_one(e: Engine, body: dict) -> dict:
    body = dict(body, model=e.model, stream=True, max_tokens=16, temperature=0.0)
    body.pop("thinking", None)
    body.pop("metadata", None)
    t0 = time.perf_counter()
    first, usage = None, {}
    assert e.session is not None
    async with e.session.post(e.url + "/v1/messages", json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"{e.name}: HTTP {r.status}: {(await r.text())[:400]}")
        async for raw in r.content:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            d = json.loads(line[6:])
            if d.get("type") == "message_start":
                usage.update(d["message"].get("usage") or {})
            elif d.get("type") == "message_delta":
                usage.update(d.get("usage") or {})
            elif d.get("type") == "content_block_delta" and first is None:
                first = time.perf_counter()
    t_end = time.perf_counter()
    cached = usage.get("cache_read_input_tokens") or 0
    return {"ttft": (first or t_end) - t0, "prompt": (usage.get("input_tokens") or 0) + cached, "cached": cached}


async def replay(args) -> None:
    bodies = [json.loads(line)["body"] for line in open(args.replay)]
    bodies = [b for b in bodies if b.get("tools")]            # the agent's own loop (not titles, quota checks)
    if args.tools:                                            # a shorter prompt for a slow machine: the same
        keep = set(args.tools.split(","))                     # session with only these tools' schemas
        bodies = [dict(b, tools=[t for t in b["tools"] if t.get("name") in keep]) for b in bodies]
    if args.turns:
        bodies = bodies[:args.turns]
    describe_changes(bodies)
    engines = [strata(args.model, args.threads, args.ctx, tempfile.mkdtemp(prefix="strata-bench-replay-"))]
    if not args.only_strata:
        engines.append(llama_server(args.model, args.threads, args.ctx))
    res: dict = {e.name: [] for e in engines}
    try:
        for e in engines:
            await e.start()
            await e.complete("Hello", 4)
        for i, body in enumerate(bodies):
            for e in (engines if i % 2 == 0 else engines[::-1]):
                r = await replay_one(e, body)
                r["load"] = load_text()
                res[e.name].append(r)
                print(f"turn {i + 1} {e.name}: prompt {r['prompt']} ({r['cached']} cached), TTFT {r['ttft']:.2f} s, "
                      f"load {r['load']}", file=sys.stderr, flush=True)
    finally:
        for e in engines:
            await e.stop()
    names = list(res)
    print(f"\n## Agent replay: {len(bodies)} requests of {Path(args.replay).name}, {Path(args.model).name}, "
          f"threads {args.threads}\n")
    print("| turn | " + " | ".join(f"{n} prompt / cached | {n} TTFT s" for n in names) +
          (" | TTFT ratio |" if len(names) == 2 else " |"))
    print("| ---: |" + " ---: | ---: |" * len(names) + (" ---: |" if len(names) == 2 else ""))
    for i in range(len(bodies)):
        row = [f"{res[n][i]['prompt']} / {res[n][i]['cached']} | {res[n][i]['ttft']:.2f}" for n in names]
        ratio = f" | {res[names[0]][i]['ttft'] / res[names[1]][i]['ttft']:.2f}" if len(names) == 2 else ""
        print(f"| {i + 1} | " + " | ".join(row) + ratio + " |")
    for n in names:
        later = res[n][1:]
        print(f"\n{n}: turns 2-{len(bodies)} TTFT sum {sum(r['ttft'] for r in later):.2f} s; uncached prompt tokens "
              f"{sum(r['prompt'] - r['cached'] for r in later)} of {sum(r['prompt'] for r in later)}")
    print(f"load at end: {load_text()}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", default=None, help="record a Claude Code session into this JSONL file")
    ap.add_argument("--replay", default=None, help="replay this JSONL file (bench/agent_proxy.py's or --record's)")
    ap.add_argument("--model", default=None, help="GGUF path")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--turns", type=int, default=0, help="replay only the first N requests")
    ap.add_argument("--tools", default="", help="keep only these tools' schemas (comma-separated), e.g. Bash,Read,Grep")
    ap.add_argument("--only-strata", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    if a.record:
        asyncio.run(record(Path(a.record)))
    elif a.replay:
        if not a.model:
            sys.exit("--model is required with --replay")
        asyncio.run(replay(a))
    else:
        ap.print_help()

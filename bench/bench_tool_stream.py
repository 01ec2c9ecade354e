"""When a streamed tool call reaches the client: Strata's service against llama-server, same model, same threads,
through /v1/chat/completions.

    bench/build_llama_server.sh          # once: llama-server from llama-cpp-python's vendored llama.cpp
    python bench/bench_tool_stream.py --model ~/.cache/strata-test-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf

The request asks for one call of `write_file` whose `content` is a short poem, so the call is many tokens long.
For each reply: the time to its first chunk with anything in it (a call's head, or text), to its last chunk (for a
call: the call complete, the first byte a client got when calls were sent only once complete), whether it was a
call, and the number of arguments pieces. The ratio that matters for an agent is Strata / llama-server of the
time to the first chunk. Qwen2.5-Coder-0.5B writes its call in a ```json fence: Strata reads that as a call (its
fallback for small models), llama-server's Hermes parser reads only `<tool_call>` and streams it as text, so
there the two replies differ in kind and only the first-chunk times compare. Engines alternate which goes first
each rep; the load is printed with the results (a busy machine stretches every time here).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_long_context import SERVER, Engine, llama_server, load_text, strata  # noqa: E402

WRITE_FILE = {"type": "function", "function": {
    "name": "write_file", "description": "Write a text file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                   "required": ["path", "content"]}}}
ASK = "Create the file sea.txt containing a four-line poem about the sea. Use the tool."


TOOL_CHOICE = "required"


async def one_call(e: Engine, max_tokens: int, check: bool = True) -> dict:
    """-> the time to the reply's first chunk with anything in it (a call's head, or text), to the call's first
    arguments piece and to its last one (the call complete), the pieces, and whether the reply was a call."""
    body = {"model": e.model, "messages": [{"role": "user", "content": ASK}], "tools": [WRITE_FILE],
            "tool_choice": TOOL_CHOICE, "max_tokens": max_tokens, "temperature": 0.0, "stream": True}
    t0 = time.perf_counter()
    first = head = first_args = last = None
    pieces, args, text = 0, "", ""
    assert e.session is not None
    async with e.session.post(e.url + "/v1/chat/completions", json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"{e.name}: HTTP {r.status}: {(await r.text())[:500]}")
        async for raw in r.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for ch in json.loads(line[6:]).get("choices") or []:
                now = time.perf_counter() - t0
                piece = (ch.get("delta") or {}).get("content") or ""
                if piece:
                    text += piece
                    first = first if first is not None else now
                    last = now
                for tc in (ch.get("delta") or {}).get("tool_calls") or ():
                    first = first if first is not None else now
                    head = head if head is not None else now
                    piece = (tc.get("function") or {}).get("arguments") or ""
                    if piece:
                        first_args = first_args if first_args is not None else now
                        last, pieces, args = now, pieces + 1, args + piece
    if check and head is not None:
        json.loads(args)                      # the pieces add up to the arguments' JSON
    done = last if last is not None else time.perf_counter() - t0
    return {"first": first if first is not None else done, "call": head is not None, "first_args": first_args,
            "complete": done, "pieces": pieces, "chars": len(args) if head is not None else len(text)}


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} s ({min(xs):.2f}-{max(xs):.2f})"


async def main(args) -> None:
    if not SERVER.exists():
        sys.exit(f"{SERVER} is missing: run bench/build_llama_server.sh first")
    print(f"load at start: {load_text()}", file=sys.stderr)
    engines = [strata(args.model, args.threads, args.ctx, tempfile.mkdtemp(prefix="strata-bench-tools-")),
               llama_server(args.model, args.threads, args.ctx)]
    runs: dict[str, list[dict]] = {e.name: [] for e in engines}
    try:
        for e in engines:
            await e.start()
            await one_call(e, 8, check=False)     # load, warm up
        for rep in range(args.reps):
            for e in (engines if rep % 2 == 0 else engines[::-1]):
                r = await one_call(e, args.max_tokens)
                runs[e.name].append(r)
                what = (f"a call: first arguments {r['first_args']:.2f} s, {r['pieces']} pieces, {r['chars']} chars"
                        if r["call"] else f"text, no call ({r['chars']} chars)")
                print(f"rep {rep + 1} {e.name}: first chunk {r['first']:.2f} s, last {r['complete']:.2f} s, {what}; "
                      f"load {load_text()}", file=sys.stderr, flush=True)
    finally:
        for e in engines:
            await e.stop()
    print("\n| engine | replies that were a call | to the first chunk | to the last chunk | argument pieces |")
    print("| --- | --- | --- | --- | --- |")
    for name, rs in runs.items():
        print(f"| {name} | {sum(r['call'] for r in rs)}/{len(rs)} | {spread([r['first'] for r in rs])} | "
              f"{spread([r['complete'] for r in rs])} | {statistics.median([r['pieces'] for r in rs]):.0f} |")
    s, ls = runs[engines[0].name], runs[engines[1].name]
    ratios = [a["first"] / b["first"] for a, b in zip(s, ls)]
    print(f"\nStrata / llama-server, time to the reply's first chunk: median {statistics.median(ratios):.2f} "
          f"(per rep {', '.join(f'{x:.2f}' for x in ratios)}); load at end {load_text()}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="GGUF path (e.g. Qwen2.5-Coder-0.5B-Instruct)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--tool-choice", default="required", help="required (default) or auto")
    a = ap.parse_args()
    TOOL_CHOICE = a.tool_choice
    asyncio.run(main(a))

"""When a streamed tool call reaches the client: Strata's service against llama-server, same model, same threads,
through /v1/chat/completions.

    bench/build_llama_server.sh          # once: llama-server from llama-cpp-python's vendored llama.cpp
    python bench/bench_tool_stream.py --model ~/.cache/strata-test-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf

The request asks for one call of `write_file` (tool_choice required: both engines constrain it with a grammar)
whose `content` is a short program, so the call is many tokens long. For each reply: the time to the call's
first chunk (its id and name), to its first arguments piece, and to the call's last piece (the call complete: the
first byte a client got when calls were sent only once complete), and the number of arguments pieces. Both engines
stream the arguments in pieces; the ratio that matters for an agent is Strata / llama-server of the time to the
first call chunk. Engines alternate which goes first each rep; the load is printed with the results (a busy
machine stretches every time here).
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
ASK = ("Write a Python script fizzbuzz.py that prints FizzBuzz for 1 to 30, with a main() function and a "
       "docstring, using the write_file tool.")


async def one_call(e: Engine, max_tokens: int, check: bool = True) -> dict:
    body = {"model": e.model, "messages": [{"role": "user", "content": ASK}], "tools": [WRITE_FILE],
            "tool_choice": "required", "max_tokens": max_tokens, "temperature": 0.0, "stream": True}
    t0 = time.perf_counter()
    head = first_args = last = None
    pieces, args = 0, ""
    assert e.session is not None
    async with e.session.post(e.url + "/v1/chat/completions", json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"{e.name}: HTTP {r.status}: {(await r.text())[:500]}")
        async for raw in r.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for ch in json.loads(line[6:]).get("choices") or []:
                for tc in (ch.get("delta") or {}).get("tool_calls") or ():
                    now = time.perf_counter() - t0
                    head = head if head is not None else now
                    piece = (tc.get("function") or {}).get("arguments") or ""
                    if piece:
                        first_args = first_args if first_args is not None else now
                        last, pieces, args = now, pieces + 1, args + piece
    if check:
        json.loads(args)                      # the pieces add up to the arguments' JSON
    return {"head": head, "first_args": first_args, "complete": last, "pieces": pieces, "chars": len(args)}


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
                print(f"rep {rep + 1} {e.name}: head {r['head']:.2f} s, first arguments {r['first_args']:.2f} s, "
                      f"complete {r['complete']:.2f} s, {r['pieces']} pieces, {r['chars']} chars, "
                      f"load {load_text()}", file=sys.stderr, flush=True)
    finally:
        for e in engines:
            await e.stop()
    print(f"\n| engine | to the call's first chunk | to its first arguments piece | to the call complete | pieces |")
    print("| --- | --- | --- | --- | --- |")
    for name, rs in runs.items():
        print(f"| {name} | {spread([r['head'] for r in rs])} | {spread([r['first_args'] for r in rs])} | "
              f"{spread([r['complete'] for r in rs])} | {statistics.median([r['pieces'] for r in rs]):.0f} |")
    s, ls = runs[engines[0].name], runs[engines[1].name]
    ratios = [a["head"] / b["head"] for a, b in zip(s, ls)]
    print(f"\nStrata / llama-server, time to the call's first chunk: median {statistics.median(ratios):.2f} "
          f"(per rep {', '.join(f'{x:.2f}' for x in ratios)}); load at end {load_text()}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="GGUF path (e.g. Qwen2.5-Coder-0.5B-Instruct)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=200)
    asyncio.run(main(ap.parse_args()))

"""Two coding agents sharing one model: do their sessions keep their cached prefixes when their requests interleave?

    .venv/bin/python bench/bench_agents_interleaved.py [--parallel 1,2,4] [--extra-side]

Replays two recorded sessions turn by turn, alternating A1 B1 A2 B2 ...: Claude Code's 8-request session
(tests/support/fixtures/agents/claude-code/session-8-requests.jsonl, Anthropic Messages) and OpenCode's run (its
title request, then three build turns: tests/support/fixtures/agents/opencode/, OpenAI chat), both under one model
name on the Qwen fixture's tokenizer twin (tests/support/agent_replay.write_tokenizer_twin: the same prompts'
tokens, random weights, so a prompt costs a thousandth of Qwen's and the cache behaves as Qwen's would), through
`strata serve` with STRATA_NUM_PARALLEL slots. Each request is non-streamed with a 4-token reply; its reply's usage
says how many prompt tokens came from the cache (Anthropic `cache_read_input_tokens`, OpenAI
`prompt_tokens_details.cached_tokens`). For each request it prints the prompt tokens, those cached, and those
computed, and the total computed per session beside what the session alone computes (the same requests without
the other's in between). `--extra-side` adds a one-off side request (a short unrelated prompt, as a title or a
cheaper tier's call) between the turns too.

Not a test: a measurement (the runner's cache decides; this only reports)."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402

MODEL = "coder:0.5b"


def usage(path: str, answer: dict) -> tuple[int, int]:
    u = answer["usage"]
    if path.startswith("/v1/messages"):
        cached = u.get("cache_read_input_tokens") or 0
        return u["input_tokens"] + cached + (u.get("cache_creation_input_tokens") or 0), cached
    return u["prompt_tokens"], (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0


def replay(url: str, steps: list[tuple[str, str, dict]]) -> dict[str, list[tuple[int, int]]]:
    seen: dict[str, list[tuple[int, int]]] = {}
    with httpx.Client(base_url=url, timeout=1800) as c:
        for name, path, body in steps:
            r = c.post(path, json=body)
            r.raise_for_status()
            seen.setdefault(name, []).append(usage(path, r.json()))
    return seen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parallel", default="1,2", help="STRATA_NUM_PARALLEL values to measure")
    ap.add_argument("--extra-side", action="store_true")
    args = ap.parse_args()
    import model_cache
    from agent_replay import claude_session, opencode_session, side_request, write_tokenizer_twin
    from agents_e2e import start_service, stop

    qwen = model_cache.cached(model_cache.QWEN_CODER.name)
    if qwen is None:
        raise SystemExit("the Qwen2.5-Coder-0.5B fixture is missing: run `make test-models`")
    work = Path(tempfile.mkdtemp(prefix="interleaved-"))
    twin = write_tokenizer_twin(qwen, work / "twin.gguf")
    a, b = claude_session(MODEL), opencode_session(MODEL)
    print(f"load {open('/proc/loadavg').read().strip()}")
    for slots in [int(x) for x in args.parallel.split(",")]:
        results = {}
        for label in ("A alone", "B alone", "interleaved"):
            proc, url, _ = start_service(work / f"home-{slots}-{label[0]}", twin, work / "serve.log", slots)
            try:
                if label == "A alone":
                    steps = [("A", p, x) for p, x in a]
                elif label == "B alone":
                    steps = [("B", p, x) for p, x in b]
                else:
                    steps = []
                    for i in range(max(len(a), len(b))):
                        if i < len(a):
                            steps.append(("A", *a[i]))
                        if i < len(b):
                            steps.append(("B", *b[i]))
                        if args.extra_side:
                            steps.append(("side", *side_request(MODEL)))
                results[label] = replay(url, steps)
            finally:
                stop(proc)
        print(f"\n== STRATA_NUM_PARALLEL={slots}")
        for name, alone in (("A", "A alone"), ("B", "B alone")):
            inter = results["interleaved"][name]
            solo = results[alone][name]
            print(f"session {name} ({'Claude Code' if name == 'A' else 'OpenCode'}): prompt/cached per request")
            print("  alone:       " + "  ".join(f"{p}/{c}" for p, c in solo))
            print("  interleaved: " + "  ".join(f"{p}/{c}" for p, c in inter))
            print(f"  computed: alone {sum(p - c for p, c in solo):,}, interleaved {sum(p - c for p, c in inter):,}")
    print(f"load {open('/proc/loadavg').read().strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

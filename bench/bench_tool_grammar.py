"""What turning an agent's tools into a grammar costs before the first token: Claude Code's 24 tools (64 KB of
schemas) as its requests carry them, through the runner's own steps, on Qwen2.5-Coder-0.5B's vocabulary.

Steps timed (milliseconds, median and spread over interleaved repetitions):
- convert:   tool_grammar.for_plan: JSON schemas -> GBNF (the Python converter; the `auto` plan, the Hermes
             family), as admission calls it for each request;
- parse:     llama_sampler_init_grammar on that GBNF (llama.cpp's parser), which admission does once to check the
             lazy grammar and again when the reply opens a call;
- admission: the whole grammar part of admission (Admission.grammar + the SeqSampler it builds), first request
             and repeated requests with the same tools (what a cache per tool set saves).

    python bench/bench_tool_grammar.py [--requests FILE.jsonl|FILE.json] [--reps 7]

FILE: a JSONL of requests recorded by bench/agent_proxy.py (the first with `tools` is used), or a request body.
The default is the Claude Code request recorded under tests/support/fixtures/agents/. Prints the load
(/proc/loadavg) with the numbers: this machine is shared.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]

from llama_cpp import llama_cpp as L  # noqa: E402

from app.engine import protocol as P  # noqa: E402
from app.engine.chat.plan import plan_chat  # noqa: E402
from app.engine.runner.output.text import Vocab  # noqa: E402
from app.engine.runner.prompt.admission import Admission  # noqa: E402
from app.engine.runner.sampling import constrained, tool_grammar  # noqa: E402
from app.engine.runner.sampling.chain import free_grammar, grammar_sampler  # noqa: E402
from app.engine.runner.sampling.constrained import SeqSampler  # noqa: E402
from model_cache import QWEN_CODER, cached  # noqa: E402

FIXTURES = ROOT / "tests" / "support" / "fixtures" / "agents"


def hf_tools(body: dict) -> list[dict]:
    """The request's tools in the Hugging Face shape the runner takes (Anthropic's input_schema, OpenAI's
    function, Responses' flat function)."""
    out = []
    for t in body.get("tools") or []:
        if "input_schema" in t:
            out.append({"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                         "parameters": t["input_schema"]}})
        elif "function" in t:
            out.append(t)
        elif t.get("type") == "function":
            out.append({"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")
                                                         if k in t}})
    return out


def load_tools(path: Path | None) -> tuple[list[dict], str]:
    candidates = [path] if path else sorted(FIXTURES.glob("claude-code/*.json*"))
    for p in candidates:
        text = p.read_text()
        bodies = ([json.loads(line).get("body") or {} for line in text.splitlines() if line.strip()]
                  if p.suffix == ".jsonl" else [json.loads(text)])
        for b in bodies:
            b = b.get("body", b) if isinstance(b, dict) else {}
            if b.get("tools"):
                return hf_tools(b), str(p)
    raise SystemExit("no recorded request with tools: record one with bench/agent_proxy.py and pass --requests")


def ms(f) -> tuple[float, float]:
    """(wall, this thread's CPU) milliseconds: on a machine this busy the CPU time is the cost, the wall time
    what a request waited."""
    t0, c0 = time.perf_counter(), time.thread_time()
    f()
    return (time.perf_counter() - t0) * 1000, (time.thread_time() - c0) * 1000


def summary(xs: list[tuple[float, float]]) -> str:
    wall, cpu = [x[0] for x in xs], [x[1] for x in xs]
    return (f"wall {statistics.median(wall):7.2f} ms [{min(wall):.2f}-{max(wall):.2f}]   "
            f"cpu {statistics.median(cpu):7.2f} ms [{min(cpu):.2f}-{max(cpu):.2f}]")


def clear_caches() -> None:
    """Forget the grammars built and parsed (runner/sampling/tool_grammar.py, constrained.py): a first request's cost."""
    tool_grammar.clear_cache()
    constrained._parsed.clear()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=Path)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    tools, source = load_tools(a.requests)
    size = len(json.dumps([t["function"].get("parameters") for t in tools]))
    print(f"tools: {len(tools)} from {source}; {len(json.dumps(tools))} bytes with descriptions, {size} bytes of "
          f"schemas")
    path = cached(QWEN_CODER.name)
    if path is None:
        raise SystemExit("the Qwen2.5-Coder fixture is not in the cache (make test-models)")
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.vocab_only = True
    model = L.llama_model_load_from_file(str(path).encode(), mp)
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    vocab_out = Vocab(vocab, n_vocab)
    plan = plan_chat("hermes", tools, None, True)
    adm = Admission(model, 32768, vocab_out)
    req = P.GenerateRequest(id="bench", messages=[{"role": "user", "content": "hi"}], tools=tools, plan=plan)

    g = tool_grammar.for_plan(tools, plan)
    gbnf = g.triggered("marker", "") if isinstance(g, tool_grammar.ToolGrammar) else g
    print(f"grammar: {len(gbnf)} characters, {gbnf.count('::=')} rules")
    runs: dict[str, list[tuple[float, float]]] = {"convert": [], "parse": [], "admission (first)": [], "admission (again)": []}
    for _ in range(a.reps):
        clear_caches()
        runs["convert"].append(ms(lambda: tool_grammar.for_plan(tools, plan)))
        runs["parse"].append(ms(lambda: free_grammar(grammar_sampler(vocab, gbnf))))
        clear_caches()

        def admit() -> None:
            grammar, label = adm.grammar(req)
            SeqSampler(None, vocab, n_vocab, grammar, label, vocab_out.piece).free()
        runs["admission (first)"].append(ms(admit))
        runs["admission (again)"].append(ms(admit))
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"load average {' '.join(load)} (2 cores, shared: not quiet); {a.reps} interleaved repetitions")
    for k, xs in runs.items():
        print(f"  {k:20s} {summary(xs)}")
    L.llama_model_free(model)


if __name__ == "__main__":
    main()

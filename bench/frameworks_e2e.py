"""Agent frameworks end to end on Strata: their own published examples, unmodified but for the model's name and the
server's address, on Qwen2.5-Coder-0.5B-Instruct at temperature 0 (a Modelfile parameter of the imported model,
so no example is changed to ask for it).

    make frameworks-e2e          # or: .venv/bin/python bench/frameworks_e2e.py [--only smol,loop_openai,...]
        [--model-file GGUF] [--out DIR] [--timeout 900] [--repeat-penalty 1.1]

Not part of the test suite (each loop sends up to 20 requests; on 2 shared CPU cores a run takes minutes; the
suite replays what these send: tests/integration/service/test_agent_frameworks.py). What runs, each example from
bench/frameworks/:
- smol: smolagents' examples/agent_from_any_llm.py, ToolCallingAgent with LiteLLMModel("ollama_chat/..."),
  Ollama's /api/chat (smolagents and litellm from the test extras of pyproject.toml);
- loop_openai: the AI SDK's ToolLoopAgent weather example (two tools) through @ai-sdk/openai-compatible, /v1;
- ollama_required: the same agent through ollama-ai-provider-v2 (/api/chat) with `prepareStep` returning
  `toolChoice: 'required'` on step 0 (the AI SDK's loop-control docs);
- ollama_generate: ollama-ai-provider-v2's README tool example, generateText with `stopWhen: stepCountIs(5)`.
The AI SDK packages are installed from npm at bench/frameworks/package.json's pinned versions into
~/.cache/strata-frameworks (once). `strata serve` runs in a fresh STRATA_HOME; a recording proxy
(tests/support/recording_proxy.py) sits between the examples and it, its captures in OUT/capture/.

Per example it prints the tools called, whether a tool's result went back, the final text, and a verdict: green
when a tool ran and the run ended with the model's own answer (a non-empty final text, or smolagents'
final_answer) and no step's text carries a call's JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "support"))

from agents_e2e import free_port, python, stop  # noqa: E402

HERE = ROOT / "bench" / "frameworks"
CACHE = Path(os.environ.get("STRATA_FRAMEWORKS_CACHE", Path.home() / ".cache" / "strata-frameworks"))
MODEL = "qwen2.5-coder:0.5b"
EXAMPLES = ("smol", "loop_openai", "ollama_required", "ollama_generate")
# the imported model's Modelfile: temperature 0 and a repeat penalty of 1.1, what these examples ran under before
# the default became 1.0 (off), as Ollama's remedy for a model that wants a penalty: a per-model parameter (Qwen
# recommends one for Qwen2.5, 1.05 per ollama/ollama 6a261db7d; the GGUF carries no general.sampling.*). At 1.0
# (--repeat-penalty 1.0) smolagents' first step was get_weather and final_answer in one reply, which smolagents
# refuses, and its second a final_answer the model made up ("sunny with a high humidity of 75%") without the tool;
# the runaway calls it wrote at 1.0 end at the first repeated call now (call_repeats.py)
PARAMETERS = {"temperature": 0, "repeat_penalty": 1.1}


def npm_ready() -> Path:
    """The AI SDK examples beside their pinned node_modules in CACHE (npm install when package.json changed)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    want = (HERE / "package.json").read_text()
    if not (CACHE / "node_modules").is_dir() or (CACHE / "package.json").read_text() != want:
        (CACHE / "package.json").write_text(want)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=CACHE, check=True)
    for f in HERE.glob("*.mjs"):
        shutil.copy(f, CACHE / f.name)
    return CACHE


def start_service(home: Path, model_file: Path, log_path: Path, parameters: dict = PARAMETERS) \
        -> tuple[subprocess.Popen, str]:
    """`strata serve` in `home`, the model imported as MODEL with `parameters` (temperature 0) and loaded."""
    import urllib.request
    port = free_port()
    env = {**os.environ, "STRATA_HOME": str(home), "STRATA_HOST": f"127.0.0.1:{port}", "STRATA_EXTERNAL_MODELS": "0"}
    proc = subprocess.Popen([python(), "-m", "app", "serve"], env=env, stdout=open(log_path, "w"),
                            stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 180
    while True:
        if proc.poll() is not None or time.monotonic() > end:
            raise SystemExit(f"strata serve did not start: see {log_path}")
        try:
            urllib.request.urlopen(url + "/api/version", timeout=2).close()
            break
        except OSError:
            time.sleep(0.3)
    for path, body in (("/api/create", {"model": MODEL, "from": str(model_file), "parameters": parameters,
                                        "stream": False}),
                       ("/api/generate", {"model": MODEL, "stream": False})):
        req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
        urllib.request.urlopen(req, timeout=600).read()
    return proc, url


def verdict(name: str, out: str) -> dict:
    lines = [ln for ln in out.strip().splitlines() if ln.startswith("{")]
    if not lines:
        return {"green": False, "why": "no result line (the example failed: see its log)"}
    r = json.loads(lines[-1])
    calls = [c for s in r["steps"] for c in s["calls"]]
    leaked = [s["text"] for s in r["steps"] if '"name"' in (s.get("text") or "")]
    if name == "smol":
        used = [c[0] for c in calls]
        green = "get_weather" in used and used[-1:] == ["final_answer"] and bool(r["text"].strip())
        return {"green": green, "calls": used, "text": r["text"],
                "errors": [s["error"][:80] for s in r["steps"] if s.get("error")]}
    ran = any(s["results"] for s in r["steps"])
    last = r["steps"][-1] if r["steps"] else {}
    green = ran and bool(r["text"].strip()) and last.get("finish") == "stop" and not leaked
    return {"green": green, "calls": [c[0] for c in calls], "steps": len(r["steps"]), "text": r["text"],
            "last_finish": last.get("finish"), "leaked_call_text": leaked[:2]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(EXAMPLES))
    ap.add_argument("--model-file", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--repeat-penalty", type=float, default=PARAMETERS["repeat_penalty"],
                    help="the imported model's PARAMETER repeat_penalty (1.0: the server's default, off)")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n]
    model_file = args.model_file
    if model_file is None:
        import model_cache
        model_file = model_cache.cached(model_cache.QWEN_CODER.name)
        if model_file is None:
            raise SystemExit("the Qwen fixture is missing: make test-models")
    out = args.out or Path(tempfile.mkdtemp(prefix="strata-frameworks-"))
    out.mkdir(parents=True, exist_ok=True)
    node_dir = npm_ready() if any(n != "smol" for n in names) else None
    home = out / "home"
    proc, url = start_service(home, model_file, out / "serve.log",
                              {**PARAMETERS, "repeat_penalty": args.repeat_penalty})
    port = free_port()
    proxy = subprocess.Popen([python(), str(ROOT / "tests" / "support" / "recording_proxy.py"), "--listen",
                              f"127.0.0.1:{port}", "--upstream", url, "--out", str(out / "capture")],
                             stdout=open(out / "proxy.log", "w"), stderr=subprocess.STDOUT)
    time.sleep(1.0)
    results = {}
    try:
        for name in names:
            env = {**os.environ, "MODEL": MODEL, "BASE": f"http://127.0.0.1:{port}",
                   "LITELLM_LOCAL_MODEL_COST_MAP": "True"}       # litellm reads its bundled model list, offline
            cmd = [python(), str(HERE / "smol_weather.py")] if name == "smol" else ["node", f"{name}.mjs"]
            t0 = time.monotonic()
            print(f"== {name}", flush=True)
            try:
                r = subprocess.run(cmd, cwd=node_dir or HERE, env=env, capture_output=True, text=True,
                                   timeout=args.timeout)
                text = r.stdout + r.stderr
            except subprocess.TimeoutExpired as e:
                text = f"timed out after {args.timeout:.0f} s\n" + str(e.stdout or "")
            (out / f"{name}.log").write_text(text)
            v = verdict(name, text)
            v["seconds"] = round(time.monotonic() - t0, 1)
            results[name] = v
            print(json.dumps(v, ensure_ascii=False), flush=True)
    finally:
        proxy.terminate()
        stop(proc)
    print(f"\n| example | green | tools called | final text | s |\n| --- | --- | --- | --- | --- |")
    for name, v in results.items():
        print(f"| {name} | {'yes' if v['green'] else 'no'} | {', '.join(v.get('calls', []))[:80]} | "
              f"{json.dumps(v.get('text', ''))[:60]} | {v['seconds']} |")
    print(f"\ncaptures, logs: {out}")


if __name__ == "__main__":
    main()

"""What the agents' replay tests share (tests/integration/service/test_agent_replay_claude.py, test_codex_replay.py,
test_agent_requests_opencode.py): a live server with the Qwen2.5-Coder fixture imported under the agent's model
name, a tiny random-weight twin of a model for replays whose assertions are about the prompt (its cache) and not
the reply, an SSE body cut into its events' lines, which each test then checks against its own wire's rules, and
two recorded agent sessions (Claude Code's, OpenCode's) as requests to replay in turn with a side request between
(test_agents_interleaved.py and bench/bench_agents_interleaved.py)."""
from __future__ import annotations

import json
from pathlib import Path

import httpx

from gguf_factory import write_dense_llama
from gguf_writer import tokenizer_of
from repo_paths import FIXTURES


def serve_model(live_service, gguf, name: str, **fields):
    """A live service (`live_service` fixture; ServiceConfig `fields`) with `gguf` imported as `name`."""
    svc = live_service(**fields)
    with httpx.Client(base_url=svc.url, timeout=300) as c:
        r = c.post("/api/create", json={"model": name, "from": str(gguf), "stream": False})
        assert r.status_code == 200, r.text
    return svc


def write_tokenizer_twin(gguf, path, n_ctx: int = 32768) -> Path:
    """A 2-layer dense model with random weights that carries every tokenizer key of `gguf`: its vocabulary,
    merges, special tokens and chat template. A request renders and tokenizes exactly as on `gguf` (so what the
    prompt cache reuses is the same), while its prompt costs a thousandth of the compute; its replies are noise."""
    with tokenizer_of(gguf):
        return write_dense_llama(path, n_layer=2, n_embd=64, n_ctx=n_ctx, tie_output=True, seed=41)


def sse_blocks(text: str, comments: bool = True) -> list[list[tuple[str, str]]]:
    """An SSE body -> its events, each the (field, value) of its lines in order (one space after the colon
    dropped, as the SSE spec reads it); a comment line (a keepalive) is ("", text), or left out with
    `comments=False`. Blank events are left out."""
    blocks = []
    for chunk in text.replace("\r\n", "\n").split("\n\n"):
        lines = []
        for line in chunk.split("\n"):
            field, _, value = line.partition(":")
            if line and (field or comments):
                lines.append((field, value[1:] if value.startswith(" ") else value))
        if lines:
            blocks.append(lines)
    return blocks


def _replayed(body: dict, model: str) -> dict:
    """A recorded request as replayed: for `model`, 4 tokens of reply, whole, greedy (what is checked is the prompt)."""
    return dict(body, model=model, max_tokens=4, stream=False, temperature=0)


def claude_session(model: str) -> list[tuple[str, dict]]:
    """Claude Code's recorded 8-request session: (path, body) each."""
    lines = (FIXTURES / "agents" / "claude-code" / "session-8-requests.jsonl").read_text(encoding="utf-8")
    return [("/v1/messages", _replayed({k: v for k, v in json.loads(line).items() if k != "thinking"}, model))
            for line in lines.splitlines()]


def opencode_session(model: str) -> list[tuple[str, dict]]:
    """OpenCode's recorded requests, in order: (path, body) each."""
    out = []
    for p in sorted((FIXTURES / "agents" / "opencode").glob("*.json")):
        body = json.loads(p.read_text(encoding="utf-8"))["body"]
        out.append(("/v1/chat/completions", _replayed({k: v for k, v in body.items() if k != "stream_options"}, model)))
    return out


def side_request(model: str) -> tuple[str, dict]:
    """A side request an agent sends between turns (a title), on another prompt."""
    return "/v1/chat/completions", _replayed(
        {"messages": [{"role": "user", "content": "Give this conversation a title: hi"}]}, model)

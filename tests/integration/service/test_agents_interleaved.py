"""Two coding agents sharing one model, one slot: each session keeps its cached prefix while the other's requests
and a side request (a title prompt, as agents send beside their main turns) come in between.

Claude Code's recorded 8-request session (Anthropic Messages) and OpenCode's recorded run (its title request and
three build turns, OpenAI chat) are replayed turn by turn, alternating, with the side request after every pair, on
the Qwen fixture's tokenizer twin (prompts render and tokenize as on Qwen; the replies are noise and are not
read). What each request computed (its prompt tokens less those its reply's usage says came from the cache) is
compared with what the same session computes alone on a fresh server: a neighbour never costs a session a token.
bench/bench_agents_interleaved.py measures the same with more slot counts."""
from __future__ import annotations

import httpx
import pytest

from agent_replay import claude_session, opencode_session, side_request, write_tokenizer_twin

pytestmark = pytest.mark.timeout(900)

MODEL = "coder:0.5b"


def computed(path: str, answer: dict) -> tuple[int, int]:
    """(prompt tokens, of them computed) from a reply's usage."""
    u = answer["usage"]
    if path.startswith("/v1/messages"):
        cached = u.get("cache_read_input_tokens") or 0
        return u["input_tokens"] + cached, u["input_tokens"]
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return u["prompt_tokens"], u["prompt_tokens"] - cached


@pytest.fixture(scope="module")
def twin(qwen_coder_path, tmp_path_factory):
    return write_tokenizer_twin(qwen_coder_path, tmp_path_factory.mktemp("twin") / "coder-twin.gguf")


def replay(live_service, twin, steps) -> dict[str, list[tuple[int, int]]]:
    """`steps` ((session, path, body), ...) in order on a fresh server with one slot."""
    seen: dict[str, list[tuple[int, int]]] = {}
    with live_service.running(num_ctx=32768, num_parallel=1, keep_alive="10m", max_body=8 * 1024 * 1024) as svc:
        with httpx.Client(base_url=svc.url, timeout=600) as c:
            r = c.post("/api/create", json={"model": MODEL, "from": str(twin), "stream": False})
            assert r.status_code == 200, r.text
            for name, path, body in steps:
                r = c.post(path, json=body)
                assert r.status_code == 200, (name, r.text[:500])
                seen.setdefault(name, []).append(computed(path, r.json()))
    return seen


def test_two_interleaved_sessions_each_compute_only_what_they_compute_alone(live_service, twin):
    a, b = claude_session(MODEL), opencode_session(MODEL)
    assert len(a) == 8 and len(b) == 4
    steps = []
    for i in range(max(len(a), len(b))):
        steps += [("claude", *a[i])] if i < len(a) else []
        steps += [("opencode", *b[i])] if i < len(b) else []
        steps.append(("side", *side_request(MODEL)))
    together = replay(live_service, twin, steps)
    alone = {**replay(live_service, twin, [("claude", p, x) for p, x in a]),
             **replay(live_service, twin, [("opencode", p, x) for p, x in b])}
    for name in ("claude", "opencode"):
        assert [p for p, _ in together[name]] == [p for p, _ in alone[name]], name      # the same prompts
        for i, ((_, mixed), (_, solo)) in enumerate(zip(together[name], alone[name])):
            # a prefix shared across sessions (the template's opening) may be found cached: never more computed
            assert mixed <= solo, (name, i + 1, together[name], alone[name])
    # Claude Code's session appends a call and its result each turn: after its first request only that new tail
    # is computed (the previous prompt is reused whole), the other session and the side request in between or not
    assert all(0 < new < 200 for _, new in together["claude"][1:]), together["claude"]
    # OpenCode's build turns after its first: most of each prompt came from the cache, not only the shared opening
    assert all(new < prompt // 2 for prompt, new in together["opencode"][2:]), together["opencode"]

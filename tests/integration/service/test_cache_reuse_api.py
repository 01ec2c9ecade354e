"""Cache reuse after a change through the service (STRATA_CACHE_REUSE / ServiceConfig.cache_reuse, llama-server's
--cache-reuse): OpenCode's recorded build request (tests/support/fixtures/agents/opencode/02-build.json) names the day
inside its system message, in an `<env>` block before its tool schemas. The next day's first request differs there,
a few tokens into the prompt; with cache reuse on, the system prompt after the date and every tool schema are
moved from the slot's cells, and only the new date (and the prompt's last token) is computed, as
`usage.prompt_tokens_details.cached_tokens` and /metrics say; after a restart of the service, yesterday's prompt comes
back from the prompt cache on disk and its tools are moved the same way. The whole request (~7,200 tokens: a 9.5 KB system
message, ten tools) goes to the Qwen2.5-Coder fixture's tokenizer twin (agent_replay.write_tokenizer_twin: its
tokenizer and chat template on two random layers), which renders and tokenizes it exactly as Qwen does at a
thousandth of the compute; what is reused depends only on the tokens. A Modelfile PARAMETER `cache_reuse` is checked
and stored like any other. The model file comes from `make test-models`; without it these tests skip (CI sets
STRATA_REQUIRE_TEST_MODELS)."""
from __future__ import annotations

import json
import re

import httpx
import pytest

from agent_replay import serve_model, write_tokenizer_twin
from repo_paths import FIXTURES

MODEL = "coder:0.5b"
MIN_CHUNK = 256                      # llama.vim's suggestion for llama-server's --cache-reuse
DAY1, DAY2 = "Today's date: Fri Nov 27 2026", "Today's date: Sat Nov 28 2026"


def build_request(date_line: str) -> dict:
    """OpenCode's first build request on the day `date_line` names; greedy, one reply token, not streamed."""
    body = json.loads((FIXTURES / "agents" / "opencode" / "02-build.json").read_text())["body"]
    system = body["messages"][0]["content"]
    assert DAY1 in system
    return {**{k: v for k, v in body.items() if k not in ("stream", "stream_options")},
            "messages": [{"role": "system", "content": system.replace(DAY1, date_line)}, *body["messages"][1:]],
            "max_tokens": 1, "temperature": 0, "stream": False}


CONFIG = dict(num_parallel=1, num_ctx=16384, keep_alive="10m", cache_reuse=MIN_CHUNK, max_body=4 * 1024 * 1024)


@pytest.fixture(scope="module")
def twin(qwen_coder_path, tmp_path_factory):
    return write_tokenizer_twin(qwen_coder_path, tmp_path_factory.mktemp("twin") / "coder-twin.gguf", n_ctx=16384)


@pytest.fixture(scope="module")
def server(live_service, twin):
    return serve_model(live_service, twin, MODEL, **CONFIG)


def usage(http: httpx.Client, body: dict) -> dict:
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    u = r.json()["usage"]
    return {"prompt": u["prompt_tokens"], "cached": u["prompt_tokens_details"]["cached_tokens"]}


def metric(http: httpx.Client, name: str) -> int:
    m = re.search(rf'^{name}{{model="{re.escape(MODEL)}"}} (\d+)$', http.get("/metrics").text, re.M)
    return int(m.group(1)) if m else 0


def test_the_next_days_request_reuses_the_tools_after_the_changed_date(server):
    with httpx.Client(base_url=server.url, timeout=None) as http:
        day1 = usage(http, build_request(DAY1))
        assert day1["cached"] == 0 and day1["prompt"] > 6000
        reused_before = metric(http, "strata_prompt_cache_reused_tokens_total")
        day2 = usage(http, build_request(DAY2))
        computed = day2["prompt"] - day2["cached"]
        assert day2["prompt"] == day1["prompt"]
        # the new date's tokens (and the last prompt token, whose logits start the reply) are all that is computed:
        # the system prompt after the date and the ten tool schemas come from the slot's cells (without cache
        # reuse only the ~1,850 tokens before the date would)
        assert 1 < computed <= 12, day2
        reused = metric(http, "strata_prompt_cache_reused_tokens_total") - reused_before
        assert reused > 5000 and reused <= day2["cached"], (reused, day2)


def test_cache_reuse_is_a_modelfile_parameter(server):
    with httpx.Client(base_url=server.url, timeout=60) as http:
        r = http.post("/api/create", json={"model": "coder-reuse", "from": MODEL, "parameters": {"cache_reuse": 256},
                                           "stream": False})
        assert r.status_code == 200, r.text
        assert re.search(r"cache_reuse\s+256", http.post("/api/show", json={"model": "coder-reuse"}).json()["parameters"])
        bad = http.post("/api/create", json={"model": "coder-bad", "from": MODEL, "parameters": {"cache_reuse": "x"},
                                             "stream": False})
        assert bad.status_code == 400 and "cache_reuse" in bad.text


def test_after_a_restart_the_state_on_disk_is_moved_the_same_way(live_service, twin, tmp_path_factory):
    home = tmp_path_factory.mktemp("reuse-disk-home")
    with live_service.running(home=home, **CONFIG) as svc:
        with httpx.Client(base_url=svc.url, timeout=None) as http:
            assert http.post("/api/create", json={"model": MODEL, "from": str(twin), "stream": False}).is_success
            day1 = usage(http, build_request(DAY1))
    with live_service.running(home=home, **CONFIG) as svc:
        with httpx.Client(base_url=svc.url, timeout=None) as http:
            day2 = usage(http, build_request(DAY2))
            disk = http.get("/api/ps").json()["models"][0]["strata"]["prompt_cache"]["disk"]
    assert day2["prompt"] == day1["prompt"] and 1 < day2["prompt"] - day2["cached"] <= 12, (day1, day2)
    assert disk["hits"] == 1 and disk["hit_tokens"] == day2["cached"], disk

"""Context checkpoints seen from the APIs, with the official `openai` and `ollama` clients against a live server,
on a synthetic model of each recurrent and hybrid family (tests/support/gguf_families.py; random weights: the text is
noise, the memory paths are real). A 10-turn chat: from the second turn on, every turn reuses everything before
the previous reply (all but the new message where the reply's tokens survive the round trip): OpenAI
`usage.prompt_tokens_details.cached_tokens`, the Responses API's `input_tokens_details.cached_tokens`, and for
Ollama the service's hit-token counter in /metrics (it counts the same DoneEvent field). The last turn asked again
of a freshly loaded model (nothing cached) gives the same greedy reply. /api/ps and /metrics show the
checkpoints."""
from __future__ import annotations

import httpx
import ollama
import openai
import pytest

from app.engine.runner.cache.prompt_cache import END_BACKOFF
from app.service.store.model_store import ModelStore
from gguf_factory import write_family
from service_util import wait_for

FAMILIES = ("mamba", "rwkv7", "qwen3next", "lfm2", "granitehybrid")
TURNS = 10


@pytest.fixture(scope="module")
def server(live_service, tmp_path_factory):
    home = tmp_path_factory.mktemp("svc-checkpoints")
    src = tmp_path_factory.mktemp("ckpt-ggufs")
    store = ModelStore(db_path=home / "strata.db", models_dir=home / "models", discover_external=False)
    for name in FAMILIES:
        store.import_gguf(write_family(name, src), name=f"ck-{name}")
    # room for 10 turns and the reply reserve: a prompt that leaves too little grows the context (a reload)
    return live_service(n_threads=1, num_ctx=2048, num_parallel=2, keep_alive="10m", prompt_cache_mib=16,
                        max_loaded_models=1, home=home)


def words(turn: int) -> str:
    return f"Turn {turn}: the lantern by the harbor number {turn}."


def metric(http, name: str, model: str) -> int:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(f'{name}{{model="{model}"}}'):
            return int(float(line.split()[-1]))
    return 0


@pytest.mark.parametrize("family", FAMILIES)
def test_ten_turns_reuse_the_history_through_openai_and_ollama(server, family):
    model = f"ck-{family}:latest"
    ai = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    oc = ollama.Client(host=server.url)
    http = httpx.Client(base_url=server.url, timeout=120)
    try:
        msgs, usage = [], []
        for t in range(TURNS):
            msgs.append({"role": "user", "content": words(t)})
            r = ai.chat.completions.create(model=model, messages=msgs, max_tokens=4, temperature=0)
            usage.append((r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens))
            msgs.append({"role": "assistant", "content": r.choices[0].message.content})
        for (p_prev, _), (p, cached) in zip(usage, usage[1:]):
            assert p_prev - END_BACKOFF <= cached < p, usage
        ps = next(m for m in http.get("/api/ps").json()["models"] if m["name"] == model)["strata"]["prompt_cache"]
        assert ps["checkpoints"] > 0 and 0 < ps["checkpoint_bytes"] <= ps["checkpoint_limit"], ps
        # a turn that reused no more than the previous prompt had the slot's state (which ends after the reply)
        # cut back: only a checkpoint can do that
        assert ps["checkpoint_hits"] >= sum(c <= p_prev for (p_prev, _), (_, c) in zip(usage, usage[1:])), usage
        assert metric(http, "strata_ctx_checkpoint_bytes", model) == ps["checkpoint_bytes"]
        assert metric(http, "strata_ctx_checkpoint_hits_total", model) == ps["checkpoint_hits"]

        # the Responses API reports the same reuse (input_tokens_details.cached_tokens)
        resp = ai.responses.create(model=model, input=msgs + [{"role": "user", "content": words(TURNS)}],
                                   max_output_tokens=4, temperature=0)
        assert usage[-1][0] - END_BACKOFF <= resp.usage.input_tokens_details.cached_tokens < resp.usage.input_tokens

        # exactness: the last turn again on a freshly loaded model (no cache at all) gives the same reply
        last = msgs[:-1]             # (the Responses turn above is not part of this conversation)
        oc.generate(model=model, prompt="", keep_alive=0)
        wait_for(lambda: all(m["name"] != model for m in http.get("/api/ps").json()["models"]), 60, "unload")
        cold = ai.chat.completions.create(model=model, messages=last, max_tokens=4, temperature=0)
        assert cold.usage.prompt_tokens_details.cached_tokens == 0
        assert cold.choices[0].message.content == msgs[-1]["content"]

        # the same through Ollama's /api/chat (its cached count, prompt_cached_count, is a Strata field the
        # official client drops: the service's hit-token counter says it)
        omsgs, seen = [], []
        for t in range(TURNS):
            omsgs.append({"role": "user", "content": "Ollama " + words(t)})
            before = metric(http, "strata_prompt_cache_hit_tokens_total", model)
            r = oc.chat(model=model, messages=omsgs, options={"num_predict": 4, "temperature": 0})
            seen.append((r.prompt_eval_count, metric(http, "strata_prompt_cache_hit_tokens_total", model) - before))
            omsgs.append({"role": "assistant", "content": r.message.content})
        for (p_prev, _), (p, cached) in zip(seen, seen[1:]):
            assert p_prev - END_BACKOFF <= cached < p, seen
    finally:
        http.close()

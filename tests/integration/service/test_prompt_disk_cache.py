"""The prompt cache on disk across a restart of the service and a reload of the model (SmolLM2, CPU, the official
openai client): a long prompt's state is written under the store's data dir; a new service on the same data dir
serves the next request that shares the prefix from it, and so does the runner that replaces one reloaded for a
larger context (cached tokens from `usage`, never from timing); /api/ps and /metrics show it; a damaged or foreign
file is refused and deleted, and the runner answers as if there were none.
app/engine/runner/cache/disk_cache.py, docs/prompt-cache.md "On disk"."""
from __future__ import annotations

import json

import httpx
import openai

from app.engine.runner.cache.disk_cache import MAGIC, MIN_DISK_TOKENS, SUFFIX, read_header, write_file

MODEL = "smollm2:135m"
CONFIG = dict(n_threads=1, num_ctx=2048, num_parallel=1, keep_alive="10m")


def prefix() -> str:
    """A system prompt of ~1,250 tokens (longer than MIN_DISK_TOKENS), the same in every session."""
    rules = [f"Rule {i}: when the user mentions item {i}, answer with the colour number {i * 7 % 13}." for i in range(56)]
    return "You are the archive's assistant. " + " ".join(rules)


def ask(server, question: str) -> tuple[int, int]:
    """(prompt tokens, cached tokens) of a chat turn after the shared system prompt."""
    ai = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    r = ai.chat.completions.create(model=MODEL, max_tokens=4, temperature=0,
                                   messages=[{"role": "system", "content": prefix()},
                                             {"role": "user", "content": question}])
    return r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens


def disk_state(server) -> dict:
    return httpx.get(server.url + "/api/ps").json()["models"][0]["strata"]["prompt_cache"]["disk"]


def cache_files(home):
    return sorted((home / "prompt-cache").rglob("*" + SUFFIX))


def test_a_restart_and_a_reload_serve_the_next_session_from_disk(live_service, tmp_path_factory, smollm2_path):
    home = tmp_path_factory.mktemp("disk-cache-home")
    with live_service.running(home=home, **CONFIG) as svc:
        n, cached = ask(svc, "What is rule 3 about?")
        assert MIN_DISK_TOKENS + 100 < n < 1536 and cached == 0
    assert len(cache_files(home)) == 1           # written when the request ended, and not again at shutdown
    with live_service.running(home=home, **CONFIG) as svc:
        n2, cached2 = ask(svc, "Which rule names the colour 5?")
        assert cached2 >= n - 20, (n, n2, cached2)      # the whole shared system prompt, from the file
        ps = disk_state(svc)
        assert ps["hits"] == 1 and ps["hit_tokens"] == cached2 and ps["entries"] >= 1 and ps["bytes"] > 0
        assert ps["limit"] > 0 and ps["refused"] == 0
        metrics = httpx.get(svc.url + "/metrics").text
        assert f'strata_prompt_disk_cache_hit_tokens_total{{model="{MODEL}"}} {cached2}' in metrics
        # a prompt longer than the loaded context: the model is reloaded with a larger one, and the new runner
        # continues the old one's prefix
        long_q = "Now read this note and say which rule it breaks. " + "The lantern by the harbor was blue. " * 120
        n3, cached3 = ask(svc, long_q)
        ctx = httpx.get(svc.url + "/api/ps").json()["models"][0]["strata"]["context"]
        assert n3 > 2048 and ctx["num_ctx"] > 2048, ctx
        assert cached3 >= n - 20, (n3, cached3)


def test_damaged_and_foreign_files_are_refused_deleted_and_the_runner_answers(live_service, tmp_path_factory,
                                                                            smollm2_path):
    home = tmp_path_factory.mktemp("disk-cache-damaged")
    with live_service.running(home=home, **CONFIG) as svc:
        n, _ = ask(svc, "What is rule 3 about?")
    (path,) = cache_files(home)
    raw = bytearray(path.read_bytes())
    # whole, but written by another llama.cpp build, where this one looks
    n_head = int.from_bytes(raw[len(MAGIC):len(MAGIC) + 4], "little")
    facts = json.loads(raw[len(MAGIC) + 4:len(MAGIC) + 4 + n_head])["facts"]
    entry = read_header(path, facts)
    foreign = path.with_name("f" + path.name)
    write_file(foreign, dict(facts, build={"llama_cpp_python": "0.0.1"}), entry.tokens[:-1], raw[entry.payload_at:])
    raw[-1000] ^= 0x01                            # inside the KV state: only the checksum can tell
    path.write_bytes(bytes(raw))
    with live_service.running(home=home, **CONFIG) as svc:
        _, cached = ask(svc, "Which rule names the colour 5?")
        assert cached < MIN_DISK_TOKENS                  # nothing from either file
        assert not path.exists() and not foreign.exists()
        ps = disk_state(svc)
        assert ps["refused"] == 2 and ps["hits"] == 0, ps
        assert ask(svc, "And rule 4?")[1] >= n - 20      # the runner lives on, its own slot cache works

"""Model metadata where agents and their providers look for it, on a live loopback service, read through the
official `openai` and `ollama` clients: /v1/models and /v1/models/{id} (context window as a request gets it,
capabilities, modalities, the GGUF's own numbers), /api/show (Ollama's `capabilities` list and
`model_info` `<arch>.context_length`), /api/tags (`capabilities` beside `details`), /api/version (an Ollama
version Codex's --oss accepts).

Models: Qwen2.5-Coder-0.5B (a tools model with fill-in-the-middle tokens), the built-in SmolLM2 (its template
knows no tools), a synthetic thinking model and a synthetic embedding model. Nothing generates: metadata only."""
from __future__ import annotations

import httpx
import ollama
import openai
import pytest

from gguf_variants import write_llama

CODER = "coder:test"
THINKER = "thinker:test"
EMBED = "embed:test"
THINK_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif -%}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")


@pytest.fixture(scope="module")
def server(live_service, qwen_coder_path, embed_gguf, tmp_path_factory):
    svc = live_service(n_threads=1, num_ctx=2048, num_parallel=1)
    thinker = write_llama(tmp_path_factory.mktemp("meta") / "thinker.gguf", template=THINK_TEMPLATE, n_layer=2)
    with httpx.Client(base_url=svc.url, timeout=120) as c:
        for name, path in ((CODER, qwen_coder_path), (THINKER, thinker), (EMBED, embed_gguf)):
            r = c.post("/api/create", json={"model": name, "from": str(path), "stream": False})
            assert r.status_code == 200, r.text
    yield svc


@pytest.fixture(scope="module")
def ai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def oc(server):
    return ollama.Client(host=server.url)


def extra(model) -> dict:
    return model.model_extra or {}


def test_v1_models_lists_context_and_capabilities(ai):
    models = {m.id: extra(m) for m in ai.models.list()}
    coder = models[CODER]
    # STRATA_NUM_CTX caps the context a request gets (2048 here, the model was trained on 32768)
    assert coder["context_length"] == coder["max_model_len"] == 2048
    assert coder["capabilities"] == ["completion", "tools", "insert"]
    assert coder["supported_features"] == ["tools"]
    assert coder["input_modalities"] == ["text"] and coder["output_modalities"] == ["text"]
    assert coder["meta"]["n_ctx_train"] == 32768 and coder["meta"]["n_params"] > 400_000_000
    assert "tools" not in models["smollm2:135m"]["capabilities"]
    assert models[THINKER]["supported_features"] == ["tools", "reasoning"]
    assert "thinking" in models[THINKER]["capabilities"]
    assert models[EMBED]["capabilities"] == ["embedding"] and models[EMBED]["output_modalities"] == ["embedding"]


def test_v1_model_by_id_answers_the_same_and_404s_by_name(ai):
    one = ai.models.retrieve(CODER)
    assert one.id == CODER and one.object == "model"
    assert extra(one)["context_length"] == 2048 and "tools" in extra(one)["capabilities"]
    with pytest.raises(openai.NotFoundError) as e:
        ai.models.retrieve("no-such-model:1b")
    assert "no-such-model:1b" in str(e.value)


def test_loaded_model_lists_the_context_it_runs_with(ai, oc):
    oc.generate(model=CODER, prompt="", keep_alive="1m", options={"num_ctx": 1024})      # loads, generates nothing
    try:
        assert extra(ai.models.retrieve(CODER))["context_length"] == 1024
    finally:
        oc.generate(model=CODER, prompt="", keep_alive=0)


def test_api_show_capabilities_and_training_context(oc):
    show = oc.show(CODER)
    assert show.capabilities == ["completion", "tools", "insert"]
    assert show.modelinfo["qwen2.context_length"] == 32768
    assert show.details.family == "qwen2"
    assert "thinking" in oc.show(THINKER).capabilities
    assert oc.show(EMBED).capabilities == ["embedding"]


def test_api_tags_carry_capabilities_beside_details(server, oc):
    names = {m.model for m in oc.list().models}
    assert {CODER, THINKER, EMBED, "smollm2:135m"} <= names
    tags = {m["name"]: m for m in httpx.get(server.url + "/api/tags").json()["models"]}
    assert tags[CODER]["capabilities"] == ["completion", "tools", "insert"]
    assert tags[CODER]["details"]["context_length"] == 32768
    assert tags[EMBED]["capabilities"] == ["embedding"]


def test_api_version_is_one_codex_oss_accepts(server):
    body = httpx.get(server.url + "/api/version").json()
    major, minor, patch = (int(x) for x in body["version"].split("."))
    assert (major, minor, patch) >= (0, 13, 4)
    from app import __version__
    assert body["strata"]["version"] == __version__

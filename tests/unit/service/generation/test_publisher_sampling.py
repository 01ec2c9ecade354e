"""The publisher's sampling defaults: a GGUF's general.sampling.* keys (llama.cpp #17120) read as option names
(ModelInfo.sampling, ChatFacts.sampling), applied under the Modelfile's PARAMETERs and the request's options, with
where each value came from (RequestOptions.sources: the X-Strata-Sampling header; sampling_view: /api/show).
On a live server: tests/integration/service/test_think_budgets.py."""
from __future__ import annotations

from app.engine.gguf.chat_facts import read_chat_facts
from app.engine.gguf.model_info import read_model_info, sampling_defaults
from app.service.generation.options import parse_ollama_options, sampling_view
from app.service.generation.pipeline import sampling_facts
from gguf_variants import write_llama

PUBLISHED = {"temp": 0.6, "top_k": 20, "top_p": 0.95, "min_p": 0.05, "penalty_repeat": 1.05, "penalty_last_n": 128}


def test_the_gguf_keys_are_read_as_option_names(tmp_path):
    path = write_llama(tmp_path / "p.gguf", n_layer=1, sampling=PUBLISHED)
    info = read_model_info(path)
    assert dict(info.sampling) == {"temperature": 0.6, "top_k": 20, "top_p": 0.95, "min_p": 0.05,
                                   "repeat_penalty": 1.05, "repeat_last_n": 128}
    assert read_chat_facts(path).sampling == info.sampling
    assert read_model_info(write_llama(tmp_path / "none.gguf", n_layer=1)).sampling == ()


def test_values_of_the_wrong_kind_are_left_out():
    keys = {"general.sampling.top_k": 2.5, "general.sampling.temp": "hot", "general.sampling.top_p": True,
            "general.sampling.min_p": 0.1, "general.sampling.mirostat": 2}
    assert sampling_defaults(keys.get) == (("min_p", 0.1), ("mirostat", 2))


def test_request_over_modelfile_over_publisher_over_engine():
    pub = (("temperature", 0.6), ("top_k", 20), ("top_p", 0.95), ("min_p", 7.0))      # min_p out of range: left out
    ro = parse_ollama_options({"top_p": 0.5}, {"top_k": 5}, pub)
    assert (ro.sampling.temperature, ro.sampling.top_k, ro.sampling.top_p, ro.sampling.min_p) == (0.6, 5, 0.5, 0.0)
    assert ro.sources == {"temperature": "gguf", "top_k": "modelfile", "top_p": "request"}
    assert sampling_facts(ro) == "temperature=0.6 (gguf), top_k=5 (modelfile), top_p=0.5 (request)"
    view = sampling_view({"top_k": 5}, pub)
    assert view["temperature"] == {"value": 0.6, "source": "gguf"}
    assert view["top_k"] == {"value": 5, "source": "modelfile"}
    assert view["repeat_penalty"] == {"value": 1.0, "source": "default"} and "seed" not in view

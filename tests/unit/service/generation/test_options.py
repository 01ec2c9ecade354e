"""Ollama's options, checked once (generation/options.py): load-time options apart from sampling, Modelfile
parameters as defaults under the request's, a wrong kind or range a 400 naming the option, the plan's context
clamped to the model's training context."""
from __future__ import annotations

import pytest

from app.service.generation.options import parse_ollama_options, plan_options
from app.service.http.errors import ApiError


def test_ollama_options_split_load_time_and_sampling():
    ro = parse_ollama_options({"num_ctx": 2048, "num_gpu": 10, "temperature": 0, "top_k": 5, "seed": 7,
                               "stop": ["\n", "user:"], "num_predict": 12, "num_thread": 2, "use_mmap": True,
                               "made_up_option": 1})
    assert ro.plan == {"num_ctx": 2048, "num_gpu": 10, "use_mmap": True}     # Ollama's use_mmap: how it loads
    assert ro.n_threads == 2
    assert (ro.sampling.temperature, ro.sampling.top_k, ro.sampling.seed) == (0.0, 5, 7)
    assert ro.stop == ["\n", "user:"] and ro.num_predict == 12


def test_modelfile_parameters_are_defaults_under_request_options():
    ro = parse_ollama_options({"temperature": 0.2}, defaults={"temperature": 0.9, "top_k": 3})
    assert ro.sampling.temperature == 0.2 and ro.sampling.top_k == 3


@pytest.mark.parametrize("opts,word", [
    ({"temperature": "hot"}, "temperature"), ({"top_p": 1.5}, "top_p"), ({"num_ctx": 0}, "num_ctx"),
    ({"num_predict": 1.5}, "num_predict"), ({"stop": 3}, "stop"), ({"mirostat": 3}, "mirostat"),
    ({"kv_type": "q2"}, "kv_type"), ({"use_mmap": "no"}, "use_mmap"), ({"temperature": float("nan")}, "temperature"), ({"top_k": True}, "top_k"),
])
def test_bad_options_are_400_naming_the_option(opts, word):
    with pytest.raises(ApiError) as e:
        parse_ollama_options(opts)
    assert e.value.status == 400 and word in e.value.message


@pytest.mark.parametrize("opts,word", [
    ({"num_predict": 1e30}, "num_predict"), ({"num_predict": 2**31}, "num_predict"), ({"top_k": 2**40}, "top_k"),
    ({"num_ctx": 1e30}, "num_ctx"), ({"repeat_last_n": -(2**31) - 1}, "repeat_last_n"), ({"seed": 2**64}, "seed"),
    ({"temperature": float("inf")}, "temperature"), ({"mirostat_tau": float("-inf")}, "mirostat_tau"),
])
def test_integers_beyond_int32_and_numbers_not_finite_are_400(opts, word):
    with pytest.raises(ApiError) as e:
        parse_ollama_options(opts)
    assert e.value.status == 400 and word in e.value.message and e.value.param == word


def test_in_range_integers_and_64_bit_seeds_are_taken():
    ro = parse_ollama_options({"num_predict": 2**31 - 1, "seed": 2**40 + 5, "repeat_last_n": 64.0})
    assert ro.num_predict == 2**31 - 1 and ro.sampling.seed == 5 and ro.sampling.repeat_last_n == 64


def test_options_must_be_an_object():
    with pytest.raises(ApiError):
        parse_ollama_options(["temperature", 1])


def test_plan_options_clamp_to_training_context():
    o = plan_options({"num_ctx": 100000}, num_ctx_default=4096, num_parallel=4, n_ctx_train=8192)
    assert (o.num_ctx, o.num_parallel) == (8192, 4)
    o = plan_options({}, num_ctx_default=4096, num_parallel=2, n_ctx_train=2048)
    assert o.num_ctx == 2048

"""Service building blocks that need no model: keep_alive durations, options, Modelfiles, host/origin rules,
config parsing, the OpenAPI document, metrics text, and a port that is already taken."""
from __future__ import annotations

import socket

import pytest

from app.service.config import ConfigError, ServiceConfig, parse_host
from app.service.http.errors import ApiError
from app.service.store.modelfile import ModelfileError, parse_modelfile, render_modelfile
from app.service.dialects.openai.parse import parse_logit_bias, sampling_options
from app.service.generation.pipeline import request_options
from app.service.generation.options import parse_ollama_options, plan_options
from app.service.generation.request import field
from app.service.generation.keep_alive import parse_keep_alive
from app.service.http.security import Guard


@pytest.mark.parametrize("value,seconds", [
    ("5m", 300.0), ("1h30m", 5400.0), ("10s", 10.0), ("300ms", 0.3), ("2.5h", 9000.0), (300, 300.0),
    ("300", 300.0), (0, 0.0), ("0", 0.0), ("0s", 0.0), (-1, None), ("-1", None), ("-5m", None), (None, 300.0),
])
def test_keep_alive_durations(value, seconds):
    assert parse_keep_alive(value, "5m") == (pytest.approx(seconds) if seconds is not None else None)


@pytest.mark.parametrize("bad", ["5 minutes", "m5", "1x", True, [], {}, "5m3"])
def test_keep_alive_rejects_garbage_with_400(bad):
    with pytest.raises(ApiError) as e:
        parse_keep_alive(bad)
    assert e.value.status == 400 and "keep_alive" in e.value.message


def test_ollama_options_split_load_time_and_sampling():
    ro = parse_ollama_options({"num_ctx": 2048, "num_gpu": 10, "temperature": 0, "top_k": 5, "seed": 7,
                               "stop": ["\n", "user:"], "num_predict": 12, "num_thread": 2, "use_mmap": True,
                               "made_up_option": 1})
    assert ro.plan == {"num_ctx": 2048, "num_gpu": 10}
    assert ro.n_threads == 2
    assert (ro.sampling.temperature, ro.sampling.top_k, ro.sampling.seed) == (0.0, 5, 7)
    assert ro.stop == ["\n", "user:"] and ro.num_predict == 12


def test_modelfile_parameters_are_defaults_under_request_options():
    ro = parse_ollama_options({"temperature": 0.2}, defaults={"temperature": 0.9, "top_k": 3})
    assert ro.sampling.temperature == 0.2 and ro.sampling.top_k == 3


@pytest.mark.parametrize("opts,word", [
    ({"temperature": "hot"}, "temperature"), ({"top_p": 1.5}, "top_p"), ({"num_ctx": 0}, "num_ctx"),
    ({"num_predict": 1.5}, "num_predict"), ({"stop": 3}, "stop"), ({"mirostat": 3}, "mirostat"),
    ({"kv_type": "q2"}, "kv_type"), ({"temperature": float("nan")}, "temperature"), ({"top_k": True}, "top_k"),
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


@pytest.mark.parametrize("body,typ,ok", [
    ({"n": 2**31 - 1}, int, True), ({"n": 2**31}, int, False), ({"n": -(2**31)}, int, True), ({"n": 1e30}, int, False),
    ({"n": 3.0}, int, True), ({"n": 3.5}, int, False), ({"n": True}, int, False), ({"n": float("nan")}, float, False),
    ({"n": float("inf")}, float, False), ({"n": 10**400}, float, False), ({"n": 1.5}, float, True),
])
def test_request_fields_are_checked_for_kind_and_range(body, typ, ok):
    if ok:
        assert field(body, "n", typ) == body["n"]
        return
    with pytest.raises(ApiError) as e:
        field(body, "n", typ)
    assert e.value.status == 400 and e.value.param == "n" and "'n'" in e.value.message


def test_options_must_be_an_object():
    with pytest.raises(ApiError):
        parse_ollama_options(["temperature", 1])


def parse_openai_sampling(body: dict):
    """OpenAI's sampling fields as the dialect's parser translates them, then the common options step."""
    return request_options(sampling_options(body), None, parse_logit_bias(body))


def test_openai_sampling_and_logit_bias():
    ro = parse_openai_sampling({"temperature": 0.5, "max_completion_tokens": 9, "stop": "END", "seed": 3,
                                "logit_bias": {"42": -100}})
    assert ro.num_predict == 9 and ro.stop == ["END"] and ro.sampling.logit_bias == {42: -100.0}
    with pytest.raises(ApiError):
        parse_openai_sampling({"temperature": 3})
    with pytest.raises(ApiError):
        parse_openai_sampling({"logit_bias": {"not-a-token": 1}})


def test_plan_options_clamp_to_training_context():
    o = plan_options({"num_ctx": 100000}, num_ctx_default=4096, num_parallel=4, n_ctx_train=8192)
    assert (o.num_ctx, o.num_parallel) == (8192, 4)
    o = plan_options({}, num_ctx_default=4096, num_parallel=2, n_ctx_train=2048)
    assert o.num_ctx == 2048


def test_modelfile_parse_all_forms():
    mf = parse_modelfile('# comment\nFROM smollm2:135m\nPARAMETER temperature 0.3\nPARAMETER stop "<|im_end|>"\n'
                         'PARAMETER stop END\nPARAMETER num_ctx 2048\nSYSTEM """You are\nbrief."""\n'
                         'TEMPLATE "{{ .Prompt }}"\nMESSAGE user hello\n')
    assert mf.from_ == "smollm2:135m"
    assert mf.parameters == {"temperature": 0.3, "stop": ["<|im_end|>", "END"], "num_ctx": 2048}
    assert mf.system == "You are\nbrief." and mf.template == "{{ .Prompt }}"
    assert mf.messages == [{"role": "user", "content": "hello"}]
    again = parse_modelfile(render_modelfile(mf.from_, mf.parameters, mf.template, mf.system))
    assert (again.parameters, again.system, again.template) == (mf.parameters, mf.system, mf.template)


@pytest.mark.parametrize("text,word", [
    ("PARAMETER temperature 1", "FROM"), ("FROM x\nPARAMETER temperature warm", "temperature"),
    ("FROM x\nPARAMETER bogus 1", "bogus"), ("FROM x\nSYSTEM \"\"\"never closed", "unterminated"),
    ("FROM x\nFROBNICATE y", "FROBNICATE"), ("FROM x\nADAPTER", "ADAPTER"),
])
def test_modelfile_errors_name_the_problem(text, word):
    with pytest.raises(ModelfileError, match=word):
        parse_modelfile(text)


def test_parse_host_forms():
    assert parse_host(None) == ("127.0.0.1", 11434)
    assert parse_host("0.0.0.0") == ("0.0.0.0", 11434)
    assert parse_host("localhost:8080") == ("localhost", 8080)
    assert parse_host("http://127.0.0.1:9000/") == ("127.0.0.1", 9000)
    assert parse_host("[::1]:7000") == ("::1", 7000)
    with pytest.raises(ConfigError):
        parse_host("host:notaport")
    with pytest.raises(ConfigError):
        parse_host("host:70000")


def test_config_from_env(monkeypatch):
    monkeypatch.setenv("STRATA_HOST", "127.0.0.1:12345")
    monkeypatch.setenv("STRATA_ORIGINS", "https://app.example.com, http://tool.local:*")
    monkeypatch.setenv("STRATA_MAX_QUEUE", "7")
    monkeypatch.setenv("STRATA_API_KEY", "sekrit")
    c = ServiceConfig.from_env()
    assert (c.port, c.max_queue, c.api_key) == (12345, 7, "sekrit")
    assert c.origins == ("https://app.example.com", "http://tool.local:*")
    monkeypatch.setenv("STRATA_MAX_QUEUE", "lots")
    with pytest.raises(ConfigError, match="STRATA_MAX_QUEUE"):
        ServiceConfig.from_env()


def test_config_reads_the_runner_settings_once_and_passes_them_down(monkeypatch):
    """STRATA_SPECULATIVE, STRATA_STREAM_INTERVAL_MS and STRATA_RUNNER_LOG are read here, not in the runner child:
    the config's RunnerSettings is what every RunnerClient hands its child."""
    for var in ("STRATA_SPECULATIVE", "STRATA_STREAM_INTERVAL_MS", "STRATA_RUNNER_LOG"):
        monkeypatch.delenv(var, raising=False)
    c = ServiceConfig.from_env()
    assert (c.runner.speculative, c.runner.stream_interval_ms, c.runner.log_level) == ("", None, "WARNING")
    monkeypatch.setenv("STRATA_SPECULATIVE", "auto")
    monkeypatch.setenv("STRATA_STREAM_INTERVAL_MS", "12.5")
    monkeypatch.setenv("STRATA_RUNNER_LOG", "debug")
    c = ServiceConfig.from_env()
    assert (c.runner.speculative, c.runner.stream_interval_ms, c.runner.log_level) == ("auto", 12.5, "DEBUG")
    monkeypatch.setenv("STRATA_STREAM_INTERVAL_MS", "soon")
    with pytest.raises(ConfigError, match="STRATA_STREAM_INTERVAL_MS must be a number of milliseconds"):
        ServiceConfig.from_env()
    monkeypatch.setenv("STRATA_STREAM_INTERVAL_MS", "0")
    monkeypatch.setenv("STRATA_RUNNER_LOG", "chatty")
    with pytest.raises(ConfigError, match="STRATA_RUNNER_LOG"):
        ServiceConfig.from_env()
    monkeypatch.setenv("STRATA_RUNNER_LOG", "info")
    monkeypatch.delenv("STRATA_PROMPT_DISK_CACHE_MIB", raising=False)
    assert ServiceConfig.from_env().runner.disk_cache_mib == -1          # automatic
    monkeypatch.setenv("STRATA_PROMPT_DISK_CACHE_MIB", "0")
    assert ServiceConfig.from_env().runner.disk_cache_mib == 0           # off


def test_host_header_rules_block_dns_rebinding():
    g = Guard(ServiceConfig(origins=("https://app.example.com",)))
    for ok in ("localhost:11434", "127.0.0.1:11434", "[::1]:11434", "10.0.0.5", "foo.localhost", "app.example.com",
               None):
        assert g.host_allowed(ok), ok
    for bad in ("evil.example", "attacker.com:11434", "127.0.0.1.nip.io"):
        assert not g.host_allowed(bad), bad


def test_origin_rules():
    g = Guard(ServiceConfig(origins=("https://app.example.com", "http://tool.local:*")))
    for ok in ("http://localhost:3000", "https://127.0.0.1", "http://[::1]:8080", "app://strata",
               "https://app.example.com", "http://tool.local:5173"):
        assert g.origin_allowed(ok), ok
    for bad in ("https://evil.example", "http://localhost.evil.example", "https://app.example.com.evil.io",
                "http://tool.local.evil:80"):
        assert not g.origin_allowed(bad), bad
    assert Guard(ServiceConfig(origins=("*",))).origin_allowed("https://anything.example")


def test_port_already_taken_is_a_clear_error():
    from app.service.server import ServiceError, ServiceThread

    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    try:
        with pytest.raises(ServiceError, match="already in use"):
            ServiceThread(ServiceConfig(port=port)).start()
    finally:
        blocker.close()


def test_openapi_covers_every_route():
    from app.service.app import create_app
    from app.service.http.openapi import build_openapi

    app = create_app(ServiceConfig(port=0))
    doc = build_openapi(app)
    assert doc["openapi"].startswith("3.")
    for route in app.router.routes():
        if route.method == "HEAD":
            continue
        path = route.resource.canonical.replace("{model:.+}", "{model}")
        methods = doc["paths"][path]
        assert (route.method.lower() in methods) or route.method == "*", (route.method, path)
        for op in methods.values():
            assert op["summary"] and not op["summary"].startswith(route.method + " "), path   # described, not default
    for needed in ("/api/generate", "/api/chat", "/v1/chat/completions", "/api/layout", "/api/events", "/metrics"):
        assert needed in doc["paths"]


def test_go_template_subset():
    from app.service.generation.gotemplate import TemplateError, render

    t = "{{ if .System }}<s>{{ .System }}</s>\n{{ end }}USER: {{ .Prompt }}\nASSISTANT: {{- .Response }}"
    assert render(t, {"System": "be brief", "Prompt": "hi"}) == "<s>be brief</s>\nUSER: hi\nASSISTANT:"
    assert render(t, {"System": "", "Prompt": "hi"}) == "USER: hi\nASSISTANT:"
    assert render("{{ if .System }}A{{ else }}B{{ end }}", {}) == "B"
    for bad in ("{{ range .Messages }}x{{ end }}", "{{ if .System }}x", "{{ end }}", "{{ .Tools }}"):
        with pytest.raises(TemplateError):
            render(bad, {"Prompt": "p"})

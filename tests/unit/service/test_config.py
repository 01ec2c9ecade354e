"""The service's configuration (service/config.py): STRATA_HOST's forms, the environment read once, the
runner's settings read here and passed down."""
from __future__ import annotations

import pytest

from app.service.config import ConfigError, ServiceConfig, parse_host


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

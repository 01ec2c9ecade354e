"""The soak (bench/soak.py) shortened for CI: 32 clients, a quarter disconnecting at random points, on a real
`strata serve` process with SmolLM2, ~20 s measured (in rounds) after a short warm-up. Same invariants as the full
run: no error but 503 queue-full, no slot in use at the end (/api/ps and /metrics), no RSS growth after every round
(a leak's trend, not a step: the first rounds warm allocators and caches), no runner restart, the service still
answering. Nothing here depends on speed: a slow machine serves fewer requests per round, and a hang is a request
unanswered for 10 minutes. The 5-minute figures come from `bench/soak.py`."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from repo_paths import ROOT

SOAK = ROOT / "bench" / "soak.py"


@pytest.fixture(scope="module")
def soak():
    spec = importlib.util.spec_from_file_location("strata_bench_soak", SOAK)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def test_short_soak_holds_every_invariant(soak, smollm2_path):
    cfg = soak.SoakConfig(seconds=20, warmup_seconds=6, clients=32, max_tokens=8, threads=2, rounds=5,
                          request_timeout=600, drain_timeout=600)
    s = soak.run_soak(cfg, log=lambda m: None)
    print("\n" + soak.report(s))
    assert s["requests_done"] > 0 and s["disconnects_total"] > 0      # it really ran, and clients went away
    assert s["errors_total"] == 0 and not s["warmup_errors"], s["errors"] or s["warmup_errors"]
    assert s["slots_busy_end_ps"] == 0 and s["queued_end_ps"] == 0 and s["slots_busy_end_metrics"] == 0
    assert len(s["service_rss_rounds"]) == 6 and not soak.leaking(s["service_rss_rounds"], cfg), soak.report(s)
    assert s["runner_restarts"] == 0 and s["runner_pid_start"] == s["runner_pid_end"]
    assert s["alive_after"] and s["service_exit_code"] == 0
    assert s["failures"] == []


def test_invariant_checks_catch_each_failure(soak):
    """check() is what makes the soak fail: each broken invariant is named (pure function, no service)."""
    cfg = soak.SoakConfig()
    good = {"errors_total": 0, "errors": {}, "warmup_errors": {}, "requests_done": 10, "disconnects_total": 3,
            "slots_busy_end_ps": 0, "queued_end_ps": 0, "slots_busy_end_metrics": 0.0, "service_rss_growth": 0.01,
            "service_rss_rounds": [100 << 20, 104 << 20, 105 << 20, 105 << 20, 106 << 20, 105 << 20],
            "runner_restarts": 0, "runner_pid_start": 7, "runner_pid_end": 7, "alive_after": True}
    assert soak.check(good, cfg) == []
    for change, word in [({"errors_total": 1, "errors": {"chat: HTTP 500": 1}}, "errors"),
                         ({"requests_done": 0}, "no request"),
                         ({"disconnects_total": 0}, "disconnected"),
                         ({"slots_busy_end_ps": 1}, "slots"),
                         ({"slots_busy_end_metrics": 2.0}, "/metrics"),
                         ({"service_rss_rounds": [100 << 20, 101 << 20, 102 << 20, 104 << 20, 107 << 20,
                                                  110 << 20]}, "a leak"),
                         ({"service_rss_rounds": [100 << 20, None]}, "RSS could not"),
                         ({"runner_restarts": 1}, "restarted"),
                         ({"runner_pid_end": 8}, "restarted"),
                         ({"alive_after": False}, "did not answer")]:
        failures = soak.check({**good, **change}, cfg)
        assert len(failures) == 1 and word in failures[0], (change, failures)

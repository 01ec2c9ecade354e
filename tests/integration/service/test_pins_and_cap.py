"""Pins, per-model keep-alive and the memory cap on live services with real runners: under a STRATA_MAX_MEMORY
that holds one of two models, a pinned model survives the load of the other (a 503 naming the pin), unpinned it is
evicted for it; /api/pin's refusals name the field; pins outlive the service (the store keeps them) and go with a
deleted model. The scheduler's rules with fakes: tests/unit/service/scheduling/test_pins.py; the cap in the
planner: tests/unit/engine/planner/test_memory_cap.py."""
from __future__ import annotations

import httpx
import pytest

from gguf_variants import write_llama

CTX = {"num_ctx": 512}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("pin-models")
    return {"a:test": write_llama(d / "a.gguf", n_layer=2, seed=1), "b:test": write_llama(d / "b.gguf", n_layer=2,
                                                                                         seed=2)}


def _total(dp: dict) -> int:
    """A device plan's bytes (DevicePlan.total, from its JSON)."""
    return sum(dp["weights"].values()) + sum(dp[k] for k in ("kv", "compute", "output", "output_reserve",
                                                             "checkpoints", "projector", "draft"))


def _create(c: httpx.Client, models) -> None:
    for name, path in models.items():
        r = c.post("/api/create", json={"model": name, "from": str(path), "parameters": CTX, "stream": False})
        assert r.status_code == 200, r.text


def test_a_pinned_model_survives_a_load_that_needs_its_memory(live_service, models):
    # what each model needs, planned on an uncapped service (nothing loaded)
    with live_service.running(n_threads=1, num_parallel=1) as probe, httpx.Client(base_url=probe.url,
                                                                                   timeout=300) as c:
        _create(c, models)
        need = {}
        for name in models:
            lay = c.post("/api/layout", json={"model": name, "options": CTX}).json()
            need[name] = sum(_total(d) for d in lay["layout"]["devices"])
    cap = max(need.values()) * 3 // 2                       # room for one of them, not both
    svc = live_service(n_threads=1, num_parallel=1, keep_alive="10m", max_memory=cap)
    with httpx.Client(base_url=svc.url, timeout=300) as c:
        _create(c, models)
        assert c.get("/api/devices").json()["memory_cap"] == cap
        assert c.post("/api/pin", json={"model": "a:test", "pinned": True}).json() == {
            "name": "a:test", "pinned": True, "keep_alive": None}
        r = c.post("/api/generate", json={"model": "a:test", "prompt": "hi", "stream": False,
                                          "options": {"num_predict": 2}, "keep_alive": 0})
        assert r.status_code == 200, r.text                 # a request's keep_alive 0 does not unload a pin
        ps = c.get("/api/ps").json()["models"]
        assert [m["name"] for m in ps] == ["a:test"] and ps[0]["strata"]["pinned"]
        assert ps[0]["expires_at"].startswith("2318")
        r = c.post("/api/generate", json={"model": "b:test", "prompt": "hi", "stream": False,
                                          "options": {"num_predict": 2}})
        assert r.status_code == 503, r.text
        assert "pinned model a:test" in r.json()["error"]
        assert [m["name"] for m in c.get("/api/ps").json()["models"] if m["strata"]["state"] == "loaded"] == [
            "a:test"]
        c.post("/api/pin", json={"model": "a:test", "pinned": False})
        r = c.post("/api/generate", json={"model": "b:test", "prompt": "hi", "stream": False,
                                          "options": {"num_predict": 2}})
        assert r.status_code == 200, r.text                 # unpinned: evicted for b, as any idle model
        loaded = [m for m in c.get("/api/ps").json()["models"] if m["strata"]["state"] == "loaded"]
        assert [m["name"] for m in loaded] == ["b:test"] and loaded[0]["size"] <= cap


def test_pin_settings_are_checked_kept_and_go_with_the_model(live_service, models):
    svc = live_service(n_threads=1)
    home = svc.home
    with httpx.Client(base_url=svc.url, timeout=120) as c:
        _create(c, models)
        for body, field in (({"model": "a:test", "keep_alive": "soon"}, "keep_alive"),
                            ({"model": "a:test", "pinned": "yes"}, "pinned"),
                            ({"pinned": True}, "model")):
            r = c.post("/api/pin", json=body)
            assert r.status_code == 400 and field in r.json()["error"], (body, r.text)
        assert c.post("/api/pin", json={"model": "nope:test", "pinned": True}).status_code == 404
        c.post("/api/pin", json={"model": "a:test", "keep_alive": "1h"})
        c.post("/api/pin", json={"model": "b:test", "pinned": True})
        assert c.post("/api/pin", json={"model": "a:test", "pinned": True}).json() == {
            "name": "a:test", "pinned": True, "keep_alive": "1h"}          # a field left out keeps its value
    svc.stop()
    again = live_service(n_threads=1, home=home)                            # the same store: the pins are kept
    with httpx.Client(base_url=again.url, timeout=120) as c:
        assert c.get("/api/pin").json()["models"] == [{"name": "a:test", "pinned": True, "keep_alive": "1h"},
                                                      {"name": "b:test", "pinned": True, "keep_alive": None}]
        assert c.request("DELETE", "/api/delete", json={"model": "b:test"}).status_code == 200
        assert [m["name"] for m in c.get("/api/pin").json()["models"]] == ["a:test"]

"""Pins and per-model keep-alive (Scheduler.settings: `strata pin`, POST /api/pin, the model manager) with the
scheduler's collaborators injected as fakes (test_scheduler_units.World): a pinned model survives a load that
needs its memory (that load is a 503 naming the pin, or waits for an unpinned busy model), never expires whatever
its requests ask, and an explicit unload still ends it; a model's own keep-alive is the default of requests that
set none."""
from __future__ import annotations

import asyncio

import pytest
from test_scheduler_units import MiB, World, run, until

from app.service.generation.keep_alive import DEFAULT, FOREVER
from app.service.http.errors import ApiError
from app.service.scheduling.loaded_model import ModelSettings


def test_a_pinned_model_survives_a_load_that_needs_its_memory():
    async def main():
        w = World({"pinned": 60 * MiB, "other": 60 * MiB})
        s = w.scheduler
        s.set_settings("pinned", ModelSettings(pinned=True))
        await w.use("pinned", keep_alive=0.01)           # its request's keep_alive does not apply to a pin
        assert s.models["pinned"].expires_at is None and s.models["pinned"].pinned
        with pytest.raises(ApiError) as e:
            await w.use("other")                          # 120 MiB do not fit in 100, and the pin stays
        assert e.value.status == 503 and e.value.code == "pinned_models"
        assert "pinned model pinned" in e.value.message and "strata pin --off" in e.value.message
        assert set(s.models) == {"pinned"} and not w.events.of("unloaded")
        s.set_settings("pinned", ModelSettings(pinned=False))    # unpinned: now it is evicted like any other
        await w.use("other")
        assert set(s.models) == {"other"}
        assert w.events.of("unloaded")[0] == {"model": "pinned", "reason": "evicted for other"}
        await s.close()
    run(main())


def test_an_unpinned_model_goes_first_and_a_model_that_fits_nowhere_is_still_a_507():
    async def main():
        w = World({"pinned": 40 * MiB, "idle": 40 * MiB, "new": 40 * MiB, "huge": 500 * MiB})
        s = w.scheduler
        s.set_settings("pinned", ModelSettings(pinned=True))
        await w.use("pinned")
        await w.use("idle")
        await w.use("pinned")                             # the pin is the least recently used, yet it stays
        await w.use("new")
        assert set(s.models) == {"pinned", "new"}
        assert [d["model"] for d in w.events.of("unloaded")] == ["idle"]
        with pytest.raises(ApiError) as e:                # would not fit even without the pin: the size's 507
            await w.use("huge")
        assert e.value.status == 507
        assert "pinned" in s.models
        await s.close()
    run(main())


def test_a_load_waits_for_a_busy_unpinned_model_beside_a_pin():
    async def main():
        w = World({"pinned": 40 * MiB, "busy": 40 * MiB, "new": 40 * MiB})
        s = w.scheduler
        s.set_settings("pinned", ModelSettings(pinned=True))
        await w.use("pinned")
        release = asyncio.Event()

        async def hold():
            async with s.lease("busy", keep_alive=FOREVER):
                await release.wait()

        holder = asyncio.create_task(hold())
        await until(lambda: "busy" in s.models and s.models["busy"].slots_busy == 1, "busy holds its slot")
        new = asyncio.create_task(w.use("new"))
        await until(lambda: "new" in s.models, "new admitted")
        for _ in range(50):
            await asyncio.sleep(0)
        assert s.models["new"].state == "loading" and not w.events.of("unloaded")   # waits, no 503
        release.set()
        await holder
        await new
        assert set(s.models) == {"pinned", "new"}
        assert [d["model"] for d in w.events.of("unloaded")] == ["busy"]
        await s.close()
    run(main())


def test_max_loaded_models_full_of_pins_is_a_503_naming_them():
    async def main():
        w = World({"a": MiB, "b": MiB}, max_loaded_models=1)
        s = w.scheduler
        s.set_settings("a", ModelSettings(pinned=True))
        await w.use("a")
        with pytest.raises(ApiError) as e:
            await w.use("b")
        assert e.value.status == 503 and e.value.code == "pinned_models" and "'b'" in e.value.message
        await s.close()
    run(main())


def test_an_explicit_unload_still_ends_a_pinned_model():
    async def main():
        w = World({"a": MiB})
        s = w.scheduler
        s.set_settings("a", ModelSettings(pinned=True))
        await w.use("a")
        assert s.request_unload("a")
        await until(lambda: "a" not in s.models, "the explicit unload")
        assert w.events.of("unloaded")[0]["reason"] == "keep_alive expired"
        await s.close()
    run(main())


def test_a_models_own_keep_alive_is_the_default_of_requests_that_set_none():
    async def main():
        w = World({"own": MiB, "server": MiB})
        s = w.scheduler
        s.set_settings("own", ModelSettings(keep_alive="1h"))
        await w.use("own", keep_alive=DEFAULT)
        await w.use("server", keep_alive=DEFAULT)
        assert s.models["own"].keep_alive == 3600.0 and s.models["server"].keep_alive == 300.0
        await w.use("own", keep_alive=0.01)               # a request's own keep_alive still wins
        await until(lambda: "own" not in s.models, "the request's keep_alive")
        # set on a loaded model, a keep-alive applies at once: its expiry runs from now
        s.set_settings("server", ModelSettings(keep_alive="10ms"))
        await until(lambda: "server" not in s.models, "the new default keep-alive")
        assert s.keep_alive_for(DEFAULT, "server") == 0.01
        s.set_settings("server", ModelSettings())         # nothing set: the entry goes, the server's applies
        assert "server" not in s.settings and s.keep_alive_for(DEFAULT, "server") == 300.0
        await s.close()
    run(main())

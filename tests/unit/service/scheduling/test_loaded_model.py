"""A loaded model's state as the scheduler keeps it (app/service/scheduling/loaded_model.py), in-process with a
real plan of the synthetic dense llama: its slots, what it reports (sizes from the plan, /api/strata's fields,
JSON-clean) before and after a layout exists. tests/integration/service/test_service_scheduler.py runs it live."""
from __future__ import annotations

import asyncio
import json

from app.discovery.simulated import inventory_from_dict
from app.engine.layout.types import Layout, PlanOptions
from app.engine.planner.search import plan
from app.service.scheduling.loaded_model import Lease, LoadedModel


def loaded(info, options: PlanOptions) -> LoadedModel:
    async def make():
        return LoadedModel("dense:latest", None, info, options)
    return asyncio.run(make())


def test_before_its_plan_it_reports_nothing_planned(dense_info):
    m = loaded(dense_info, PlanOptions(num_parallel=3))
    assert (m.state, m.slots_total, m.slots_busy, m.queued) == ("loading", 3, 0, 0)
    assert (m.predicted, m.predicted_kinds, m.size, m.size_vram) == ({}, {}, 0, 0)
    info = m.strata_info()
    assert info["layout"] is None and info["context"] == {} and info["draft"] is None and info["pid"] is None
    assert info["prompt_cache"] == {"bytes": 0, "limit": 0, "entries": 0, "checkpoint_bytes": 0, "checkpoints": 0,
                                    "checkpoint_limit": 0, "checkpoint_hits": 0, "checkpoint_misses": 0,
                                    "disk": {"bytes": 0, "entries": 0, "limit": 0, "hits": 0, "hit_tokens": 0,
                                             "restore_seconds": 0.0, "writes": 0, "refused": 0}}
    json.dumps(info)


def test_sizes_come_from_the_plan_per_device(dense_info):
    inv = inventory_from_dict({"devices": [{"id": "CUDA0", "total": "8 GiB", "backend": "CUDA"}],
                               "host_ram_total": "16 GiB", "cpu_cores": 4})
    o = PlanOptions(num_ctx=1024, num_parallel=2)
    m = loaded(dense_info, o)
    m.layout = plan(dense_info, inv, o)
    totals = {d.device_id: d.total for d in m.layout.devices if d.total}
    assert m.predicted == totals and "CUDA0" in totals
    assert m.size == sum(totals.values()) and m.size_vram == totals["CUDA0"]
    assert set(m.predicted_kinds) <= {d.device_id for d in m.layout.devices}
    info = json.loads(json.dumps(m.strata_info()))
    assert Layout.from_dict(info["layout"]) == m.layout                 # the layout as /api/strata shows it
    assert info["predicted"] == totals and info["slots_total"] == 2


def test_a_lease_reaches_the_models_runner(dense_info):
    m = loaded(dense_info, PlanOptions())
    m.client = object()
    assert Lease(m, load_wait=0.5, queue_wait=0.0).client is m.client

"""The layout planner's entry: where every block of a model goes, and the exact llama.cpp parameters that put it
there. `plan(info, inventory, options, compute=None) -> Layout` validates the options, runs the placement search
(`placement.py`) and, when nothing fits, adds suggestions that were checked by planning again (`suggest.py`).
A pure function (~1-2 ms): the measured variant (dry run first) is `options.plan_layout`.
"""
from __future__ import annotations

from dataclasses import replace

from app.discovery.inventory import Inventory
from app.engine.gguf.model_info import ModelInfo
from app.engine.planner.placement import place
from app.engine.planner.suggest import suggestions
from app.engine.layout.types import Layout, PlanOptions
from app.engine.planner.validate import validate


def plan(info: ModelInfo, inventory: Inventory, options: PlanOptions, compute: dict[str, int] | None = None,
         kv_measured: tuple[int, int] | None = None) -> Layout:
    """Plan where everything goes. `compute`: measured compute-buffer bytes per device id (from a dry run;
    key "*" = any GPU not listed); missing devices use an estimate. `kv_measured`: (bytes, log lines) of the caches
    the dry run saw llama.cpp build (used where the KV shape's prediction disagrees). Raises ValueError naming a
    bad option."""
    validate(info, inventory, options)
    layout = place(info, inventory, options, compute, kv_measured)
    if not layout.fits:
        layout = replace(layout, suggestions=suggestions(info, inventory, options, compute))
    return layout

"""The scheduler's door: everything the rest of the service asks of it, typed. `ServiceHost` is what the routes
hold (appkeys.SCHEDULER): generation's `ModelHost` (generation/host.py: find a model, read its facts, lease it,
grow its context) and the model management the routes do (pins and default keep-alives, unloads, the loaded models'
view, the devices, the what-if plan, a draft model's check). `Scheduler` implements it: its leases, unloads and
settings in scheduler.py, and here (`ModelDoor`, which it inherits) the questions about models that need no lease,
answered by the loader (loader.py) and the memory in use. Nothing outside scheduling/ reaches past the door
(`scheduler.loader`, `scheduler.models`: tests/unit/test_architecture.py).
Covered by tests/unit/service/scheduling/test_scheduler_units.py (fakes) and the service's integration tests."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from app.discovery.inventory import Inventory
from app.engine.gguf.model_info import ModelInfo
from app.engine.gguf.projector import ProjectorInfo
from app.engine.layout.types import Layout

from ..generation.host import ModelEntry, ModelHost
from ..generation.keep_alive import KeepAlive
from ..generation.options import RequestOptions
from ..store.records import ModelRecord
from . import fit
from .loaded_model import LoadedModel, ModelSettings
from .loader import Loader


class ServiceHost(ModelHost, Protocol):
    async def resolve(self, name: str) -> ModelRecord:
        """The store's record for a model name (all of it: the routes show more than generation reads)."""
        ...

    @property
    def settings(self) -> Mapping[str, ModelSettings]:
        """Per model (the store's name): the pin and default keep_alive a user set."""
        ...

    def set_settings(self, name: str, settings: ModelSettings) -> None: ...

    def keep_alive_for(self, keep_alive: KeepAlive, name: str | None = None) -> float | None:
        """How long a model stays after a request with `keep_alive` (None: forever)."""
        ...

    def request_unload(self, name: str) -> bool:
        """keep_alive 0: unload now if idle, else when its requests end. False when it is not loaded."""
        ...

    async def unload(self, name: str, reason: str = "") -> bool:
        """Unload now (its runner ends). False when it is not loaded."""
        ...

    def snapshot(self) -> list[LoadedModel]:
        """The loaded (and loading) models, then those whose last load failed: for /api/ps and the metrics."""
        ...

    def used_bytes(self, exclude: str | None = None) -> dict[str, int]: ...

    def effective_inventory(self) -> Inventory | None: ...

    async def inventory(self, refresh: bool = False) -> Inventory:
        """The devices (discovered once; `refresh`: again now)."""
        ...

    async def plan_what_if(self, record: ModelRecord, ro: RequestOptions, num_parallel: int | None,
                           inventory: Inventory, used: dict[str, int]) -> Layout:
        """The layout a load of `record` with `ro` would get on `inventory` less `used`, loading nothing."""
        ...

    async def draft_for(self, target_path, target_name: str, draft: str) -> tuple:
        """(record, ModelInfo) of the model `draft` as the draft model of the GGUF `target_path`; a 400 naming
        `draft` when it cannot draft for it."""
        ...


class ModelDoor:
    """The door's questions about models that need no lease, answered by the loader and the models in memory;
    `Scheduler` inherits them (and sets `loader` and `models`)."""
    loader: Loader
    models: dict[str, LoadedModel]

    async def resolve(self, name: str) -> ModelRecord:
        return await self.loader.resolve(name)

    async def model_info(self, path: str) -> ModelInfo:
        return await self.loader.model_info(path)

    async def read_projector(self, path: str) -> ProjectorInfo:
        return await self.loader.read_projector(path)

    async def context_preview(self, record: ModelEntry, info: ModelInfo) -> dict:
        """How `record`'s context is (loaded) or would be chosen now, on what the other loaded models leave free
        (Loader.context_preview), for /api/show and the listings."""
        return await self.loader.context_preview(record, info, self.models.get(record.name),
                                                 self.used_bytes(record.name))

    async def draft_for(self, target_path, target_name: str, draft: str) -> tuple:
        return await self.loader.draft_for(target_path, target_name, draft)

    async def inventory(self, refresh: bool = False) -> Inventory:
        return await (self.loader.refresh_inventory() if refresh else self.loader.get_inventory())

    async def plan_what_if(self, record: ModelRecord, ro: RequestOptions, num_parallel: int | None,
                           inventory: Inventory, used: dict[str, int]) -> Layout:
        """/api/layout's plan, by a load's own path (Loader.plan_load: options, context, the measured plan,
        projector, draft model, adapters), so it cannot differ from what a load does (ValueError: options the
        planner refuses)."""
        info = await self.loader.read_info(record)
        model = self.loader.new_model(record, info, ro, num_parallel)
        await self.loader.read_companions(model)
        _, layout = await self.loader.plan_load(model, model.options, model.asked_ctx, inventory, used)
        return layout

    # ---- memory in use --------------------------------------------------------------------------------------

    def used_bytes(self, exclude: str | None = None) -> dict[str, int]:
        """Each device's bytes the loaded models hold (`exclude`: but this one's)."""
        return fit.used_bytes(self.models.values(), exclude)

    def effective_inventory(self) -> Inventory | None:
        """The devices as the loaded models leave them (None before the first discovery)."""
        inventory = self.loader.inventory
        return fit.remaining(inventory, self.used_bytes()) if inventory else None

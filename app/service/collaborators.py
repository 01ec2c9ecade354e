"""What the model scheduler needs from the rest of the program, injected (as Ollama's sched.go injects
`loadFn`/`getGpuFn`): find a model, read its GGUF and projector facts, compare a draft model's vocabulary with its
target's, see the devices, plan a layout and its context, start a runner. Everything of the scheduler that touches a file, a device or a process goes through here
(scheduling/loader.py calls them); what it imports from the engine besides is pure (scheduling/fit.py).
`live(config, store)` wires the real ones; the scheduler's unit tests pass fakes that answer in microseconds."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any, Awaitable, Callable

from app.discovery import discover
from app.discovery.inventory import Inventory
from app.engine.client import RunnerClient
from app.engine.gguf.model_info import read_model_info
from app.engine.gguf.projector import ProjectorInfo, read_projector
from app.engine.gguf.vocab_match import vocab_mismatch
from app.engine.planner.context import ContextChoice, context_for
from app.engine.planner.options import plan_layout
from app.engine.layout.types import Layout, PlanOptions

from .config import ServiceConfig
from .http.errors import ApiError
from .store.proxy import AsyncStore, store_error, with_digest


async def read_projector_in_thread(path: str) -> ProjectorInfo:
    return await asyncio.to_thread(read_projector, path)


async def vocab_mismatch_in_thread(target_path, draft_path) -> str | None:
    return await asyncio.to_thread(vocab_mismatch, target_path, draft_path)


@dataclass
class Collaborators:
    resolve: Callable[[str], Awaitable[Any]]          # model name -> store record (ApiError 404/400)
    model_info: Callable[[Any], Awaitable[Any]]       # GGUF path -> ModelInfo (GGUFError, OSError)
    discover: Callable[[], Awaitable[Inventory]]      # the devices as they are now
    plan: Callable[[Any, PlanOptions, Inventory], Awaitable[Layout]]   # ValueError: options the planner refuses
    # (layout, model name) -> a runner not yet started: `await start(on_progress)` loads it (its
    # result has `actual`), `close()`, `add_exit_callback(cb)`, `pid`. Made before it starts so that an unload
    # during the load can close it.
    new_runner: Callable[[Layout, str], Any]
    with_digest: Callable[[Any], Awaitable[Any]]      # the record with its sha256 (for /api/ps), best effort
    # (info, free inventory, options, STRATA_NUM_CTX, asked num_ctx or None, measured compute or None) -> the
    # load's context and why (planner.context.context_for; a pure estimate, run in a thread)
    choose_context: Callable[..., ContextChoice] = context_for
    # a vision projector GGUF's path -> its facts (GGUFError, OSError)
    projector_info: Callable[[str], Awaitable[ProjectorInfo]] = read_projector_in_thread
    # (target GGUF path, draft GGUF path) -> what differs between their vocabularies in words, None when the draft
    # model can draft for the target (engine/gguf/vocab_match.py; GGUFError, OSError)
    vocab_mismatch: Callable[[Any, Any], Awaitable[str | None]] = vocab_mismatch_in_thread


def live(config: ServiceConfig, store: AsyncStore) -> Collaborators:
    """The real collaborators: the store (on its thread), the GGUF reader, discovery and the measured planner
    (both in child processes, awaited from threads), runner child processes."""

    async def resolve(name: str):
        try:
            return await store.get(name)
        except Exception as e:  # noqa: BLE001 - mapped to 404/400/500 by type
            raise store_error(e, name) from None

    async def model_info(path):
        return await asyncio.to_thread(read_model_info, path)      # cached by the reader (file version key)

    async def discover_devices() -> Inventory:
        try:
            return await asyncio.to_thread(discover, config.devices_json)
        except Exception as e:  # noqa: BLE001 - e.g. a malformed STRATA_DEVICES file: say which and why
            where = f" (STRATA_DEVICES={config.devices_json})" if config.devices_json else ""
            raise ApiError(500, f"device discovery failed{where}: {e}", code="discovery_failed") from None

    async def plan(info, options: PlanOptions, inventory: Inventory) -> Layout:
        return await asyncio.to_thread(plan_layout, info, inventory, options)

    def new_runner(layout: Layout, name: str) -> RunnerClient:
        cache_mib = config.prompt_cache_mib                 # -1: the engine's default share of available RAM
        # the prompt cache on disk lives beside the store's database (its data dir), shared by every model
        settings = replace(config.runner, disk_cache_dir=str(store.data_dir / "prompt-cache"))
        return RunnerClient(layout, model_name=name,       # threads: layout.options.n_threads
                            prompt_cache_bytes=None if cache_mib < 0 else cache_mib << 20,
                            watch=config.runner_watch, settings=settings)

    async def digest(record):
        return await with_digest(store, record)

    return Collaborators(resolve=resolve, model_info=model_info, discover=discover_devices, plan=plan,
                         new_runner=new_runner, with_digest=digest)

"""What generation asks of the model scheduler, named here as Protocols: the one typed door from a request to its
model. `ModelHost` finds a model and reads its facts, leases it (loaded, a slot taken) and grows its context; the
scheduler implements it (scheduling/door.py: `Scheduler` is a `ServiceHost`, this door and the model management
the routes do), and the app hands it to every route (appkeys.SCHEDULER). Generation imports nothing of scheduling/
nor of the store: a record, a leased model and a lease are what it reads of them (docs/architecture.md, "The
service's rooms").
Covered by tests/integration/test_types.py (mypy: `Scheduler` implements it, every use is checked against it) and
tests/unit/test_architecture.py (nothing outside scheduling/ reaches past it: `scheduler.loader`, `.models`)."""
from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol

from app.engine.client import RunnerClient
from app.engine.gguf.model_info import ModelInfo
from app.engine.gguf.projector import ProjectorInfo
from app.engine.layout.types import PlanOptions

from .keep_alive import KeepAlive
from .options import RequestOptions


class ModelEntry(Protocol):
    """What generation reads of the store's record of a model (store/records.ModelRecord)."""
    @property
    def name(self) -> str: ...                  # the store's name for it
    @property
    def path(self) -> str: ...                  # its GGUF
    @property
    def parameters(self) -> dict: ...           # its Modelfile PARAMETERs
    @property
    def template(self) -> str | None: ...       # its Modelfile TEMPLATE (an Ollama Go template)
    @property
    def system(self) -> str | None: ...         # its Modelfile SYSTEM
    @property
    def projector(self) -> str | None: ...      # its vision projector GGUF: capability "vision"


class HostedModel(Protocol):
    """What a request reads of the model it leased (scheduling/loaded_model.LoadedModel)."""
    @property
    def name(self) -> str: ...
    @property
    def options(self) -> PlanOptions: ...       # what it is loaded with (its context per sequence: num_ctx)


class HostLease(Protocol):
    """A request's hold on a loaded model and one of its slots (scheduling/loaded_model.Lease)."""
    @property
    def model(self) -> HostedModel: ...
    @property
    def client(self) -> RunnerClient: ...       # the model's runner
    @property
    def load_wait(self) -> float: ...           # seconds the request waited for the load
    @property
    def queue_wait(self) -> float: ...          # seconds it waited for a slot


class ModelHost(Protocol):
    async def resolve(self, name: str) -> ModelEntry:
        """The store's record for a model name; 404/400 ApiErrors for unknown or malformed names."""
        ...

    async def model_info(self, path: str) -> ModelInfo:
        """A GGUF's facts (GGUFError, OSError when it cannot be read)."""
        ...

    async def read_projector(self, path: str) -> ProjectorInfo:
        """A vision projector GGUF's facts (GGUFError, OSError)."""
        ...

    async def context_preview(self, record: ModelEntry, info: ModelInfo) -> dict:
        """How `record`'s context is (loaded) or would be chosen now, on what the other models leave free."""
        ...

    def lease(self, name: str, ro: RequestOptions | None = None, keep_alive: KeepAlive = ...,
              record: ModelEntry | None = None, priority: int = 0) -> AbstractAsyncContextManager[HostLease]:
        """`async with host.lease(...) as lease:` the model loaded (if it was not) and one of its slots taken;
        `record`: the model's record when the caller has just resolved it; `priority` 1: a person watches."""
        ...

    def growth_ceiling(self, model: HostedModel) -> int:
        """The largest context per sequence the leased `model` may grow to (0: it cannot grow)."""
        ...

    async def grow_context(self, model: HostedModel, needed: int, at_least: int = 0) -> bool:
        """Reload the leased `model` with a context of `needed` tokens per sequence when that fits and nothing else
        runs on it; False, and nothing changes, when it cannot. The lease stays valid."""
        ...

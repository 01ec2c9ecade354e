"""What a model can do and how much context a request gets, in one place for every listing route: Ollama's
/api/show and /api/tags (`capabilities`) and OpenAI's /v1/models (context window and capabilities, in the field
names coding agents and their providers read). See docs/architecture.md, "Model metadata".

- capabilities: Ollama's list (`completion`, `tools`, `thinking`, `insert`, `embedding` from the GGUF's chat
  template and header, `vision` when a projector is attached), in Ollama's order.
- context: the tokens per sequence a request that sets no `num_ctx` gets now: the loaded model's, else the one a
  load would choose from the free memory (the scheduler's preview; 0 when it cannot be planned).
The GGUF's ModelInfo and the projector's facts come through the model host (host.py; the scheduler's loader and
its injected collaborators behind it).
Covered by tests/integration/service/test_model_metadata.py and tests/unit/service/scheduling/test_scheduler_units.py."""
from __future__ import annotations

from dataclasses import dataclass

from app.engine.gguf.chat_facts import ChatFacts
from app.engine.gguf.model_info import ModelInfo
from app.engine.gguf.projector import ProjectorInfo

from .chat_features import facts_for
from .host import ModelEntry, ModelHost


@dataclass(frozen=True)
class ModelCard:
    capabilities: tuple[str, ...]
    context: int               # per sequence for a request without num_ctx; 0 when unknown
    context_train: int         # the GGUF's training context (0 when unreadable)
    info: ModelInfo | None     # None when the file cannot be read
    facts: ChatFacts | None
    projector: ProjectorInfo | None      # an attached vision projector's facts

    @property
    def input_modalities(self) -> list[str]:
        return ["text", "image"] if "vision" in self.capabilities else ["text"]


async def info_or_none(host: ModelHost, record: ModelEntry) -> ModelInfo | None:
    """The GGUF's ModelInfo, None when it cannot be read (a listing must not fail for one bad file)."""
    try:
        return await host.model_info(record.path)
    except Exception:  # noqa: BLE001 - an unreadable file is listed without its facts
        return None


async def projector_or_none(host: ModelHost, record: ModelEntry) -> ProjectorInfo | None:
    """The model's vision projector's facts (read through the loader's injected collaborator, as the GGUF's are),
    None without one or when unreadable."""
    projector = getattr(record, "projector", None)
    if not projector:
        return None
    try:
        return await host.read_projector(projector)
    except Exception:  # noqa: BLE001 - a projector file gone since: the load says so with its own error
        return None


def capabilities_of(info, facts, projector) -> tuple[str, ...]:
    if facts is not None:
        caps = list(facts.capabilities)
    else:
        caps = ["embedding"] if info is not None and info.is_embedding else ["completion"]
    if projector is not None and "vision" not in caps:
        caps.append("vision")
    return tuple(caps)


async def context_of(host: ModelHost, record: ModelEntry, info: ModelInfo | None) -> int:
    if info is None:
        return 0
    try:
        preview = await host.context_preview(record, info)
    except Exception:  # noqa: BLE001 - a model that cannot be planned here lists no context
        return 0
    return int(preview.get("num_ctx") or 0)


async def model_card(host: ModelHost, record: ModelEntry, with_context: bool = True) -> ModelCard:
    info = await info_or_none(host, record)
    facts = await facts_for(record.path) if info is not None else None
    projector = await projector_or_none(host, record)
    context = await context_of(host, record, info) if with_context else 0
    return ModelCard(capabilities=capabilities_of(info, facts, projector), context=context,
                     context_train=int(getattr(info, "context_length", 0) or 0), info=info, facts=facts,
                     projector=projector)

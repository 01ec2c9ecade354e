"""What the model store answers with and refuses with: `ModelRecord` (one name and its file, settings and source)
and the store's errors. Plain values; model_store.py makes them. Covered by tests/unit/service/store/test_store.py."""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field


class StoreError(Exception):
    """A store request was refused; the message says why."""


class ModelNotFound(StoreError, LookupError):
    pass


class ReadOnlyModel(StoreError):
    pass


@dataclass(frozen=True)
class ModelRecord:
    name: str
    path: str
    size: int
    sha256: str | None               # None until computed (store.sha256(name) computes and caches it)
    modified_at: float               # unix time
    source: str                      # "store" | "builtin" | "ollama" | "lmstudio" | "huggingface"
    read_only: bool
    parameters: dict = field(default_factory=dict)
    template: str | None = None
    system: str | None = None
    origin: str | None = None        # import source path, or where an external model was found
    license: str | None = None
    adapters: tuple[str, ...] = ()   # LoRA adapter GGUFs applied on load
    manifest: str | None = field(default=None, repr=False)   # a registry pull's manifest (JSON text)
    projector: str | None = None     # the vision projector GGUF (mmproj) loaded beside it: capability "vision"

    @property
    def model(self) -> str:
        return self.name.rpartition(":")[0]

    @property
    def tag(self) -> str:
        return self.name.rpartition(":")[2]

    @property
    def manifest_digest(self) -> str | None:
        """What Ollama lists as `digest` for a pulled model: the sha256 of its manifest as the registry sent it."""
        return hashlib.sha256(self.manifest.encode()).hexdigest() if self.manifest else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["manifest_digest"] = self.manifest_digest      # the manifest itself stays out of listings
        del d["manifest"]
        return d

"""Plain data behind the model manager (no Qt): one row per model from /api/tags + /api/show + /api/ps, and the
progress of an import or a pull from their NDJSON streams.

The pull stream is Ollama's, exactly: {"status": "pulling manifest"}, then per layer {"status": "pulling
<12 hex>", "digest": "sha256:...", "total": N, "completed": M} (repeated as bytes arrive), then "verifying sha256
digest", "writing manifest", "success"; an {"error": ...} line ends it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from app.format import format_bytes, format_duration

SOURCE_LABELS = {"store": "Strata store", "builtin": "Built-in", "ollama": "Ollama", "lmstudio": "LM Studio",
                 "huggingface": "Hugging Face cache"}
APP_NAMES = {"ollama": "Ollama", "lmstudio": "LM Studio", "huggingface": "the Hugging Face cache (huggingface-cli)"}


@dataclass
class ModelRow:
    name: str
    size: int = 0
    quantization: str = ""
    architecture: str = ""
    parameters: str = ""            # "134.52M" (details.parameter_size), exact count in `parameter_count`
    parameter_count: int = 0
    capabilities: tuple[str, ...] = ()
    source: str = "store"
    read_only: bool = False
    path: str = ""
    digest: str = ""
    state: str = ""                 # "" | "loading" | "loaded" | "failed"
    pinned: bool = False            # kept loaded, never unloaded for another model (/api/pin)
    keep_alive: str = ""            # its own default keep-alive ("" = the server's)
    until: str = ""                 # loaded: when it unloads ("Forever", "in 4m 10s"), from /api/ps
    sampling: str = ""              # the sampler values a request that sets none gets, where not the engine's

    @property
    def keep_alive_label(self) -> str:
        return self.keep_alive or "server default"

    @property
    def source_label(self) -> str:
        return SOURCE_LABELS.get(self.source, self.source)

    def why_read_only(self) -> str:
        """Why this model cannot be renamed or removed here ("" when it can)."""
        if not self.read_only:
            return ""
        if self.source == "builtin":
            return (f"{self.name} is the built-in model: it ships with Strata and cannot be renamed or removed. "
                    "Copy it to a new name to give it your own settings.")
        owner = APP_NAMES.get(self.source, self.source)
        return (f"{self.name} belongs to {owner}: Strata only reads it from that app's folder ({self.path}) and "
                f"never changes it. Remove it with {owner}, or turn that folder off in Settings; Copy makes a "
                "name of your own for it.")


def until_text(expires_at: str, now: datetime | None = None) -> str:
    """/api/ps's expires_at as a person reads it: "Forever" (a pin, keep-alive -1), "in 4m 10s", "now"."""
    try:
        t = datetime.fromisoformat((expires_at or "").replace("Z", "+00:00"))
    except ValueError:
        return ""
    secs = (t - (now or datetime.now(timezone.utc))).total_seconds()
    if secs > 3600 * 24 * 365:
        return "Forever"
    return f"in {format_duration(secs)}" if secs > 0 else "now"


SAMPLING_SOURCES = {"gguf": "from the GGUF", "modelfile": "Modelfile"}


def sampling_text(sampling: dict | None) -> str:
    """/api/show's strata.sampling as a line: "temperature 0.6 (from the GGUF), top_k 20 (Modelfile)"; the values
    that are the engine's own defaults are left out ("" when all are)."""
    return ", ".join(f"{k} {v.get('value')} ({SAMPLING_SOURCES.get(v.get('source'), v.get('source'))})"
                     for k, v in (sampling or {}).items() if v.get("source") not in (None, "default"))


def model_rows(tags: list[dict], ps: list[dict], shown: dict[str, dict], progress: dict[str, float],
               pins: dict[str, dict] | None = None) -> list[ModelRow]:
    """Rows for the manager's table. `shown`: /api/show answers by name (capabilities and the exact parameter
    count come from there; a model not shown yet just lacks them); `pins`: /api/pin's settings by name."""
    running = {(m.get("name") or m.get("model")): m for m in ps}
    pins = pins or {}
    rows = []
    for t in tags:
        name = t.get("name") or t.get("model")
        details = t.get("details") or {}
        strata = t.get("strata") or {}
        show = shown.get(name) or {}
        state = ""
        if name in progress:
            state = "loading"
        elif name in running:
            state = (running[name].get("strata") or {}).get("state", "loaded")
        rows.append(ModelRow(
            name=name, size=int(t.get("size") or 0), quantization=details.get("quantization_level") or "",
            architecture=details.get("family") or "", parameters=details.get("parameter_size") or "",
            parameter_count=int((show.get("model_info") or {}).get("general.parameter_count") or 0),
            capabilities=tuple(show.get("capabilities") or ()), source=strata.get("source", "store"),
            read_only=bool(strata.get("read_only")), path=strata.get("path", ""), digest=t.get("digest") or "",
            state=state, pinned=bool((pins.get(name) or {}).get("pinned")),
            keep_alive=str((pins.get(name) or {}).get("keep_alive") or ""),
            until=until_text(running[name].get("expires_at", "")) if name in running else "",
            sampling=sampling_text((show.get("strata") or {}).get("sampling"))))
    return rows


@dataclass
class FileProgress:
    digest: str
    total: int = 0
    completed: int = 0

    @property
    def fraction(self) -> float:
        return min(1.0, self.completed / self.total) if self.total else 0.0

    def describe(self) -> str:
        short = self.digest.removeprefix("sha256:")[:12]
        return f"{short}: {format_bytes(self.completed)} of {format_bytes(self.total)}"


@dataclass
class PullProgress:
    """What a pull has said so far: the last status line and each file (layer) by digest, in order."""
    model: str
    status: str = ""
    files: dict[str, FileProgress] = field(default_factory=dict)
    error: str = ""
    success: bool = False

    def update(self, obj: dict) -> None:
        if obj.get("error"):
            self.error = str(obj["error"])
            return
        self.status = str(obj.get("status") or self.status)
        digest = obj.get("digest")
        if digest:
            f = self.files.setdefault(digest, FileProgress(digest))
            f.total = int(obj.get("total") or f.total)
            f.completed = int(obj.get("completed") or f.completed)
        if self.status == "success":
            self.success = True

    @property
    def fraction(self) -> float:
        total = sum(f.total for f in self.files.values())
        return sum(f.completed for f in self.files.values()) / total if total else 0.0


@dataclass
class ImportProgress:
    """An import's state from /api/import's stream: {"status": "hashing"|"copying", "completed", "total"}."""
    path: str
    phase: str = "starting"
    completed: int = 0
    total: int = 0
    model: str = ""

    def update(self, obj: dict) -> None:
        self.phase = str(obj.get("status") or self.phase)
        self.completed = int(obj.get("completed") or self.completed)
        self.total = int(obj.get("total") or self.total)
        self.model = str(obj.get("model") or self.model)

    @property
    def percent(self) -> int:
        return int(100 * self.completed / self.total) if self.total else 0

    def describe(self) -> str:
        what = {"hashing": "Checking", "copying": "Copying"}.get(self.phase, self.phase.capitalize())
        if self.total:
            return f"{what} {format_bytes(self.completed)} of {format_bytes(self.total)}"
        return what

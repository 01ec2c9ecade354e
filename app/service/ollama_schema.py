"""Ollama wire types of the model-management routes (docs/api.md of ollama/ollama, and the `ollama` Python
package's _types.py): model details, /api/tags entries, timestamps. Generation's are in dialects/ollama/."""
from __future__ import annotations

from datetime import datetime, timezone


def now_iso(t: datetime | None = None) -> str:
    t = t or datetime.now(timezone.utc)
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


# ---- model listings ----------------------------------------------------------------------------------------

def parameter_size(n_params: int) -> str:
    if n_params >= 1e9:
        return f"{n_params / 1e9:.1f}B"
    if n_params >= 1e6:
        return f"{n_params / 1e6:.0f}M"
    return str(n_params)


def details(info, record=None) -> dict:
    if info is None:
        return {"parent_model": "", "format": "gguf", "family": "", "families": None, "parameter_size": "",
                "quantization_level": ""}
    return {
        "parent_model": "",
        "format": "gguf",
        "family": info.architecture,
        "families": [info.architecture],
        "parameter_size": parameter_size(info.n_params),
        "quantization_level": info.quantization,
    }


def digest_of(record) -> str:
    d = getattr(record, "sha256", None) or ""
    return d.removeprefix("sha256:")


def iso_time(value) -> str:
    if isinstance(value, datetime):
        return now_iso(value if value.tzinfo else value.replace(tzinfo=timezone.utc))
    if isinstance(value, (int, float)):
        return now_iso(datetime.fromtimestamp(value, timezone.utc))
    if isinstance(value, str) and value:
        return value
    return now_iso()


def tag_entry(record, info) -> dict:
    return {
        "name": record.name,
        "model": record.name,
        "modified_at": iso_time(record.modified_at),
        "size": int(record.size or 0),
        "digest": digest_of(record),
        "details": details(info, record),
        "strata": {"source": record.source, "read_only": bool(record.read_only), "path": str(record.path)},
    }

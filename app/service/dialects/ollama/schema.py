"""Ollama wire types of the model-management routes (docs/api.md of ollama/ollama, and the `ollama` Python
package's _types.py): model details, /api/tags entries, /api/show's model_info, timestamps. Generation's are in
dialects/ollama/.

Every field holds what Ollama puts there for the same GGUF: `details.parameter_size` is Ollama's HumanNumber of
the parameter count (`134.52M`, `8B`, `3.2B`), `quantization_level` the GGUF's file type name (`Q4_K_M`),
`family`/`families` its architecture, `context_length`/`embedding_length` from its header; `model_info` is the
GGUF's metadata (without `general.name` and the chat template, arrays empty unless `verbose`) with
`general.parameter_count` counted from the tensors; `digest` is, for a model pulled from an Ollama registry, the
sha256 of its manifest (what Ollama lists), else the GGUF's sha256."""
from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

from app.engine.gguf.parser import GGUFValueType, parse_gguf


def now_iso(t: datetime | None = None) -> str:
    t = t or datetime.now(timezone.utc)
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


# ---- model listings ----------------------------------------------------------------------------------------

def parameter_size(n_params: int) -> str:
    """Ollama's format.HumanNumber: whole numbers bare, else one decimal for billions and two for millions."""
    for unit, suffix, places in ((1_000_000_000, "B", 1), (1_000_000, "M", 2)):
        if n_params >= unit:
            number = n_params / unit
            return f"{number:.0f}{suffix}" if number == int(number) else f"{number:.{places}f}{suffix}"
    if n_params >= 1000:
        return f"{n_params / 1000:.0f}K"
    return str(n_params)


def details(info, record=None) -> dict:
    if info is None:
        return {"parent_model": "", "format": "gguf", "family": "", "families": None, "parameter_size": "",
                "quantization_level": ""}
    d = {
        "parent_model": "",
        "format": "gguf",
        "family": info.architecture,
        "families": [info.architecture],
        "parameter_size": parameter_size(info.n_params),
        "quantization_level": info.quantization,
    }
    if info.context_length:                  # Ollama's omitempty fields
        d["context_length"] = info.context_length
    if info.n_embd:
        d["embedding_length"] = info.n_embd
    return d


def digest_of(record) -> str:
    d = getattr(record, "manifest_digest", None) or getattr(record, "sha256", None) or ""
    return d.removeprefix("sha256:")


_HIDDEN_KEYS = ("general.name", "tokenizer.chat_template")      # Ollama leaves these out of model_info


def _json_value(kv, verbose: bool):
    if kv.vtype == GGUFValueType.ARRAY:
        if not verbose or not isinstance(kv.value, list):
            return []
        if kv.item_type == GGUFValueType.FLOAT32:
            return [float(str(np.float32(x))) for x in kv.value]
        return kv.value
    if kv.vtype == GGUFValueType.FLOAT32:           # float32 printed at float32 precision, as Go does (1e-05)
        return float(str(np.float32(kv.value)))
    return kv.value


def model_info(path, n_params: int, verbose: bool = False) -> dict:
    """/api/show's model_info for a GGUF (blocking: run it in a thread). Split models: the first part's header."""
    gf = parse_gguf(path, keep_arrays=(1 << 62) if verbose else 0)
    out = {k: _json_value(kv, verbose) for k, kv in sorted(gf.kv.items()) if k not in _HIDDEN_KEYS}
    out["general.parameter_count"] = n_params
    return out


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

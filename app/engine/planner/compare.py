"""Predicted vs actual memory, as plain data: what llama.cpp's buffer lines should say for a Layout
(`predicted_of`), and how far a real load was from it (`compare`). Used by the service (/api/ps), the GUI's
data and the `verify` command-line tool.
Covered by tests/integration/engine/test_verify_layout.py (predicted against allocated)."""
from __future__ import annotations

from app.ggml.alloc_report import KINDS

__all__ = ["KINDS", "compare", "predicted_of"]


def predicted_of(layout) -> dict[str, dict[str, int]]:
    """What llama.cpp's buffer lines should say for this Layout. "model" is what it maps or allocates for the
    weights: the weights that stay in the mapping plus the mapped slack (repacked originals, other devices'
    tensors in between) that the Layout keeps out of its totals; "repack" the CPU backend's repacked copies."""
    out = {}
    for d in layout.devices:
        rp = d.weights.get("repack", 0)
        mapped = getattr(d, "mapped", 0)
        if d.weights_total or d.kv or d.compute or d.output or getattr(d, "projector", 0) or getattr(d, "draft", 0):
            out[d.device_id] = {"model": d.weights_total - rp + mapped, "kv": d.kv, "compute": d.compute,
                                "output": d.output, "repack": rp}
            if getattr(d, "projector", 0):
                out[d.device_id]["projector"] = d.projector
            if getattr(d, "draft", 0):              # speculative decoding's draft model, all its kinds together
                out[d.device_id]["draft"] = d.draft
    return out


def compare(row: dict) -> dict[str, dict]:
    """Per device: predicted/actual totals, relative error of the total and of each kind."""
    out = {}
    devs = set(row["predicted"]) | set(row["actual"])
    for d in sorted(devs):
        p = row["predicted"].get(d, {k: 0 for k in KINDS})
        a = row["actual"].get(d, {k: 0 for k in KINDS})
        pt, at = sum(p.values()), sum(a.values())
        kinds = {}
        for k in KINDS:
            pk, ak = p.get(k, 0), a.get(k, 0)
            kinds[k] = (pk - ak) / ak if ak else (0.0 if pk == 0 else float("inf"))
        out[d] = {"predicted": pt, "actual": at, "total_err": (pt - at) / at if at else 0.0, "kind_err": kinds}
    return out

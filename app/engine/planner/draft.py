"""The draft model of speculative decoding in the plan (docs/architecture.md, "Speculative decoding"): its weights,
KV cache and compute buffer, planned before load on one device, and the llama.cpp parameters the runner loads it
with. llama.cpp's own fit leaves a draft model out (users of llama-server meet its out-of-memory at load); here its
bytes are in the device's total like the target's (`DevicePlan.draft`), so the memory view and `/api/ps` show them
and a plan that fits means both fit.

Placement: the whole draft model on the first GPU the target uses when it fits what the target leaves there (a
draft is small, and a draft split between devices would cost a transfer per drafted token), else on the CPU.
Its context mirrors the target's: the same context per sequence and slots (it holds each slot's tokens), the same
batch sizes, an f16 cache.
"""
from __future__ import annotations

from dataclasses import replace

from app.engine.gguf.model_info import ModelInfo
from app.engine.planner.memory import estimate_compute, kv_bytes_per_layer, output_buffer_bytes
from app.engine.layout.types import DraftPlan, Layout



def draft_bytes(info: ModelInfo, layout: Layout) -> tuple[int, int, int]:
    """(weights, KV cache, compute buffer + host output buffer) of `info` as the draft model of `layout`."""
    o = layout.options
    weights = info.weight_bytes
    kv = sum(kv_bytes_per_layer(info, o.num_ctx, layout.n_parallel, "f16", layout.n_batch, layout.n_ubatch,
                                flash_attn=layout.flash_attn))
    compute = (estimate_compute(info, o.num_ctx, layout.n_parallel, layout.n_batch, layout.n_ubatch,
                                layout.flash_attn) + output_buffer_bytes(info, layout.n_parallel))
    return weights, kv, compute


def with_draft(layout: Layout, info: ModelInfo, name: str = "") -> Layout:
    """`layout` with `info` as its draft model: the plan (DraftPlan, its longest draft and p_min from the options
    draft_max / draft_p_min), its bytes on the device chosen, and whether the whole still fits (a draft that fits
    nowhere makes the layout not fit, with the reason)."""
    weights, kv, compute = draft_bytes(info, layout)
    need = weights + kv + compute
    device = "CPU"
    for gpu in layout.gpu_devices:                    # the target's first GPU, when the draft fits what is left
        dev = next((d for d in layout.devices if d.device_id == gpu), None)
        if dev is not None and (not dev.budget or dev.total + need <= dev.budget):
            device = gpu
        break
    plan = DraftPlan(model_path=info.path, name=name, device_id=device, n_gpu_layers=0 if device == "CPU" else -1,
                     weights=weights, kv=kv, compute=compute, max_tokens=layout.options.draft_max,
                     p_min=layout.options.draft_p_min)
    devices = tuple(replace(d, draft=d.draft + need) if d.device_id == device else d for d in layout.devices)
    dev = next(d for d in devices if d.device_id == device)
    fits = layout.fits and (not dev.budget or dev.total <= dev.budget)
    reason = (f"draft model {name or info.path}: {weights} bytes of weights, {kv} of KV cache and ~{compute} of "
              f"compute on {device}")
    reasons = tuple(layout.reasons) + (reason,)
    suggestions = tuple(layout.suggestions)
    if layout.fits and not fits:
        reasons += (f"the draft model does not fit {device}: {dev.total} bytes planned, {dev.budget} free",)
        suggestions += ("a smaller draft model, a smaller num_ctx or num_parallel, or no draft model",)
    return replace(layout, devices=devices, draft=plan, fits=fits, reasons=reasons, suggestions=suggestions)

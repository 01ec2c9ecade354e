"""The vision projector's memory in the plan (docs/architecture.md, "Images"): its weights (exact, from the GGUF's
tensor table) and its compute buffer (estimated from the encoder's shape at its largest image), on the device mtmd
runs it on: the first GPU of the layout, else the CPU. The runner reports what clip really allocated (the
`projector` kind of the load's actual bytes), so the estimate is checked against every load.

The compute estimate follows the ViT graph at its peak (one encoder block live at a time, as ggml's allocator
reuses buffers): the input image (3 x S x S floats), the block's activations (residual, norm, Q, K, V: 5 rows of
n_embd per position), the attention scores (n_head x n_pos^2, kept by a non-flash attention), the FFN's widest row
(n_ff) and the projector's output (two rows of the text model's width per patch). It is an upper estimate for the
LLaVA-style graphs; tiled/dynamic-resolution projectors (LLaVA-1.6, MiniCPM-V, Qwen2-VL) are not modelled.
"""
from __future__ import annotations

from dataclasses import replace

from app.engine.gguf.projector import ProjectorInfo

F32 = 4


def compute_estimate(p: ProjectorInfo, n_embd_text: int) -> int:
    if not (p.image_size and p.patch_size and p.n_embd):
        return 0
    side = p.image_size // p.patch_size
    n_patches = side * side
    n_pos = n_patches + 1
    n_head, n_ff = p.n_head or 1, p.n_ff or 4 * p.n_embd
    floats = (3 * p.image_size * p.image_size + 5 * n_pos * p.n_embd + n_head * n_pos * n_pos + n_pos * n_ff
              + 2 * n_patches * n_embd_text)
    return floats * F32


def projector_device(gpu_ids) -> str:
    """Where mtmd puts the projector: the first GPU (clip takes the first GPU backend), else the CPU."""
    return gpu_ids[0] if gpu_ids else "CPU"


def projector_bytes(p: ProjectorInfo, n_embd_text: int) -> int:
    return p.weight_bytes + compute_estimate(p, n_embd_text)


def with_projector(layout, p: ProjectorInfo, n_embd_text: int):
    """`layout` with the projector's bytes on its device (DevicePlan.projector) and its path for the runner."""
    dev = projector_device(layout.gpu_devices)
    if not any(d.device_id == dev for d in layout.devices):
        dev = "CPU"
    need = projector_bytes(p, n_embd_text)
    devices = tuple(replace(d, projector=d.projector + need) if d.device_id == dev else d for d in layout.devices)
    reason = (f"vision projector {p.projector_type}: {p.weight_bytes} bytes of weights and ~"
              f"{compute_estimate(p, n_embd_text)} bytes of image compute on {dev}")
    return replace(layout, devices=devices, mmproj_path=p.path, reasons=tuple(layout.reasons) + (reason,))

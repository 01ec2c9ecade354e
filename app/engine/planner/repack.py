"""Weight repacking by llama.cpp's CPU backend, and the CPU features that decide it.

On load, the CPU backend copies some quantized weights into an interleaved layout in an extra `CPU_REPACK`
buffer (ggml/src/ggml-cpu/repack.cpp, `ggml_repack_get_optimal_repack_type`). The copy has the same size as the
original (the buffer type has no get_alloc_size: ggml_nbytes, 32-byte aligned). With mmap, the file mapping
(`CPU_Mapped`) still spans the originals: llama.cpp reports both, but the mapped pages of a repacked tensor are
read once and then only page cache the kernel can drop. So a repacked tensor costs its size ONCE in real memory.

Which tensors (llama-model-loader.cpp select_weight_buft + the repack buffer's supports_op):
  - weights used by MUL_MAT (2-D) or MUL_MAT_ID (3-D experts): never token_embd (GET_ROWS), norms, biases; the
    tied output of a model without output.weight IS a repacked copy of token_embd (a real extra allocation);
  - of a type and row count (ne[1]) that REPACK_RULES allows for this CPU's features;
  - only when the CPU buffer-type list has no GPU host buffer ahead of the extra buffers: with `devices` holding a
    CUDA/ROCm/Vulkan/SYCL/... GPU, CPU weights get that GPU's pinned host buffer, which llama.cpp swaps for the
    plain (mapped) CPU buffer under mmap, so nothing is repacked; CPU-only layouts and Metal/OpenCL ones repack.
Not modelled: the AMX (Intel Sapphire Rapids builds with AMX compiled in) and KleidiAI extra buffers, RISC-V.
"""
from __future__ import annotations

import re

ALIGN = 32      # TENSOR_ALIGNMENT of the repack buffer type

# type -> ((features all required, ne[1] must be a multiple of), ...): any satisfied entry repacks (repack.cpp
# tries them in order and falls through when the row count does not divide)
REPACK_RULES: dict[str, tuple[tuple[tuple[str, ...], int], ...]] = {
    "Q4_0": ((("AVX2",), 8), (("SVE", "MATMUL_INT8", "SVE_CNT=32"), 8), (("NEON", "MATMUL_INT8"), 4),
             (("NEON", "DOTPROD"), 4), (("VXE",), 4)),
    "Q4_K": ((("AVX2",), 8), (("NEON", "MATMUL_INT8"), 8), (("NEON", "DOTPROD"), 8)),
    "Q5_K": ((("NEON", "MATMUL_INT8"), 8), (("NEON", "DOTPROD"), 8)),
    "Q6_K": ((("NEON", "MATMUL_INT8"), 8), (("NEON", "DOTPROD"), 8)),
    "Q2_K": ((("AVX512",), 8),),
    "IQ4_NL": ((("AVX2",), 8), (("NEON", "DOTPROD"), 4)),
    "MXFP4": ((("AVX2",), 8), (("NEON", "DOTPROD"), 4)),
    "Q8_0": ((("NEON", "MATMUL_INT8"), 4), (("NEON", "DOTPROD"), 4)),
    "Q1_0": ((("NEON", "MATMUL_INT8"), 4), (("NEON", "DOTPROD"), 4)),
}

# GPU backends whose device has a host (pinned) buffer type: with one of them in `devices`, nothing is repacked
HOST_BUFFER_BACKENDS = ("CUDA", "ROCm", "HIP", "MUSA", "Vulkan", "SYCL", "CANN", "OpenVINO", "Hexagon", "SIM")

# weights read by GET_ROWS (or other non-matmul ops) even though they are 2-D
_NOT_MATMUL = re.compile(r"^(token_embd|token_types|pos_embd|per_layer_token_embd)\.|ssm_conv1d|ssm_a\b|_norm\.")
_EXPERTS = re.compile(r"_(ch|)exps\.weight$")


def pad(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def type_repacks(ggml_type: str, ne1: int, features: tuple[str, ...] | frozenset[str]) -> bool:
    """Whether repack.cpp picks a repacked layout for a weight of this type with ne[1] rows on this CPU."""
    feats = set(features)
    if "REPACK" not in feats:
        return False
    for need, multiple in REPACK_RULES.get(ggml_type.upper(), ()):
        if all(f in feats for f in need) and ne1 % multiple == 0:
            return True
    return False


def tensor_repacks(name: str, shape: tuple[int, ...], ggml_type: str, features) -> bool:
    """Whether this GGUF tensor, held by the CPU, goes to the repack buffer (MUL_MAT 2-D / MUL_MAT_ID 3-D only)."""
    if not name.endswith(".weight") or _NOT_MATMUL.search(name) or len(shape) < 2:
        return False
    dims = len(shape)
    while dims > 1 and shape[dims - 1] == 1:       # ggml_n_dims: trailing 1s do not count
        dims -= 1
    if dims != (3 if _EXPERTS.search(name) else 2):
        return False
    return type_repacks(ggml_type, shape[1], features)


def output_copy_repacks(token_embd_shape: tuple[int, ...], ggml_type: str, features) -> bool:
    """A tied output (no output.weight) on the CPU: llama.cpp creates token_embd again as the MUL_MAT output
    weight, in the repack buffer when its type repacks (a second copy, next to the GET_ROWS one)."""
    return len(token_embd_shape) == 2 and type_repacks(ggml_type, token_embd_shape[1], features)


def repack_active(features, gpu_backends: tuple[str, ...]) -> bool:
    """Whether CPU-held weights of this layout are repacked: the build has the repack buffer and no GPU in the
    layout's `devices` puts its host buffer ahead of it."""
    if "REPACK" not in set(features):
        return False
    return not any(b.upper().startswith(tuple(h.upper() for h in HOST_BUFFER_BACKENDS)) for b in gpu_backends)


# ---------------------------------------------------------------------------------------------------------------
# what the CPU holds of a placement

def cpu_file_use(groups, device_of, active: bool) -> tuple[dict[str, int], int, int]:
    """For the parts (memory.SpanGroup) `device_of(group)` puts on "CPU": (bytes by weight class that live in the
    repack buffer instead of the mapping, the repack buffer's bytes, the mapped slack). The slack is llama.cpp's
    CPU_Mapped span (first to last mapped CPU tensor in the file) minus those tensors: the originals of repacked
    tensors and other devices' tensors lying between, file pages the kernel can drop. Block tensors are keyed by
    weight class, the others by part (token_embd, output, other), like DevicePlan.weights."""
    moved: dict[str, int] = {}
    n_repack = 0
    lo, hi, held = -1, 0, 0
    for g in groups:
        if device_of(g) != "CPU":
            continue
        ext = g.extent_kept if active else g.extent_all
        if active:
            for key, n in g.moved:
                moved[key] = moved.get(key, 0) + n
            n_repack += g.n_repack
        if ext[0] >= 0:
            lo = ext[0] if lo < 0 else min(lo, ext[0])
            hi = max(hi, ext[1])
            held += ext[2]
    return moved, n_repack, (max(0, hi - lo - held) if lo >= 0 else 0)

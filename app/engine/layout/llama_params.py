"""Layout -> the exact llama.cpp parameter structs (used by the runner and the dry run alike).

`model_params(layout)` returns `(llama_model_params, keepalive)`. The struct holds raw pointers
(`devices`, `tensor_buft_overrides`, `tensor_split`) into ctypes arrays that Python does not know are referenced:
keep `keepalive` alive until `llama_model_load_from_file` has returned (docs/architecture.md, llama.cpp facts 2).
"""
from __future__ import annotations

import ctypes
from dataclasses import replace

from app.ggml import ggml_lib
from app.discovery.host import compute_threads
from app.engine.layout.context_rules import SWA_FULL
from app.engine.layout.types import Layout

# GGML_TYPE_* for KV cache types (ggml.h)
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}

LOAD_MODE_AUTO, LOAD_MODE_NONE, LOAD_MODE_MMAP = -1, 0, 1
FLASH_ATTN_AUTO, FLASH_ATTN_DISABLED, FLASH_ATTN_ENABLED = -1, 0, 1


def ggml_type(name: str) -> int:
    try:
        return GGML_TYPES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown KV cache type {name!r} (known: {', '.join(GGML_TYPES)})") from None


def flash_attn_type(flash_attn: bool | None) -> int:
    if flash_attn is None:
        return FLASH_ATTN_AUTO
    return FLASH_ATTN_ENABLED if flash_attn else FLASH_ATTN_DISABLED


def model_params(layout: Layout, *, no_alloc: bool = False, load_mode: int | None = None,
                 progress_callback=None):
    """llama_model_params realising `layout` exactly, and the list of ctypes objects to keep alive.

    - `devices`: NULL-terminated list of the layout's GPU devices (an EMPTY list, not NULL, for a CPU-only layout,
      so llama.cpp does not pick up GPUs on its own).
    - `tensor_split`: always `llama_max_devices()` floats (llama.cpp copies that many).
    - `tensor_buft_overrides`: (regex, device) pairs; "CPU" maps to the CPU buffer type from the same libggml-base
      copy libllama uses (compared by pointer).
    - `no_alloc=True` forces `load_mode = NONE` (mmap + no_alloc is a GGML_ASSERT that kills the process); else
      `load_mode`, else the layout's (`Layout.load_mode`: "read" is NONE, "mmap" llama.cpp's default, AUTO).
    - `progress_callback`: a `llama_progress_callback` object (the caller keeps it alive too; it is added to keepalive).
    """
    from llama_cpp import llama_cpp as L   # late: maps libllama; only child processes (runner, dry run) build params

    keep: list = []
    mp = L.llama_model_default_params()

    gpu_handles = [ggml_lib.dev_by_name(name) for name in layout.gpu_devices]
    devs = (ctypes.c_void_p * (len(gpu_handles) + 1))(*gpu_handles, None)
    keep.append(devs)
    mp.devices = ctypes.addressof(devs)

    n_max = max(ggml_lib.max_devices(), len(gpu_handles))
    split_vals = list(layout.tensor_split)[: len(gpu_handles)]
    split = (ctypes.c_float * n_max)(*split_vals)
    keep.append(split)
    mp.tensor_split = ctypes.cast(split, ctypes.POINTER(ctypes.c_float))

    if layout.tensor_buft_overrides:
        ov = (ggml_lib.TensorBuftOverride * (len(layout.tensor_buft_overrides) + 1))()   # last entry zeroed
        for i, (pattern, device_id) in enumerate(layout.tensor_buft_overrides):
            pat = ctypes.create_string_buffer(pattern.encode())
            keep.append(pat)
            ov[i].pattern = ctypes.cast(pat, ctypes.c_char_p)
            ov[i].buft = ggml_lib.buffer_type_for(device_id)
        keep.append(ov)
        mp.tensor_buft_overrides = ctypes.addressof(ov)

    mp.n_gpu_layers = int(layout.n_gpu_layers) if gpu_handles else 0
    mp.split_mode = int(layout.split_mode)
    mp.main_gpu = int(layout.main_gpu) if gpu_handles else 0

    if no_alloc:
        mp.no_alloc = True
        mp.load_mode = LOAD_MODE_NONE          # REQUIRED with no_alloc
    elif load_mode is not None:
        mp.load_mode = load_mode
    elif layout.load_mode == "read":
        mp.load_mode = LOAD_MODE_NONE
    if progress_callback is not None:
        keep.append(progress_callback)
        mp.progress_callback = progress_callback
    return mp, keep


def context_params(layout: Layout, n_threads: int | None = None, embedding: bool = False):
    """llama_context_params for `layout`: n_ctx (total), n_seq_max = n_parallel, batch sizes, KV types,
    flash attention and op_offload as planned. n_threads: the argument, else the plan's, else the physical cores
    (discovery.host.compute_threads)."""
    from llama_cpp import llama_cpp as L   # late: as in model_params

    if n_threads is None:
        n_threads = layout.options.n_threads or compute_threads()
    cp = L.llama_context_default_params()
    cp.n_ctx = int(layout.n_ctx)
    cp.n_batch = int(layout.n_batch)
    cp.n_ubatch = int(layout.n_ubatch)
    cp.n_seq_max = int(layout.n_parallel)
    cp.n_threads = int(n_threads)
    cp.n_threads_batch = int(n_threads)
    cp.type_k = ggml_type(layout.type_k)
    cp.type_v = ggml_type(layout.type_v)
    cp.flash_attn_type = flash_attn_type(layout.flash_attn)
    cp.op_offload = bool(layout.op_offload)
    cp.offload_kqv = True
    # Sliding-window layers keep only window + n_ubatch cells per sequence (llama-server's default; the planner sizes
    # them so, app.engine.layout.context_rules.SWA_FULL). For the prompt cache this means: those layers forget cells older
    # than the window, so a cached prefix of n tokens is reusable only while
    # llama_memory_seq_pos_min(mem, seq) <= max(0, n - n_swa); otherwise process the prompt again.
    cp.swa_full = SWA_FULL
    if embedding or layout.options.embedding:
        cp.embeddings = True
    return cp


def draft_layout(layout: Layout) -> Layout:
    """The Layout whose llama.cpp parameters (llama_params.model_params / context_params) load `layout.draft`:
    every layer on its device, no overrides, adapters or projector; the target's context shape, an f16 cache."""
    d = layout.draft
    if d is None:
        raise ValueError("the layout has no draft model")
    gpu = d.device_id != "CPU"
    return replace(layout, model_path=d.model_path, n_gpu_layers=-1 if gpu else 0, split_mode=0, main_gpu=0,
                   tensor_split=(), gpu_devices=(d.device_id,) if gpu else (), tensor_buft_overrides=(),
                   lora_adapters=(), mmproj_path=None, type_k="f16", type_v="f16", draft=None)

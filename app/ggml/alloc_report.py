"""What a real load actually allocated, read from llama.cpp's buffer-size log lines.

A real (not `no_alloc`) load prints one line per backend buffer, e.g.
    load_tensors:   CPU_Mapped model buffer size =    92.10 MiB
    llama_kv_cache:        CPU KV buffer size =    90.00 MiB
    llama_context:        CPU  output buffer size =     0.75 MiB
    sched_reserve:      CUDA0 compute buffer size =    98.25 MiB
The buffer name is a buffer-type name; it maps to a device id: "CPU", "CPU_Mapped", "CPU_REPACK" and any
"<backend>_Host" (pinned host memory) are system RAM ("CPU"); "CUDA0", "Vulkan1", "CUDA0_Split"... are that GPU.
Model buffers of the CPU backend's extra buffer types (weights repacked into an interleaved layout at load:
"CPU_REPACK", "AMX", "CPU_KLEIDIAI", ...) are their own kind, "repack" (app.engine.planner.repack). The recurrent
state of mamba/rwkv/hybrid layers ("RS buffer size") counts as "kv": it is those layers' cache.
Under `no_alloc` the model and KV lines print 0.00 (docs/architecture.md, llama.cpp facts 3): zero lines are skipped.
"""
from __future__ import annotations

import re
from typing import Iterable

MiB = 1024 * 1024
KINDS = ("model", "kv", "compute", "output", "repack")
# the CPU backend's extra (repacking) buffer types: ggml-cpu's repack, AMX, KleidiAI, SpacemiT buffers
EXTRA_BUFFER = re.compile(r"_REPACK$|^AMX$|^CPU_KLEIDIAI$|^CPU_RISCV64_SPACEMIT$")

BUFFER_LINE = re.compile(r"(\w+):\s+(\S+)\s+(model|KV|RS|compute|output) buffer size =\s+([\d.]+) MiB")
# the size of each cache llama.cpp builds, printed even under `no_alloc` (where its KV buffer line says 0.00):
#   llama_kv_cache: size =  96.00 MiB (  4096 cells,   3 layers,  4/4 seqs), K (f16): ..., V (f16): ...
#   llama_memory_recurrent: size =   1.00 MiB (     4 cells,   2 layers,  4 seqs  0 rs_seq), R (f32): ...
CACHE_SIZE_LINE = re.compile(r"(llama_kv_cache|llama_memory_recurrent): size =\s+([\d.]+) MiB")


def buffer_device(buffer_name: str, device_ids: Iterable[str] | None = None) -> str:
    """Device id ("CPU" or a ggml device name) that owns a buffer of this buffer-type name."""
    if (buffer_name.upper().startswith("CPU") or buffer_name.endswith("_Host") or "_Host" in buffer_name
            or EXTRA_BUFFER.search(buffer_name)):
        return "CPU"
    ids = set(device_ids or ())
    if buffer_name in ids:
        return buffer_name
    head = buffer_name.split("_", 1)[0]
    if head in ids or not ids:
        return head
    return buffer_name


def parse_buffer_lines(lines: Iterable[str], device_ids: Iterable[str] | None = None) -> dict[str, dict[str, int]]:
    """{device_id: {"model","kv","compute","output","repack"}} in bytes, summed over the non-zero buffer lines.
    Precision: the log prints MiB with 2 decimals (about 5 KiB)."""
    ids = list(device_ids or ())
    out: dict[str, dict[str, int]] = {}
    for line in lines:
        m = BUFFER_LINE.search(line)
        if not m:
            continue
        _func, buf, kind, mib = m.groups()
        n = round(float(mib) * MiB)
        if n == 0:
            continue
        dev = buffer_device(buf, ids)
        slot = out.setdefault(dev, {k: 0 for k in KINDS})
        kind = "kv" if kind == "RS" else kind.lower()       # recurrent state is the cache of those layers
        if kind == "model" and EXTRA_BUFFER.search(buf):
            kind = "repack"
        slot[kind] += n
    return out


PROJECTOR_WEIGHTS_LINE = re.compile(r"load_hparams: model size:\s+([\d.]+) MiB")


def projector_sizes(lines: Iterable[str], device_ids: Iterable[str] | None = None) -> dict[str, int]:
    """What clip (a vision projector, loaded through mtmd) allocated, per device: its weights ("model size") on the
    device of its compute buffer, plus that buffer. `lines` are the projector load's only."""
    report = parse_buffer_lines(lines, device_ids)
    weights = sum(round(float(m.group(1)) * MiB) for m in map(PROJECTOR_WEIGHTS_LINE.search, lines) if m)
    out = {dev: kinds["compute"] for dev, kinds in report.items() if kinds["compute"]}
    dev = next(iter(out), "CPU")
    out[dev] = out.get(dev, 0) + weights
    return {d: b for d, b in out.items() if b}


def cache_size(lines: Iterable[str]) -> tuple[int, int]:
    """(bytes, number of size lines) of every KV cache and recurrent state llama.cpp built, all devices together.
    Correct under `no_alloc` (the dry run measures the KV of shapes the planner cannot know from it)."""
    total, n = 0, 0
    for line in lines:
        m = CACHE_SIZE_LINE.search(line)
        if m:
            total += round(float(m.group(2)) * MiB)
            n += 1
    return total, n


def compute_sizes(lines: Iterable[str], device_ids: Iterable[str] | None = None) -> dict[str, int]:
    """Compute buffer bytes per device: these lines are correct under `no_alloc` (the dry run uses them)."""
    return {dev: kinds["compute"] for dev, kinds in parse_buffer_lines(lines, device_ids).items() if kinds["compute"]}


def totals(report: dict[str, dict[str, int]]) -> dict[str, int]:
    return {dev: sum(k.values()) for dev, k in report.items()}

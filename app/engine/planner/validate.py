"""Plan options checked against the model and the devices before anything is computed: a ValueError naming
the option (the service turns it into a 400 naming the field)."""
from __future__ import annotations

from app.discovery.inventory import Inventory
from app.engine.gguf.model_info import ModelInfo
from app.engine.planner.memory import KV_BLOCKS
from app.engine.planner.placement import QUANTIZED_KV, usable_gpus
from app.engine.layout.types import KV_TYPES, PlanOptions


def validate(info: ModelInfo, inventory: Inventory, o: PlanOptions) -> None:
    """ValueError naming the option for nonsense input (before anything is computed)."""
    def bad(name, msg):
        raise ValueError(f"{name}: {msg}")

    for name in ("num_ctx", "num_parallel", "num_batch", "num_ubatch"):
        v = getattr(o, name)
        if name == "num_batch" and v is None:       # the planner decides
            continue
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            bad(name, f"must be a positive integer, got {v!r}")
    if o.num_ctx > 1 << 24:
        bad("num_ctx", f"{o.num_ctx} is larger than any model supports")
    if o.num_parallel > 256:
        bad("num_parallel", f"{o.num_parallel} parallel sequences is more than llama.cpp supports (256)")
    if o.num_gpu is not None:
        if not isinstance(o.num_gpu, int) or isinstance(o.num_gpu, bool) or o.num_gpu < -1:
            bad("num_gpu", f"must be -1 (all), 0 or a layer count, got {o.num_gpu!r}")
        if o.num_gpu > info.n_layer + 1:
            bad("num_gpu", f"{o.num_gpu} is more than the model's {info.n_layer} layers + output layer "
                           f"(use -1 or {info.n_layer + 1} for all)")
    gpus = usable_gpus(inventory)
    if o.main_gpu is not None:
        if not isinstance(o.main_gpu, int) or isinstance(o.main_gpu, bool) or o.main_gpu < 0:
            bad("main_gpu", f"must be a GPU index >= 0, got {o.main_gpu!r}")
        if o.main_gpu >= max(1, len(gpus)) or (gpus == () and o.main_gpu > 0):
            bad("main_gpu", f"GPU index {o.main_gpu} does not exist ({len(gpus)} GPU(s))")
    if o.tensor_split is not None:
        ts = tuple(o.tensor_split)
        if len(ts) != len(gpus):
            bad("tensor_split", f"has {len(ts)} entries but there are {len(gpus)} GPU(s)")
        if any((not isinstance(x, (int, float))) or isinstance(x, bool) or x < 0 or x != x for x in ts):
            bad("tensor_split", "entries must be non-negative numbers")
        if ts and sum(ts) <= 0:
            bad("tensor_split", "at least one entry must be > 0")
    if o.cpu_moe is not None:
        if not isinstance(o.cpu_moe, int) or isinstance(o.cpu_moe, bool) or not 0 <= o.cpu_moe <= info.n_layer:
            bad("cpu_moe", f"must be between 0 and {info.n_layer} layers, got {o.cpu_moe!r}")
        if o.cpu_moe > 0 and not info.is_moe:
            bad("cpu_moe", f"{info.name} is not a mixture-of-experts model")
    if o.kv_type not in KV_TYPES:
        bad("kv_type", f"{o.kv_type!r} is not one of {', '.join(KV_TYPES)}")
    if o.kv_type in QUANTIZED_KV and o.flash_attn is False:
        bad("kv_type", f"a quantized KV cache ({o.kv_type}) needs flash attention; flash_attn=false was set")
    if o.kv_type in QUANTIZED_KV:
        blck = KV_BLOCKS[o.kv_type][0]
        if info.head_dim_k % blck or info.head_dim_v % blck:
            bad("kv_type", f"{o.kv_type} needs head sizes that are multiples of {blck} "
                           f"(this model: {info.head_dim_k}/{info.head_dim_v})")
    if not isinstance(o.margin, int) or o.margin < 0:
        bad("margin", f"must be >= 0 bytes, got {o.margin!r}")

"""The placement search behind `search.plan`: where every block of a model goes, and the exact llama.cpp
parameters that put it there. `place(info, inventory, options, compute)` is a pure function of plain data (no I/O).

The placement space is what llama.cpp can realise with `n_gpu_layers` + `tensor_split` + `tensor_buft_overrides`:
  - the last k blocks (and the output layer with them) are on GPUs; the rest and the token embedding on the CPU;
  - those k blocks are split into contiguous runs, one per GPU in `devices` order (tensor_split = block counts);
  - experts of blocks below `m` (cpu_moe) stay on the CPU: `blk\\.(..)\\.ffn_(up|down|gate|gate_up)_(ch|)exps`;
  - the first GPU block may be "partial": its attention on the GPU, its `ffn_*` tensors on the CPU.
Goal, in order: the most blocks with their attention on a GPU (k), then the most FULL GPU blocks (all tensors on
the GPU), then the fewest GPUs, then an even spread. Each GPU keeps `options.margin` free; the CPU keeps the same
margin of its available RAM. Anything the user set (num_gpu, main_gpu, tensor_split, cpu_moe, ...) is kept.
"""
from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, replace

from app.discovery.inventory import Device, Inventory, within_cap
from app.engine.layout.types import Layout, PlanOptions
from app.engine.planner import network
from app.engine.planner.device_plans import device_plans
from app.engine.planner.memory import (EXPERTS_RE, FFN_RE, MemoryModel, estimate_compute, fit_measured_kv,
                                       memory_model)
from app.engine.gguf.model_info import ModelInfo

GiB = 1024 ** 3
MiB = 1024 ** 2
SPLIT_MODE_LAYER = 1
QUANTIZED_KV = {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"}


def usable_gpus(inventory: Inventory) -> tuple[Device, ...]:
    """Devices llama.cpp offloads layers to: discrete GPUs; integrated GPUs only when there is no discrete one;
    then RPC workers' devices (llama.cpp offloads to them like to GPUs; they do not hide a local iGPU). This is
    the order of `tensor_split` entries; llama.cpp's `devices` order puts the remote ones first (network.py)."""
    local = tuple(d for d in inventory.devices if d.kind == "gpu" and not d.endpoint)
    if not local:
        local = tuple(d for d in inventory.devices if d.kind == "igpu" and not d.endpoint)
    return local + tuple(d for d in inventory.devices if d.endpoint)


# ---------------------------------------------------------------------------------------------------------------
# the cost of one placement

@dataclass(frozen=True)
class Config:
    """One point of the placement space (see the module doc)."""
    order: tuple[int, ...]        # indices into the GPU list, llama.cpp `devices` order (the last holds the output)
    counts: tuple[int, ...]       # blocks per device in `order`, front to back; sum = k
    partial: bool                 # block N-k keeps only its attention on the GPU
    m: int                        # experts of blocks < m on the CPU

    @property
    def k(self) -> int:
        return sum(self.counts)


class Costs:
    """Per-block byte costs and per-device budgets, precomputed for fast feasibility checks."""

    def __init__(self, info: ModelInfo, mm: MemoryModel, gpus: tuple[Device, ...], o: PlanOptions,
                 host_budget: int, compute: dict[str, int] | None):
        self.n = mm.n_layer
        self.mm = mm
        self.attn = [mm.part_bytes(i, "attn") + mm.kv[i] for i in range(self.n)]
        self.ffn = [mm.part_bytes(i, "ffn") for i in range(self.n)]
        self.exp = [mm.part_bytes(i, "experts") for i in range(self.n)]
        self.gpus = gpus
        self.budget = [max(0, d.free - o.margin) for d in gpus]
        self.host_budget = host_budget
        self.out_gpu = mm.output_bytes(on_gpu=True)
        # on the CPU the output layer is only with no GPU in `devices`: a tied one then gets a repacked copy
        self.out_cpu = mm.output_bytes(on_gpu=False) + mm.output_repack
        compute = compute or {}
        est_out = estimate_compute(info, o.num_ctx, o.num_parallel, batch_of(o), o.num_ubatch, o.flash_attn, True)
        est_mid = estimate_compute(info, o.num_ctx, o.num_parallel, batch_of(o), o.num_ubatch, o.flash_attn, False)
        any_gpu = compute.get("*")
        self.compute_out = [compute.get(d.id, any_gpu if any_gpu is not None else est_out) for d in gpus]
        self.compute_mid = [compute.get(d.id, any_gpu if any_gpu is not None else est_mid) for d in gpus]
        self.compute_cpu = compute.get("CPU", est_out)

    def block_gpu(self, i: int, c: Config) -> int:
        pb = self.n - c.k if c.partial else -1
        if i == pb:
            return self.attn[i]
        return self.attn[i] + self.ffn[i] + (self.exp[i] if i >= c.m else 0)

    def gpu_usage(self, c: Config) -> list[int]:
        """Bytes on each device of c.order (weights + KV + compute)."""
        out = []
        start = self.n - c.k
        last = len(c.order) - 1
        for j, (g, cnt) in enumerate(zip(c.order, c.counts)):
            b = sum(self.block_gpu(i, c) for i in range(start, start + cnt))
            start += cnt
            if j == last:
                b += self.out_gpu + self.compute_out[g]
            else:
                b += self.compute_mid[g]
            out.append(b)
        return out

    def cpu_usage(self, c: Config) -> int:
        k = c.k
        first_gpu = self.n - k
        b = self.mm.token_embd + self.mm.output_buffer + self.mm.output_reserve + self.mm.checkpoints + self.compute_cpu
        b += 0 if k else self.out_cpu
        for i in range(first_gpu):
            b += self.attn[i] + self.ffn[i] + self.exp[i]
        for i in range(first_gpu, self.n):
            if c.partial and i == first_gpu:
                b += self.ffn[i] + self.exp[i]
            elif i < c.m:
                b += self.exp[i]
        return b

    def gpu_fits(self, c: Config) -> bool:
        return all(u <= self.budget[g] for g, u in zip(c.order, self.gpu_usage(c)))

    def fits(self, c: Config) -> bool:
        return self.gpu_fits(c) and self.cpu_usage(c) <= self.host_budget

    def partition(self, order: tuple[int, ...], k: int, partial: bool, m: int, fill: float = 1.0):
        """Split the last k blocks over `order` back to front (greedy: the last device takes the output and as many
        blocks as fit, then the one before...). Returns a Config, or None if they do not fit. Greedy is optimal for
        feasibility of a contiguous split in a fixed order. `fill` < 1 caps each device at that share of its room
        (used to spread evenly)."""
        g = len(order)
        probe = Config(order, (0,) * (g - 1) + (k,), partial, m)
        counts = [0] * g
        j = g - 1
        cap = lambda jj, compute: compute + fill * max(0, self.budget[order[jj]] - compute)  # noqa: E731
        room = cap(j, self.compute_out[order[j]]) - self.compute_out[order[j]] - self.out_gpu
        if room < 0:
            return None
        for i in range(self.n - 1, self.n - k - 1, -1):
            cost = self.block_gpu(i, probe)
            while cost > room:
                j -= 1
                if j < 0:
                    return None
                room = cap(j, self.compute_mid[order[j]]) - self.compute_mid[order[j]]
            room -= cost
            counts[j] += 1
        # drop devices that got nothing (a device with no blocks is not used at all)
        keep = [jj for jj in range(g) if counts[jj] > 0 or jj == g - 1]
        c = Config(tuple(order[jj] for jj in keep), tuple(counts[jj] for jj in keep), partial, m)
        return c if self.gpu_fits(c) else None


def score(c: Config | None, n: int, moe: bool) -> tuple[int, int]:
    """(blocks with attention on a GPU, blocks entirely on a GPU): what the planner maximises, in that order."""
    if c is None:
        return (-1, -1)
    k = c.k
    first = n - k
    full = 0
    for i in range(first, n):
        if c.partial and i == first:
            continue
        if moe and i < c.m:
            continue
        full += 1
    return (k, full)


# ---------------------------------------------------------------------------------------------------------------
# search

def _llama_split_counts(weights: list[float], k: int) -> tuple[int, ...]:
    """Blocks per device that llama.cpp assigns for n_gpu_layers = k+1 and this tensor_split (float32 maths,
    upper_bound on the cumulative split; the output layer is position k). Output position excluded from counts."""
    f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]  # noqa: E731
    total = 0.0
    cum = []
    for w in weights:
        total = f32(total + f32(w))
        cum.append(total)
    cum = [f32(x / total) for x in cum]
    act = k + 1
    counts = [0] * len(weights)
    for p in range(k):                     # block positions only
        frac = f32(p / act)
        j = next((jj for jj, s in enumerate(cum) if s > frac), len(cum) - 1)
        counts[j] += 1
    return tuple(counts)


def _best_for_order(cs: Costs, order: tuple[int, ...], n: int, moe: bool, fixed_k: int | None,
                    fixed_m: int | None, split_weights: list[float] | None) -> Config | None:
    """The best Config for a fixed device order (max k, then max full blocks)."""
    def make(k, partial, m):
        if k == 0:
            return Config(order[-1:], (0,), False, m)
        if split_weights is not None:
            counts = _llama_split_counts(split_weights, k)
            c = Config(order, counts, partial, m)
            return c if cs.gpu_fits(c) else None
        return cs.partition(order, k, partial, m)

    m_all = n if moe else 0
    ks = [fixed_k] if fixed_k is not None else None
    if ks is None:
        # largest k that fits in the most relaxed form (partial first block, all experts on the CPU): binary search
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if make(mid, True, fixed_m if fixed_m is not None else m_all) is not None:
                lo = mid
            else:
                hi = mid - 1
        ks = [lo]
    best = None
    for k in ks:
        partials = (False,) if (fixed_k is not None or k == 0) else (False, True)
        for partial in partials:
            if fixed_m is not None or not moe:
                cands = [make(k, partial, fixed_m if fixed_m is not None else 0)]
            else:
                # smallest m (fewest expert layers on the CPU) that fits; feasibility grows with m
                lo, hi = n - k, n
                if make(k, partial, hi) is None:
                    continue
                while lo < hi:
                    mid = (lo + hi) // 2
                    if make(k, partial, mid) is not None:
                        hi = mid
                    else:
                        lo = mid + 1
                cands = [make(k, partial, lo)]
            for c in cands:
                if c is not None and score(c, n, moe) > score(best, n, moe):
                    best = c
    return best


def _spread(cs: Costs, c: Config) -> Config:
    """Same k/partial/m over the same devices, but each device filled to the same share of its room."""
    if len(c.order) < 2:
        return c
    lo, hi = 0.0, 1.0
    best = c
    for _ in range(30):
        mid = (lo + hi) / 2
        p = cs.partition(c.order, c.k, c.partial, c.m, fill=mid)
        if p is not None and len(p.order) == len(c.order):
            best, hi = p, mid
        else:
            lo = mid
    return best


def search(cs: Costs, o: PlanOptions, n: int, moe: bool, reasons: list[str]) -> Config:
    # One function on purpose (~60 lines): the user's fixed options (num_gpu, main_gpu, tensor_split, cpu_moe)
    # each narrow the same candidate loop, and the reason for each narrowing is appended where it happens.
    gpus = cs.gpus
    fixed_k = None
    if o.num_gpu is not None:
        ngl = n + 1 if o.num_gpu == -1 else o.num_gpu
        fixed_k = max(0, min(ngl, n + 1) - 1)
        reasons.append(f"num_gpu={o.num_gpu} set: {fixed_k} block(s) on GPU")
    fixed_m = o.cpu_moe if (o.cpu_moe is not None and moe) else None
    if fixed_m is not None:
        reasons.append(f"cpu_moe={fixed_m} set: experts of blocks 0..{fixed_m - 1} stay on the CPU")
    if not gpus:
        return Config((), (), False, 0)

    if o.tensor_split is not None:
        used = network.remote_first(gpus, tuple(i for i, w in enumerate(o.tensor_split) if w > 0))
        weights = [float(o.tensor_split[i]) for i in used]
        reasons.append(f"tensor_split={list(o.tensor_split)} set: layers split in that proportion")
        c = _best_for_order(cs, used, n, moe, fixed_k, fixed_m, weights)
        return c or _forced(cs, used, n, moe, fixed_k, fixed_m, weights)

    idx = [i for i, d in enumerate(gpus) if not d.endpoint]        # local GPUs first; workers only if needed
    remote = [i for i, d in enumerate(gpus) if d.endpoint]
    by_room = sorted(idx, key=lambda i: -cs.budget[i])
    if o.main_gpu is not None:
        by_room.remove(o.main_gpu)
        by_room.insert(0, o.main_gpu)
    # "holds the model": every block it may place (num_gpu) full on the GPUs, but for the experts kept by cpu_moe
    n_full = fixed_k if fixed_k is not None else n
    if fixed_m:
        n_full = min(n_full, n - fixed_m)
    want_k = fixed_k if fixed_k is not None else n
    best: Config | None = None
    for count in range(1, len(idx) + 1):
        chosen = by_room[:count]
        # the order matters (the last GPU holds the output layer; blocks differ in size): try every order of a
        # few GPUs, inventory order first so that ties keep it; for many GPUs, inventory order and biggest-last
        orders = [tuple(sorted(chosen)), tuple(sorted(chosen[1:])) + (chosen[0],)]
        if count <= 4:
            orders += sorted(itertools.permutations(chosen))
        for order in dict.fromkeys(orders):
            c = _best_for_order(cs, order, n, moe, fixed_k, fixed_m, None)
            if score(c, n, moe) > score(best, n, moe) or (
                    c is not None and best is not None and score(c, n, moe) == score(best, n, moe)
                    and len(c.order) < len(best.order)):
                best = c
        if best is not None and best.k >= want_k and score(best, n, moe)[1] >= n_full:
            if count > 1:
                reasons.append(f"the model needs {count} GPUs; layers spread evenly over them")
            elif len(idx) > 1:
                reasons.append(f"fits on one GPU ({gpus[best.order[-1]].id}); the others are left free")
            break
    if remote and not (best is not None and best.k >= want_k and score(best, n, moe)[1] >= n_full):
        with_workers = _with_workers(cs, idx, remote, best, n, moe, fixed_k, fixed_m, want_k, n_full)
        if with_workers is not None and score(with_workers, n, moe) > score(best, n, moe):
            reasons.append(f"local GPUs hold {best.k if best else 0} of {n} blocks; RPC workers take "
                           f"{with_workers.k - (best.k if best else 0)} more (workers are used only when they "
                           f"let more of the model off the CPU)")
            return with_workers     # not spread: greedy back to front fills local GPUs first, workers take the rest
    if best is None:
        # nothing the user's settings allow fits: still return what they asked for (marked as not fitting)
        return _forced(cs, tuple(sorted(by_room or remote)), n, moe, fixed_k, fixed_m, None)
    return _spread(cs, best) if best.k else best


def _with_workers(cs: Costs, local: list[int], remote: list[int], local_best: Config | None, n: int, moe: bool,
                  fixed_k, fixed_m, want_k: int, n_full: int) -> Config | None:
    """The local GPUs do not hold the model: add the fewest workers' devices (most room first) that let the most
    blocks off the CPU, in front of the local GPUs in their best order (network.remote_first); a try without the
    local GPUs covers ones too small for even the output layer."""
    local_order = local_best.order if (local_best is not None and local_best.k) else tuple(sorted(local))
    by_room = sorted(remote, key=lambda i: -cs.budget[i])
    best: Config | None = None
    for count in range(1, len(remote) + 1):         # ties keep the fewer workers, and the local GPUs in use
        chosen = network.remote_first(cs.gpus, tuple(by_room[:count]))
        with_local = _best_for_order(cs, chosen + local_order, n, moe, fixed_k, fixed_m, None)
        alone = _best_for_order(cs, chosen, n, moe, fixed_k, fixed_m, None) if local_order else None
        c = alone if score(alone, n, moe) > score(with_local, n, moe) else with_local
        if score(c, n, moe) > score(best, n, moe):
            best = c
        if best is not None and best.k >= want_k and score(best, n, moe)[1] >= n_full:
            break
    return best


def _forced(cs: Costs, order: tuple[int, ...], n: int, moe: bool, fixed_k: int | None, fixed_m: int | None,
            weights: list[float] | None) -> Config:
    """The user's fixed num_gpu (and split) even though it does not fit; experts on the CPU where allowed."""
    k = fixed_k or 0
    m = fixed_m if fixed_m is not None else (n if moe else 0)
    if not k:
        return Config(order[-1:], (0,), False, m)
    w = weights or [float(max(1, cs.budget[g])) for g in order]
    return Config(order, _llama_split_counts(w, k), False, m)


# ---------------------------------------------------------------------------------------------------------------
# Layout

def human_size(n: int) -> str:
    """MiB below a GiB (small machines read better), GiB above."""
    return f"{n / MiB:.0f} MiB" if abs(n) < GiB else f"{n / GiB:.2f} GiB"


def _alternation(blocks: list[int]) -> str:
    return "|".join(str(b) for b in blocks)


def _overrides(c: Config, n: int, moe: bool) -> tuple[tuple[str, str], ...]:
    first = n - c.k
    ov = []
    if c.k and c.partial:
        ov.append((rf"blk\.{first}\.{FFN_RE}", "CPU"))
    if moe and c.k:
        cpu_exp = [i for i in range(first, min(c.m, n)) if not (c.partial and i == first)]
        if cpu_exp:
            ov.append((rf"blk\.({_alternation(cpu_exp)})\.{EXPERTS_RE}", "CPU"))
    return tuple(ov)


# The logical batch (llama.cpp's n_batch: the tokens of one llama_decode call; the physical ubatch stays 512) when
# nobody sets num_batch. With every layer on a GPU, llama-server's 2048: in 512-token steps the GPU waits on the host
# between steps, and a 16k-30k prompt on a GPU ran at 0.81-0.88x llama-server's speed against 0.96-0.97x with 2048
# (docs/gpu-results.md, "Long prompts"). With any weights on the CPU, 512: the CPU computes the prompt there, a
# 2048-token step takes ~4x as long, and every other stream's next token waits for the whole step. Embedding
# contexts keep 512 too (their batch bounds the output buffer, planned in memory.output_reserve_bytes).
BATCH_ALL_GPU = 2048
BATCH_WITH_CPU = 512


def place(info: ModelInfo, inventory: Inventory, o: PlanOptions, compute: dict[str, int] | None,
          kv_measured: tuple[int, int] | None = None) -> Layout:
    """The best placement for valid options (`validate` first), without suggestions; num_batch None is decided
    here (BATCH_ALL_GPU when the placement puts every layer on a GPU and still fits with it, else BATCH_WITH_CPU),
    and the Layout's options hold the value chosen. The search's reasons are recorded in the Layout."""
    if o.num_batch is not None:
        return _place(info, inventory, o, compute, kv_measured)
    lay = _place(info, inventory, _with_batch(o, BATCH_WITH_CPU), compute, kv_measured)
    why = f"num_batch {lay.n_batch}: "
    if _all_on_gpu(info, lay) and not o.embedding:
        wide = _place(info, inventory, _with_batch(o, BATCH_ALL_GPU), compute, kv_measured)
        if wide.fits and _all_on_gpu(info, wide):
            lay = wide
            why = f"num_batch {lay.n_batch}: every layer on a GPU, prompts go in {lay.n_batch}-token steps " \
                  f"(llama-server's default)"
        else:
            why += f"{BATCH_ALL_GPU} would not fit with every layer on a GPU"
    elif o.embedding:
        why += "an embedding context"
    else:
        why += "weights on the CPU: long prompt steps would hold up the other streams' tokens"
    return replace(lay, reasons=lay.reasons + (why,))


def batch_of(o: PlanOptions) -> int:
    """The logical batch of options `place` has decided (num_batch set)."""
    if o.num_batch is None:
        raise ValueError("num_batch: not decided yet (placement.place decides it)")
    return o.num_batch


def _with_batch(o: PlanOptions, batch: int) -> PlanOptions:
    b = max(batch, o.num_parallel)           # llama.cpp needs one output per sequence in a batch (options.py)
    return replace(o, num_batch=b, num_ubatch=min(o.num_ubatch, b))


def _all_on_gpu(info: ModelInfo, lay: Layout) -> bool:
    """Every block and the output layer on GPUs, and no tensor of theirs overridden to the CPU."""
    return lay.n_gpu_layers > info.n_layer and not lay.tensor_buft_overrides


def _place(info: ModelInfo, inventory: Inventory, o: PlanOptions, compute: dict[str, int] | None,
           kv_measured: tuple[int, int] | None = None) -> Layout:
    # Long (~65 lines) because it is the one place that turns the search's Config into llama.cpp's parameters and
    # the Layout's reasons, in the order a reader checks them: KV, search, fit, op_offload, devices, repack.
    n = info.n_layer
    moe = info.is_moe
    mm = memory_model(info, o.num_ctx, o.num_parallel, o.kv_type, batch_of(o), o.num_ubatch, o.embedding,
                      cpu_features=tuple(getattr(inventory, "cpu_features", ()) or ()), flash_attn=o.flash_attn,
                      ctx_checkpoints=o.ctx_checkpoints, checkpoint_mib=o.checkpoint_mib)
    reasons: list[str] = []
    kv = fit_measured_kv(mm.kv, kv_measured)
    if kv != mm.kv:
        reasons.append(f"KV cache as the dry run measured it: {human_size(sum(kv))} (the {info.architecture} KV shape "
                       f"predicted {human_size(sum(mm.kv))})")
        mm = replace(mm, kv=kv)
    inventory = within_cap(inventory, o.margin)     # Strata's memory cap: no device offers more than is left of it
    gpus = usable_gpus(inventory)
    host_budget = max(0, inventory.host_ram_available - o.margin)
    cs = Costs(info, mm, gpus, o, host_budget, compute)
    c = search(cs, o, n, moe, reasons)

    gpu_ok = cs.gpu_fits(c) if c.k else True
    cpu_need = cs.cpu_usage(c)
    fits = gpu_ok and cpu_need <= host_budget
    if not gpus:
        reasons.append("no GPU: everything on the CPU" + (f" ({'; '.join(inventory.notes)})" if inventory.notes else ""))
        if o.num_gpu:
            reasons.append(f"num_gpu={o.num_gpu} ignored: there is no GPU")
    else:
        reasons.append(f"{c.k} of {n} blocks on GPU" + (" (+ output layer)" if c.k else "")
                       + (f", block {n - c.k} partly (attention on GPU, FFN on CPU)" if c.partial and c.k else ""))
        if moe and c.k and c.m > n - c.k:
            reasons.append(f"experts of blocks {n - c.k}..{c.m - 1} on the CPU so more layers fit on the GPU")
    if not gpu_ok:
        reasons.append("the placement asked for does not fit in GPU memory")
    if cpu_need > host_budget:
        reasons.append(f"needs {human_size(cpu_need)} of system RAM; the budget is {human_size(host_budget)} "
                       f"({human_size(inventory.host_ram_available)} available minus a {human_size(o.margin)} margin)")
    weights_on_cpu = any(cs.exp[i] or cs.ffn[i] or cs.attn[i] for i in range(n - c.k)) or (c.k and (c.partial or c.m > n - c.k))
    op_offload = bool(c.k) and bool(gpus)
    reasons += network.hop_reasons(gpus, c.order, c.counts, n - c.k, info.n_embd, info.n_vocab,
                                   o.num_ubatch) if c.k else []
    local_gpu = any(not gpus[g].endpoint for g in c.order) if c.k else False   # RPC devices take no offloaded ops
    experts_on_cpu = moe and (c.k < n or c.m > 0)     # whole blocks, or the experts of some, on the CPU
    min_batch, why = op_offload_min_batch(op_offload and local_gpu and bool(weights_on_cpu), experts_on_cpu)
    if op_offload and local_gpu and weights_on_cpu:
        reasons.append(f"op_offload on: batches of {min_batch} tokens or more stream CPU-held weights to the GPU "
                       f"(GGML_OP_OFFLOAD_MIN_BATCH={min_batch}: {why})")
    elif op_offload and local_gpu:
        reasons.append("op_offload on (all layers on GPU; no effect)")

    devices, layer_dev, exp_dev = device_plans(cs, c, gpus, o, mm)
    load_mode, why = weights_load_mode(bool(c.k), inventory.huge_pages, fits, o.use_mmap)
    if load_mode == "read":
        devices = (replace(devices[0], mapped=0),) + devices[1:]      # no file mapping: no mapped slack
    if why:
        reasons.append(why)
    total = sum(d.total for d in devices)
    if inventory.memory_cap is not None and total > inventory.memory_cap:
        fits = False
        reasons.append(f"needs {human_size(total)} in all; Strata's memory cap leaves {human_size(inventory.memory_cap)}"
                       " (STRATA_MAX_MEMORY / Settings, less what the loaded models hold)")
    if devices[0].weights.get("repack"):
        reasons.append(f"the CPU backend repacks {devices[0].weights['repack'] / MiB:.0f} MiB of CPU weights for "
                       f"{'/'.join(f for f in ('AVX512', 'AVX2', 'NEON') if f in mm.cpu_features) or 'this CPU'}"
                       + (" (llama.cpp also reports their mapped originals, page cache the kernel can drop)"
                          if load_mode == "mmap" else ""))
    ngl = c.k + 1 if c.k else 0
    counts = list(c.counts)
    if c.k:
        counts[-1] += 1                      # the output layer is the last position of the last device
    gpu_ids = tuple(gpus[g].id for g in c.order) if c.k else ()
    split = tuple(float(x) for x in counts) if c.k else ()
    kv_quant = o.kv_type in QUANTIZED_KV
    return Layout(
        model_path=info.path, options=o, devices=devices, layer_device=layer_dev, expert_device=exp_dev,
        n_gpu_layers=ngl, split_mode=SPLIT_MODE_LAYER, main_gpu=max(0, len(gpu_ids) - 1),
        tensor_split=split, gpu_devices=gpu_ids, tensor_buft_overrides=_overrides(c, n, moe),
        op_offload=op_offload, n_ctx=o.num_ctx * o.num_parallel, n_parallel=o.num_parallel,
        n_batch=batch_of(o), n_ubatch=o.num_ubatch, type_k=o.kv_type, type_v=o.kv_type,
        flash_attn=True if (kv_quant and o.flash_attn is None) else o.flash_attn,
        fits=fits, reasons=tuple(reasons), op_offload_min_batch=min_batch, load_mode=load_mode)


def weights_load_mode(on_gpus: bool, huge_pages: bool, fits: bool, use_mmap: bool | None = None) -> tuple[str, str]:
    """How llama.cpp gets a plan's weights ("mmap" or "read", Layout.load_mode), and why when it is not its default.

    Decoding reads every weight once per token. Mapped from the file, the weights sit in 4 KiB page-cache pages, and
    the TLB misses of that walk cost: read into the runner's memory where the kernel backs it with 2 MiB pages
    (discovery.host.huge_pages_usable), llama-server decoded Qwen2.5-Coder-0.5B Q4_K_M at 1 thread 1.13-1.2x as
    fast (read into 4 KiB pages: no faster than mapped). So a CPU-only plan reads them, when it fits in RAM: read
    weights cannot be dropped and read back as page cache can. A plan with a GPU keeps the mapping: with a GPU in
    `devices`, llama.cpp reads the CPU's weights into that GPU's pinned host buffer, locked memory without huge pages.
    The user's `use_mmap` (Ollama's option) decides where set."""
    if use_mmap is not None:
        return ("mmap", "weights mapped from the file (use_mmap true)") if use_mmap else \
            ("read", "weights read into memory (use_mmap false)")
    if on_gpus or not huge_pages or not fits:
        return "mmap", ""
    return "read", ("weights read into memory, not mapped: the kernel backs them with 2 MiB pages "
                    "(CPU decoding 1.13-1.2x as fast as from the 4 KiB pages of a mapped file)")


# op_offload's minimum batch (llama.cpp's GGML_OP_OFFLOAD_MIN_BATCH, default 32), measured on a GPU with
# llama-bench (docs/gpu-results.md, "op_offload"): a dense 3B model with 16 of 28 blocks on the CPU ran 32-token
# batches at 0.80-0.86x with op_offload (copying a layer's weights over PCIe costs more than the CPU's matmul at
# 32 rows) and at 1.07x with a minimum of 64, while 64 tokens and more gained 1.4-8x either way; a MoE model with
# the experts of 24 of 48 blocks on the CPU gained 1.32x at 32 tokens (each expert sees a fraction of the rows,
# so the CPU side is slower per row and offloading pays sooner): it keeps llama.cpp's 32.
OP_OFFLOAD_MIN_BATCH_DENSE = 64
OP_OFFLOAD_MIN_BATCH_MOE = 32


def op_offload_min_batch(offloads: bool, experts_on_cpu: bool) -> tuple[int, str]:
    """(the smallest batch op_offload streams CPU-held weights to the GPU for, why) for a plan that `offloads`
    (op_offload on, a local GPU, weights on the CPU); (0, "") otherwise: nothing is streamed, llama.cpp's
    default stays."""
    if not offloads:
        return 0, ""
    if experts_on_cpu:
        return OP_OFFLOAD_MIN_BATCH_MOE, ("llama.cpp's default; CPU-held MoE experts gained 1.32x from 32-token "
                                          "batches (measured on an H100)")
    return OP_OFFLOAD_MIN_BATCH_DENSE, ("a dense model's CPU-held layers lost at 32-token batches (0.80-0.86x) "
                                        "and gained 1.07x with 64 (measured on an H100)")

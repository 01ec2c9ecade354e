"""A chosen placement (placement.Config) turned into per-device plans: which blocks and expert tensors each device
holds, their weight bytes by class, KV, compute and output buffers, and what the CPU backend repacks.
`cs` is a placement.Costs and `c` a placement.Config (not annotated: placement imports this module).
Covered by tests/unit/engine/planner/test_planner.py (through plan())."""
from __future__ import annotations

from app.discovery.inventory import Device
from app.engine.planner import repack
from app.engine.planner.memory import MemoryModel
from app.engine.layout.types import DevicePlan, PlanOptions


def _block_devices(cs, c, gpus: tuple[Device, ...], n: int) -> tuple[list[str], list[str]]:
    """Per block: the device of its non-expert weights, and of its expert tensors ("" for a dense block)."""
    first = n - c.k
    dev_of_block = ["CPU"] * n
    start = first
    for g, cnt in zip(c.order, c.counts):
        for i in range(start, start + cnt):
            dev_of_block[i] = gpus[g].id
        start += cnt
    exp_dev = []
    for i in range(n):
        if cs.exp[i] == 0:
            exp_dev.append("")
        elif dev_of_block[i] == "CPU" or i < c.m or (c.partial and c.k and i == first):
            exp_dev.append("CPU")
        else:
            exp_dev.append(dev_of_block[i])
    return dev_of_block, exp_dev


def _cpu_repack(c, gpus: tuple[Device, ...], mm: MemoryModel, cpu_w: dict[str, int], dev_of_block,
                exp_dev, out_dev: str) -> int:
    """The CPU's weights: which of them the CPU backend repacks (moved into cpu_w["repack"]), and how far
    llama.cpp's file mapping reaches (returned: mapped bytes beyond the weights read from the mapping)."""
    first = mm.n_layer - c.k
    active = repack.repack_active(mm.cpu_features, tuple(gpus[g].backend for g in c.order) if c.k else ())
    pb = first if (c.partial and c.k) else -1

    def device_of(t) -> str:
        if t.block < 0:
            return "CPU" if t.part == "token_embd" else out_dev
        if t.part == "attn":
            return dev_of_block[t.block]
        if t.part == "ffn":
            return "CPU" if t.block == pb else dev_of_block[t.block]
        return exp_dev[t.block] or dev_of_block[t.block]

    moved, n_repack, mapped = repack.cpu_file_use(mm.spans, device_of, active)
    for k2, v in moved.items():
        cpu_w[k2] = cpu_w.get(k2, 0) - v
    n_repack += mm.output_repack if (active and out_dev == "CPU") else 0
    if n_repack:
        cpu_w["repack"] = n_repack
    return mapped


def device_plans(cs, c, gpus: tuple[Device, ...], o: PlanOptions,
                  mm: MemoryModel) -> tuple[tuple[DevicePlan, ...], tuple[str, ...], tuple[str, ...]]:
    n = mm.n_layer
    first = n - c.k
    dev_of_block, exp_dev = _block_devices(cs, c, gpus, n)
    acc: dict[str, dict] = {}

    def slot(dev_id):
        return acc.setdefault(dev_id, {"layers": [], "experts": [], "weights": {}, "kv": 0})

    def addw(dev_id, parts: dict[str, int]):
        w = slot(dev_id)["weights"]
        for k2, v in parts.items():
            w[k2] = w.get(k2, 0) + v

    slot("CPU")
    addw("CPU", {"token_embd": mm.token_embd})
    for i in range(n):
        p = mm.parts[i]
        d = dev_of_block[i]
        s = slot(d)
        s["layers"].append(i)
        s["kv"] += mm.kv[i]
        addw(d, p.attn)
        ffn_dev = "CPU" if (c.partial and c.k and i == first) else d
        addw(ffn_dev, p.ffn)
        if exp_dev[i]:
            slot(exp_dev[i])["experts"].append(i)
            addw(exp_dev[i], p.experts)
    out_dev = gpus[c.order[-1]].id if c.k else "CPU"
    out_w = mm.output_bytes(on_gpu=out_dev != "CPU") - mm.other
    addw(out_dev, {"output": out_w} if out_w else {})
    if mm.other:
        addw(out_dev, {"other": mm.other})

    mapped = _cpu_repack(c, gpus, mm, acc["CPU"]["weights"], dev_of_block, exp_dev, out_dev)

    plans = []
    cpu = acc["CPU"]
    plans.append(DevicePlan("CPU", "CPU", tuple(cpu["layers"]), tuple(cpu["experts"]),
                            {k2: v for k2, v in cpu["weights"].items() if v}, cpu["kv"], cs.compute_cpu,
                            output=mm.output_buffer, budget=cs.host_budget, mapped=mapped,
                            output_reserve=mm.output_reserve, checkpoints=mm.checkpoints))
    order = c.order if c.k else ()          # no block on a GPU: llama.cpp gets no device, allocates nothing there
    last = len(order) - 1
    for j, g in enumerate(order):
        d = gpus[g]
        s = acc.get(d.id, {"layers": [], "experts": [], "weights": {}, "kv": 0})
        comp = cs.compute_out[g] if j == last else cs.compute_mid[g]
        plans.append(DevicePlan(d.id, d.name, tuple(s["layers"]), tuple(s["experts"]),
                                {k2: v for k2, v in s["weights"].items() if v}, s["kv"], comp,
                                budget=cs.budget[g]))
    return tuple(plans), tuple(dev_of_block), tuple(exp_dev)

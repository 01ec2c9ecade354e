"""Plain data behind the memory visualizer (no Qt): device columns, layer cells, colours, byte formatting.

Input is what the API returns: `Inventory.to_dict()` and `Layout.to_dict()` (from `/api/ps` "strata" or
`POST /api/layout`). Pure functions, so the picture's numbers are testable without painting anything.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.format import format_bytes  # noqa: F401 - the memory room's modules take it from here

# Segment kinds in the order they stack, bottom to top. OVER is not a segment: it marks what lies above capacity.
# MAPPED: file pages llama.cpp maps beyond the weights the CPU reads from the mapping (originals of repacked
# weights, GPU tensors lying in between; DevicePlan.mapped). llama.cpp counts them in its CPU_Mapped figure, but
# they are page cache the kernel can drop, so they are carved out of the free part, never out of the budget.
# PROMPT_CACHE: the runner's host-RAM prompt cache (prefixes of conversations that lost their slot; /api/ps
# "strata.prompt_cache"): the model's own memory on the CPU, but not in the plan (it grows to its limit with use).
# PROJECTOR: a vision model's projector (mmproj): its weights and the image encoder's compute buffer, on the device
# mtmd puts it (DevicePlan.projector: the first GPU, else the CPU).
WEIGHTS, MAPPED, KV, COMPUTE, OTHERS, FREE, OVER = "weights", "mapped", "kv", "compute", "others", "free", "over"
# DRAFT: speculative decoding's draft model (its weights, KV cache and compute buffer; DevicePlan.draft).
PROMPT_CACHE, PROJECTOR, DRAFT = "prompt_cache", "projector", "draft"
SEGMENT_ORDER = (WEIGHTS, MAPPED, KV, COMPUTE, PROJECTOR, DRAFT, PROMPT_CACHE, OTHERS, FREE)
MODEL_KINDS = (WEIGHTS, MAPPED, KV, COMPUTE, PROJECTOR, DRAFT, PROMPT_CACHE)      # what a zoomed bar shows
OUR_KINDS = (WEIGHTS, KV, COMPUTE, PROJECTOR, DRAFT, PROMPT_CACHE)    # the model's own bytes (mapped: page cache)
SEGMENT_LABELS = {
    WEIGHTS: "Model weights", MAPPED: "Mapped file pages (reclaimable)", KV: "KV cache", COMPUTE: "Compute graph",
    PROJECTOR: "Vision projector", DRAFT: "Draft model", PROMPT_CACHE: "Prompt cache", OTHERS: "Used by others", FREE: "Free",
    OVER: "Does not fit",
}
SEGMENT_COLORS = {
    WEIGHTS: "#4c78a8", MAPPED: "#c6dbef", KV: "#f58518", COMPUTE: "#b279a2", PROJECTOR: "#e377c2", DRAFT: "#54a24b",
    PROMPT_CACHE: "#bcbd22", OTHERS: "#9d9d9d", FREE: "#e9ecef", OVER: "#e45756",
}
# A device of an RPC worker (`strata worker` on another machine): llama.cpp names it RPC<i>[host:port].
REMOTE_DEVICE = re.compile(r"^RPC\d+\[")


def layers_placed(layer_device: list[str]) -> tuple[int, int]:
    """(blocks on this machine's GPUs, blocks on RPC workers' devices) of a Layout's `layer_device`: a summary that
    counted a worker's blocks as "on GPU" would promise local GPU speed for layers that cross the network."""
    remote = sum(1 for d in layer_device if REMOTE_DEVICE.match(d))
    return sum(1 for d in layer_device if d != "CPU") - remote, remote


def layout_summary(layout: dict | None) -> str:
    """The line under a plan: its context and KV type, the layers on GPUs (and on RPC workers), what decided
    the context, and whether it fits."""
    if not layout:
        return ""
    opts = layout.get("options") or {}
    blocks = layout.get("layer_device") or []
    n = len(blocks)
    gpu, remote = layers_placed(blocks)
    on_workers = f", {remote} on RPC workers" if remote else ""
    text = (f"n_ctx {layout.get('n_ctx')} ({opts.get('num_ctx')} per sequence × {layout.get('n_parallel')}), "
            f"KV {layout.get('type_k')}, {gpu} of {n} layers on GPU{on_workers}.")
    ctx = layout.get("context") or {}
    if ctx.get("limit"):                 # what decided the context (planner.context.ContextChoice)
        text += f" Context set by {ctx['limit']}: {ctx.get('reason', '')}."
    if not layout.get("fits", True):
        text = "Will not fit. " + text
    return text


PROMPT_CACHE_NOTE = ("the runner's prompt cache: prompts of conversations that lost their slot, kept in host RAM "
                     "so a returning conversation skips them; it grows with use up to its limit")
PROJECTOR_NOTE = ("the vision projector (mmproj): its weights and the image encoder's compute buffer, where mtmd "
                  "puts it (the first GPU, else the CPU)")
DRAFT_NOTE = ("the draft model of speculative decoding (the `draft` option): its weights, KV cache and compute "
              "buffer, planned with the model's")
MAPPED_NOTE = "mapped file pages, reclaimable (llama.cpp counts them in CPU_Mapped; the kernel can drop them)"
# Layer-strip colours, one per device: CPU is always the first (teal); GPUs take the rest in order.
CPU_COLOR = "#72b7b2"
GPU_COLORS = ("#4c78a8", "#54a24b", "#eeca3b", "#ff9da6", "#9d755d", "#bab0ac", "#f58518", "#b279a2")


def exact_bytes(n: int) -> str:
    return f"{format_bytes(n)} ({int(n):,} bytes)"


@dataclass
class Segment:
    kind: str
    bytes: int

    @property
    def label(self) -> str:
        return SEGMENT_LABELS[self.kind]


@dataclass
class Column:
    device_id: str
    name: str
    capacity: int                   # the device's memory
    segments: list[Segment] = field(default_factory=list)   # stacked bottom to top (OVER is not stacked)
    mapped: int = 0                 # all of the plan's mapped file pages (the MAPPED segment shows what free room holds)

    def get(self, kind: str) -> int:
        if kind == OVER:
            return self.over
        return sum(s.bytes for s in self.segments if s.kind == kind)

    @property
    def total(self) -> int:
        """Height of the bar: the capacity, or what is stacked when a plan needs more than there is."""
        return max(self.capacity, sum(s.bytes for s in self.segments))

    @property
    def over(self) -> int:
        """Bytes above the device's capacity (a plan that does not fit)."""
        return max(0, sum(s.bytes for s in self.segments) - self.capacity)

    @property
    def fits(self) -> bool:
        return self.over == 0


def _plan_parts(dp: dict) -> dict[str, int]:
    weights = sum(int(v) for v in (dp.get("weights") or {}).values())
    # the context checkpoints (copies of recurrent / sliding-window cache state) count with the KV cache
    return {WEIGHTS: weights, KV: int(dp.get("kv") or 0) + int(dp.get("checkpoints") or 0),
            COMPUTE: int(dp.get("compute") or 0) + int(dp.get("output") or 0),
            PROJECTOR: int(dp.get("projector") or 0), DRAFT: int(dp.get("draft") or 0)}


def device_columns(inventory: dict | None, layout: dict | None, resident: bool = False,
                   prompt_cache: int = 0) -> list[Column]:
    """One column per device: system RAM first, then each GPU in inventory order.

    `resident=True` means the model is loaded, so the inventory's free memory already excludes what it uses:
    "used by others" is then used minus ours. For a plan (what-if), ours is placed on top of what is used now,
    and whatever exceeds the free memory shows as "does not fit". `prompt_cache`: bytes the loaded model's
    prompt cache holds in host RAM (its own kind on the CPU column).
    """
    inventory = inventory or {}
    plans = {dp["device_id"]: _plan_parts(dp) for dp in (layout or {}).get("devices", [])}
    mapped_of = {dp["device_id"]: int(dp.get("mapped") or 0) for dp in (layout or {}).get("devices", [])}
    devices: list[tuple[str, str, int, int]] = []
    host_total = int(inventory.get("host_ram_total") or 0)
    if host_total or "CPU" in plans:
        cpu_name = inventory.get("cpu_name") or "CPU"
        devices.append(("CPU", f"System RAM ({cpu_name})" if cpu_name != "CPU" else "System RAM",
                        host_total, int(inventory.get("host_ram_available") or 0)))
    for d in inventory.get("devices", []):
        if d.get("kind") == "cpu":
            continue
        devices.append((d["id"], d.get("name") or d["id"], int(d.get("total") or 0), int(d.get("free") or 0)))
    known = {d[0] for d in devices}
    for dev_id, parts in plans.items():      # a plan on a device the inventory does not list: show it anyway
        if dev_id not in known:
            devices.append((dev_id, dev_id, sum(parts.values()), sum(parts.values()) if resident else 0))

    columns = []
    for dev_id, name, total, free in devices:
        parts = dict(plans.get(dev_id, {WEIGHTS: 0, KV: 0, COMPUTE: 0, PROJECTOR: 0, DRAFT: 0}))
        parts[PROMPT_CACHE] = prompt_cache if dev_id == "CPU" else 0
        ours = sum(parts.values())
        used = max(0, total - free)
        others = max(0, used - ours) if resident else used
        free_after = max(0, total - others - ours)
        mapped = mapped_of.get(dev_id, 0)
        shown = min(mapped, free_after)      # reclaimable page cache: it takes free room, never causes "over"
        segs = [Segment(k, parts[k]) for k in OUR_KINDS]
        segs += [Segment(MAPPED, shown), Segment(OTHERS, others), Segment(FREE, free_after - shown)]
        columns.append(Column(dev_id, name, total, segs, mapped=mapped))
    return columns


@dataclass
class LayerCell:
    index: int
    device: str              # where the layer's attention/dense weights sit
    expert_device: str = ""  # where its MoE experts sit ("" for a dense layer)

    @property
    def split(self) -> bool:
        return bool(self.expert_device) and self.expert_device != self.device

    def describe(self) -> str:
        if not self.expert_device:
            return f"Layer {self.index}: on {self.device}"
        if self.split:
            return f"Layer {self.index}: attention on {self.device}, experts on {self.expert_device}"
        return f"Layer {self.index}: attention and experts on {self.device}"


def layer_cells(layout: dict | None) -> list[LayerCell]:
    if not layout:
        return []
    experts = list(layout.get("expert_device") or [])
    return [LayerCell(i, dev, experts[i] if i < len(experts) else "")
            for i, dev in enumerate(layout.get("layer_device") or [])]


def device_colors(device_ids) -> dict[str, str]:
    colors, gpu_i = {}, 0
    for d in device_ids:
        if d in colors:
            continue
        if d == "CPU":
            colors[d] = CPU_COLOR
        else:
            colors[d] = GPU_COLORS[gpu_i % len(GPU_COLORS)]
            gpu_i += 1
    return colors


def layout_device_ids(layout: dict | None, inventory: dict | None = None) -> list[str]:
    ids = ["CPU"]
    for d in (inventory or {}).get("devices", []):
        if d.get("kind") != "cpu" and d["id"] not in ids:
            ids.append(d["id"])
    for d in (layout or {}).get("devices", []):
        if d["device_id"] not in ids:
            ids.append(d["device_id"])
    return ids


# llama.cpp's buffer kinds (app.ggml.alloc_report.KINDS), in the order the table lists them
REPORT_KINDS = ("model", "repack", "kv", "compute", "output", "projector", "draft")
REPORT_LABELS = {"model": "model (file mapping)", "repack": "repacked weights", "kv": "KV cache",
                 "compute": "compute graph", "output": "output buffer", "projector": "vision projector",
                 "draft": "draft model"}


def predicted_kinds_of(layout: dict | None) -> dict[str, dict[str, int]]:
    """Per device, what llama.cpp's buffer lines will say for this plan (`Layout.to_dict()`), in its own kinds:
    "model" = the weights it keeps in the file mapping (all weights but the repacked ones) + the mapped file
    pages around them (`mapped`); "repack" = the CPU backend's repacked copies. The same rule as
    app.engine.planner.verify.predicted_of and /api/ps "predicted_kinds", for plain dicts."""
    out = {}
    for dp in (layout or {}).get("devices", []):
        weights = {k: int(v) for k, v in (dp.get("weights") or {}).items()}
        rp = weights.get("repack", 0)
        kv, comp, outb = int(dp.get("kv") or 0), int(dp.get("compute") or 0), int(dp.get("output") or 0)
        proj, draft = int(dp.get("projector") or 0), int(dp.get("draft") or 0)
        if sum(weights.values()) or kv or comp or outb or proj or draft:
            out[dp["device_id"]] = {"model": sum(weights.values()) - rp + int(dp.get("mapped") or 0),
                                    "repack": rp, "kv": kv, "compute": comp, "output": outb}
            if proj:
                out[dp["device_id"]]["projector"] = proj
            if draft:
                out[dp["device_id"]]["draft"] = draft
    return out


@dataclass
class Comparison:
    device_id: str
    predicted: int
    actual: int | None
    kind: str = ""                   # "" = the device's total; else one of REPORT_KINDS
    mapped: int = 0                  # of `predicted`: mapped file pages (reclaimable), counted by llama.cpp
    parts: list["Comparison"] = field(default_factory=list)   # per kind (device rows, when kinds are known)

    @property
    def diff(self) -> int | None:
        return None if self.actual is None else self.actual - self.predicted

    @property
    def label(self) -> str:
        return self.device_id if not self.kind else "  " + REPORT_LABELS.get(self.kind, self.kind)

    def tooltip(self, column: int) -> str | None:
        """Exact bytes of a cell (1 predicted, 2 actual, 3 difference), and what "model" holds."""
        value = (None, self.predicted, self.actual, self.diff)[column]
        if value is None:
            return None
        lines = [f"{value:,} bytes"]
        if column == 1 and self.mapped:
            lines.append(f"includes {exact_bytes(self.mapped)} of {MAPPED_NOTE}")
        if column == 1 and not self.kind and self.parts:
            lines.append("as llama.cpp reports it: " + ", ".join(
                f"{p.kind} {format_bytes(p.predicted)}" for p in self.parts))
        return "\n".join(lines)


def predicted_vs_actual(predicted: dict | None, actual: dict | None, layout: dict | None = None,
                        predicted_kinds: dict | None = None) -> list[Comparison]:
    """Rows for the side-by-side table, one per device, each with its per-kind `parts`; like with like: the
    prediction as llama.cpp will report it (`predicted_kinds`, "strata.predicted_kinds" of /api/ps, else derived
    from the layout: totals + mapped file pages) against `actual` {device: {"model","repack","kv","compute",
    "output"}}. Only when neither is there (an older service) the totals of `predicted` {device: bytes}."""
    kinds = {d: {k: int(v) for k, v in ks.items()} for d, ks in (predicted_kinds or {}).items()}
    if not kinds and layout:
        kinds = predicted_kinds_of(layout)
    mapped = {dp["device_id"]: int(dp.get("mapped") or 0) for dp in (layout or {}).get("devices", [])}
    pred = {d: sum(ks.values()) for d, ks in kinds.items()} or {k: int(v) for k, v in (predicted or {}).items()}
    act_kinds = {k: ({kk: int(x) for kk, x in v.items()} if isinstance(v, dict) else None)
                 for k, v in (actual or {}).items()}
    act = {k: sum(int(x) for x in v.values()) if isinstance(v, dict) else int(v) for k, v in (actual or {}).items()}
    ids = list(pred) + [k for k in act if k not in pred]
    rows = []
    for d in ids:
        row = Comparison(d, pred.get(d, 0), act.get(d), mapped=mapped.get(d, 0) if d in kinds else 0)
        if d in kinds:
            ak = act_kinds.get(d)
            for k in REPORT_KINDS:
                p, a = kinds[d].get(k, 0), (ak.get(k, 0) if ak is not None else None)
                if p or a:
                    row.parts.append(Comparison(d, p, a, kind=k, mapped=row.mapped if k == "model" else 0))
        rows.append(row)
    return rows

"""Plain data behind the memory visualizer (no Qt): device columns, layer cells, colours, byte formatting.

Input is what the API returns: `Inventory.to_dict()` and `Layout.to_dict()` (from `/api/ps` "strata" or
`POST /api/layout`). Pure functions, so the picture's numbers are testable without painting anything.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Segment kinds in the order they stack, bottom to top. OVER is not a segment: it marks what lies above capacity.
WEIGHTS, KV, COMPUTE, OTHERS, FREE, OVER = "weights", "kv", "compute", "others", "free", "over"
SEGMENT_ORDER = (WEIGHTS, KV, COMPUTE, OTHERS, FREE)
SEGMENT_LABELS = {
    WEIGHTS: "Model weights", KV: "KV cache", COMPUTE: "Compute graph", OTHERS: "Used by others",
    FREE: "Free", OVER: "Does not fit",
}
SEGMENT_COLORS = {
    WEIGHTS: "#4c78a8", KV: "#f58518", COMPUTE: "#b279a2", OTHERS: "#9d9d9d", FREE: "#e9ecef", OVER: "#e45756",
}
# Layer-strip colours, one per device: CPU is always the first (teal); GPUs take the rest in order.
CPU_COLOR = "#72b7b2"
GPU_COLORS = ("#4c78a8", "#54a24b", "#eeca3b", "#ff9da6", "#9d755d", "#bab0ac", "#f58518", "#b279a2")


def format_bytes(n: int | float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


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
    return {WEIGHTS: weights, KV: int(dp.get("kv") or 0),
            COMPUTE: int(dp.get("compute") or 0) + int(dp.get("output") or 0)}


def device_columns(inventory: dict | None, layout: dict | None, resident: bool = False) -> list[Column]:
    """One column per device: system RAM first, then each GPU in inventory order.

    `resident=True` means the model is loaded, so the inventory's free memory already excludes what it uses:
    "used by others" is then used minus ours. For a plan (what-if), ours is placed on top of what is used now,
    and whatever exceeds the free memory shows as "does not fit".
    """
    inventory = inventory or {}
    plans = {dp["device_id"]: _plan_parts(dp) for dp in (layout or {}).get("devices", [])}
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
        parts = plans.get(dev_id, {WEIGHTS: 0, KV: 0, COMPUTE: 0})
        ours = sum(parts.values())
        used = max(0, total - free)
        others = max(0, used - ours) if resident else used
        free_after = max(0, total - others - ours)
        segs = [Segment(k, parts[k]) for k in (WEIGHTS, KV, COMPUTE)]
        segs += [Segment(OTHERS, others), Segment(FREE, free_after)]
        columns.append(Column(dev_id, name, total, segs))
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


@dataclass
class Comparison:
    device_id: str
    predicted: int
    actual: int | None

    @property
    def diff(self) -> int | None:
        return None if self.actual is None else self.actual - self.predicted


def predicted_vs_actual(predicted: dict | None, actual: dict | None, layout: dict | None = None) -> list[Comparison]:
    """Rows for the side-by-side table. `predicted` is {device: bytes} ("strata.predicted"); when absent it is
    taken from the layout's device plans. `actual` is {device: {"model","kv","compute","output"}}."""
    pred = {k: int(v) for k, v in (predicted or {}).items()}
    if not pred and layout:
        pred = {dp["device_id"]: sum(_plan_parts(dp).values()) for dp in layout.get("devices", [])}
    act = {k: sum(int(x) for x in v.values()) if isinstance(v, dict) else int(v) for k, v in (actual or {}).items()}
    ids = list(pred) + [k for k in act if k not in pred]
    return [Comparison(d, pred.get(d, 0), act.get(d)) for d in ids]

"""Plain data behind the what-if planner (no Qt): common GPUs with their memory, a simulated machine built from
picks (this machine's RAM and cores, N of a kind, custom sizes) in the STRATA_DEVICES JSON format that
`POST /api/layout` takes as "devices", and the differences between two plans shown side by side.
"""
from __future__ import annotations

from dataclasses import dataclass

from app.gui.memory.memory_data import layers_placed

GiB = 1 << 30
MiB = 1 << 20
# What a driver and desktop typically hold on an idle card: a simulated GPU starts with this much in use.
DRIVER_RESERVED = 256 * MiB


@dataclass(frozen=True)
class GpuPreset:
    name: str
    vram_gib: float
    backend: str = "CUDA"

    @property
    def label(self) -> str:
        return f"{self.name} ({self.vram_gib:g} GB)"


GPU_PRESETS: tuple[GpuPreset, ...] = (
    GpuPreset("NVIDIA GeForce RTX 3060", 12), GpuPreset("NVIDIA GeForce RTX 4060", 8),
    GpuPreset("NVIDIA GeForce RTX 4060 Ti", 16), GpuPreset("NVIDIA GeForce RTX 3090", 24),
    GpuPreset("NVIDIA GeForce RTX 4090", 24), GpuPreset("NVIDIA GeForce RTX 5090", 32),
    GpuPreset("NVIDIA RTX A6000", 48), GpuPreset("NVIDIA A100", 40), GpuPreset("NVIDIA A100", 80),
    GpuPreset("NVIDIA H100", 80), GpuPreset("NVIDIA H200", 141), GpuPreset("AMD Radeon RX 7900 XTX", 24, "ROCm"),
    GpuPreset("AMD Radeon RX 7600", 8, "ROCm"), GpuPreset("Intel Arc A770", 16, "SYCL"),
)


@dataclass(frozen=True)
class GpuPick:
    """One simulated GPU in the list: a preset's or a custom size."""
    name: str
    total: int
    backend: str = "CUDA"

    @property
    def label(self) -> str:
        return f"{self.name} — {self.total / GiB:g} GiB"


def picks_of(preset: GpuPreset, count: int) -> list[GpuPick]:
    return [GpuPick(preset.name, int(preset.vram_gib * GiB), preset.backend) for _ in range(max(0, count))]


def custom_pick(size_gib: float, name: str = "") -> GpuPick:
    return GpuPick(name.strip() or f"Custom GPU ({size_gib:g} GiB)", int(size_gib * GiB))


def machine_picks(inventory: dict | None) -> list[GpuPick]:
    """This machine's GPUs as picks (their real totals), to start a simulated machine from."""
    return [GpuPick(d.get("name") or d["id"], int(d.get("total") or 0), d.get("backend") or "CUDA")
            for d in (inventory or {}).get("devices", []) if d.get("kind") != "cpu"]


def simulated_inventory(gpus: list[GpuPick], ram_gib: float, cpu_cores: int, ram_free_gib: float | None = None,
                        cpu_name: str = "Simulated CPU", cpu_features: list[str] | None = None) -> dict:
    """The STRATA_DEVICES JSON for a machine with these GPUs (each with DRIVER_RESERVED in use) and this RAM."""
    per_backend: dict[str, int] = {}
    devices = []
    for g in gpus:
        prefix = {"ROCm": "ROCm", "SYCL": "SYCL", "Vulkan": "Vulkan", "Metal": "Metal"}.get(g.backend, "CUDA")
        i = per_backend.get(prefix, 0)
        per_backend[prefix] = i + 1
        devices.append({"id": f"{prefix}{i}", "name": g.name, "kind": "gpu", "backend": "SIM", "total": g.total,
                        "free": max(0, g.total - DRIVER_RESERVED)})
    ram = int(ram_gib * GiB)
    free = int((ram_free_gib if ram_free_gib is not None else ram_gib * 0.75) * GiB)
    inv = {"devices": devices, "host_ram_total": ram, "host_ram_available": min(free, ram), "cpu_cores": cpu_cores,
           "cpu_name": cpu_name, "simulated": True}
    if cpu_features:           # which weights llama.cpp repacks on this CPU: the plan's RAM depends on it
        inv["cpu_features"] = list(cpu_features)
    return inv


# ---- two plans side by side --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Difference:
    label: str
    a: str
    b: str

    @property
    def differs(self) -> bool:
        return self.a != self.b


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def plan_facts(result: dict | None) -> dict[str, str]:
    """What a person compares between two plans, from a `POST /api/layout` answer, as display strings."""
    if not result:
        return {}
    lay = result.get("layout") or {}
    devices = lay.get("devices") or []
    blocks = lay.get("layer_device") or []
    on_gpu, remote = layers_placed(blocks)
    kv = sum(int(d.get("kv") or 0) for d in devices)
    facts = {"Fits": "yes" if result.get("fits", lay.get("fits", True)) else "no",
             "Layers on GPU": f"{on_gpu} of {len(blocks)}" + (f" (+{remote} on RPC workers)" if remote else ""),
             "Context": f"{lay.get('n_ctx')} ({(lay.get('options') or {}).get('num_ctx')} × {lay.get('n_parallel')})",
             "KV cache type": f"{lay.get('type_k')}/{lay.get('type_v')}",
             "KV cache": _gib(kv)}
    for d in devices:
        total = sum(int(v) for v in (d.get("weights") or {}).values()) + sum(
            int(d.get(k) or 0) for k in ("kv", "checkpoints", "compute", "output", "projector"))   # as the bars stack
        facts[f"On {d['device_id']}"] = _gib(total)
    return facts


def plan_differences(a: dict | None, b: dict | None) -> list[Difference]:
    """Rows for the comparison table: every fact of either plan, A's order first ("—" where a plan lacks one)."""
    fa, fb = plan_facts(a), plan_facts(b)
    keys = list(fa) + [k for k in fb if k not in fa]
    return [Difference(k, fa.get(k, "—"), fb.get(k, "—")) for k in keys]

"""Device inventory types (contract between discovery, planner, service and GUI)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace


@dataclass(frozen=True)
class Device:
    id: str                 # stable id: "CPU", the ggml device name ("CUDA0", "Vulkan0", ...), or for a remote
                            # device "RPC<i>[host:port]" (device i of that worker; llama.cpp's buffer name for it)
    name: str               # human name ("NVIDIA GeForce RTX 4090", "AMD EPYC ...")
    kind: str               # "cpu" | "gpu" | "igpu" | "accel"
    backend: str            # "CPU", "CUDA", "Metal", "Vulkan", ... ("SIM" for simulated)
    total: int              # bytes
    free: int               # bytes (NVML's figure when NVML knows the device)
    index: int = 0          # ggml device index
    uuid: str | None = None
    pci_bus_id: str | None = None
    driver: str | None = None
    utilization: int | None = None   # percent, from NVML
    ggml_free: int | None = None     # what ggml reported, kept when NVML disagrees
    nvml_free: int | None = None
    endpoint: str | None = None      # a remote device: the "host:port" of the `strata worker` serving it (RPC)


@dataclass(frozen=True)
class Inventory:
    devices: tuple[Device, ...]          # GPUs/accelerators, in ggml order (CPU not included), then remote devices
    host_ram_total: int
    host_ram_available: int
    cpu_cores: int
    cpu_name: str = ""
    simulated: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)   # why NVML/GPUs are missing, disagreements...
    # ggml CPU backend features ("AVX2", "AVX512", "NEON", "DOTPROD", "MATMUL_INT8", "SVE_CNT=32", "REPACK", ...):
    # decide which weights llama.cpp repacks on the CPU (app.engine.planner.repack); () = unknown, no repacking modelled
    cpu_features: tuple[str, ...] = field(default_factory=tuple)
    # the bytes a plan may use in all (GPUs and host RAM together) under Strata's memory cap (STRATA_MAX_MEMORY /
    # Settings), less what Strata's loaded models hold (`subtract`); None: no cap. The planner honours it as it
    # honours free memory (engine/planner/placement.py)
    memory_cap: int | None = None
    # the CPU's weights can be read into process memory backed by 2 MiB pages (discovery.host.huge_pages_usable): the
    # planner then has llama.cpp read them instead of mapping the file (placement.weights_load_mode)
    huge_pages: bool = False

    @property
    def gpus(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.kind != "cpu")

    @property
    def remote(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.endpoint)

    def to_dict(self) -> dict:
        return asdict(self)


def subtract(inv: Inventory, used: dict[str, int]) -> Inventory:
    """The inventory minus bytes already promised (per device id; "CPU" = host RAM): what a new plan may use."""
    if not used:
        return inv
    devices = tuple(replace(d, free=max(0, d.free - used.get(d.id, 0))) for d in inv.devices)
    cap = None if inv.memory_cap is None else max(0, inv.memory_cap - sum(used.values()))
    return replace(inv, devices=devices, host_ram_available=max(0, inv.host_ram_available - used.get("CPU", 0)),
                   memory_cap=cap)


def with_cap(inv: Inventory, cap: int | None) -> Inventory:
    """`inv` under a memory cap of `cap` bytes in all (None or 0: none)."""
    return replace(inv, memory_cap=cap or None)


def within_cap(inv: Inventory, margin: int = 0) -> Inventory:
    """`inv` as a plan may use it under its memory cap: no device offers more than the cap beyond the `margin` the
    planner keeps free on each (so a device's budget, free less margin, is at most the cap; the placement then
    checks the plan's total against it)."""
    if inv.memory_cap is None:
        return inv
    room = inv.memory_cap + max(0, margin)
    return replace(inv, devices=tuple(replace(d, free=min(d.free, room)) for d in inv.devices),
                   host_ram_available=min(inv.host_ram_available, room))

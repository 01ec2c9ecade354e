"""Device inventory: what llama.cpp can use here (ggml devices, in a child process), merged with NVML and host facts,
plus the devices of the RPC workers named in STRATA_RPC / settings (app.discovery.remote), marked remote.

`discover(sim_path=None) -> Inventory`. A simulated inventory comes from `sim_path` (the config's STRATA_DEVICES).
"""
from __future__ import annotations

from dataclasses import replace

from app.discovery import remote
from app.discovery.cpu_features import cpuinfo_features
from app.discovery.ggml_probe import probe_ggml
from app.discovery.host import cpu_cores, cpu_name, host_memory, huge_pages_usable
from app.discovery.inventory import Device, Inventory
from app.discovery.nvml import normalize_pci, nvml_gpus
from app.discovery.simulated import load_simulated

__all__ = ["discover", "merge", "Device", "Inventory"]

_BACKEND_PREFIXES = ("CUDA", "ROCm", "HIP", "Vulkan", "Metal", "MTL", "SYCL", "OpenCL", "CANN", "MUSA", "RPC",
                     "BLAS", "WebGPU")


def _backend_of(name: str, reported: str) -> str:
    if reported:
        return reported
    for p in _BACKEND_PREFIXES:
        if name.startswith(p):
            return p
    return name.rstrip("0123456789") or name


def merge(ggml_devices: list[dict], nvml: list[dict], host: tuple[int, int], cores: int, cpu_name: str,
          notes: list[str], cpu_features: tuple[str, ...] = (), huge_pages: bool = False) -> Inventory:
    """Pure merge of the three sources. GPUs are matched to NVML by PCI bus id, then UUID, then name (in order);
    NVML's free memory wins and both figures are kept. `cpu_features`: ggml's CPU backend features."""
    used_nvml: set[int] = set()
    devices: list[Device] = []
    for d in ggml_devices:
        kind = d.get("type", "gpu")
        if kind in ("cpu", "meta"):
            if kind == "cpu" and d.get("description") and not cpu_name:
                cpu_name = d["description"]
            continue
        match = None
        pci = normalize_pci(d.get("device_id"))
        for j, g in enumerate(nvml):
            if j not in used_nvml and pci is not None and normalize_pci(g.get("pci_bus_id")) == pci:
                match = j
                break
        if match is None and d.get("uuid"):
            match = next((j for j, g in enumerate(nvml) if j not in used_nvml and g.get("uuid") == d["uuid"]), None)
        is_cuda = d.get("backend", "").upper() == "CUDA" or str(d.get("name", "")).startswith("CUDA")
        if match is None and is_cuda:
            match = next((j for j, g in enumerate(nvml) if j not in used_nvml and g.get("name") == d.get("description")), None)
        free, total = int(d.get("free", 0)), int(d.get("total", 0))
        extra = {}
        if match is not None:
            used_nvml.add(match)
            g = nvml[match]
            extra = dict(uuid=g.get("uuid"), pci_bus_id=g.get("pci_bus_id"), driver=g.get("driver"),
                         utilization=g.get("utilization"), ggml_free=free, nvml_free=g["free"])
            if abs(g["free"] - free) > 64 * 1024 * 1024:
                notes.append(f"{d['name']}: NVML reports {g['free'] / 2**20:.0f} MiB free, ggml "
                             f"{free / 2**20:.0f} MiB; using NVML's figure")
            free, total = g["free"], g["total"] or total
        else:
            extra = dict(pci_bus_id=d.get("device_id"), ggml_free=free)
        devices.append(Device(id=d["name"], name=d.get("description") or d["name"], kind=kind,
                              backend=_backend_of(d["name"], d.get("backend", "")), total=total, free=free,
                              index=int(d.get("index", len(devices))), **extra))
    for j, g in enumerate(nvml):
        if j not in used_nvml:
            notes.append(f"NVML sees {g['name']} ({g.get('pci_bus_id')}) but this llama.cpp build cannot use it "
                         f"(CPU-only build, or hidden by CUDA_VISIBLE_DEVICES)")
    ram_total, ram_avail = host
    return Inventory(devices=tuple(devices), host_ram_total=ram_total, host_ram_available=ram_avail,
                     cpu_cores=cores, cpu_name=cpu_name, simulated=False, notes=tuple(notes),
                     cpu_features=tuple(cpu_features), huge_pages=huge_pages)


def discover(sim_path: str | None = None) -> Inventory:
    """The device inventory. `sim_path` (the service's STRATA_DEVICES, read by its config) -> simulated inventory
    from JSON (ValueError if bad)."""
    if sim_path:
        return load_simulated(sim_path)
    notes: list[str] = []
    workers, worker_notes = remote.configured_workers()
    workers, down = remote.reachable_workers(workers) if workers else ([], [])
    notes += worker_notes + down
    probe, why = probe_ggml(rpc_endpoints=workers)
    if probe is None and workers:
        # the child died while talking to a worker (llama.cpp's RPC client aborts on one that goes away):
        # the local devices still count, without the workers
        notes.append(f"probing the RPC workers ({', '.join(workers)}) failed: {why}; planning without them")
        workers = []
        probe, why = probe_ggml()
    ggml_devices = []
    features = tuple(probe.get("cpu_features") or ()) if probe else ()
    if probe is None:
        notes.append(f"{why}; planning for the CPU only")
    else:
        ggml_devices = probe["devices"]
        if not probe.get("gpu_offload"):
            notes.append("this llama.cpp build has no GPU backend (CPU only)")
        elif not any(d.get("type") in ("gpu", "igpu") for d in ggml_devices):
            # llama_supports_gpu_offload() is also true for a build with only the RPC backend
            notes.append("no local GPU (this llama.cpp build has no GPU backend, or it finds no GPU)")
    nv, nv_note = nvml_gpus()
    if nv_note:
        notes.append(nv_note)
    inv = merge(ggml_devices, nv, host_memory(), cpu_cores(), cpu_name(), notes, features or cpuinfo_features(),
                huge_pages=huge_pages_usable())
    if probe is not None and probe.get("remote_error"):
        inv = replace(inv, notes=inv.notes + (f"RPC workers not used: {probe['remote_error']}",))
    found = (probe or {}).get("remote") or []
    if found:
        inv = replace(inv, devices=inv.devices + tuple(remote.remote_devices(found, len(inv.devices))))
    return inv

"""Simulated inventories from JSON: for tests and what-if planning ("how would this model sit on two 24 GB GPUs?").

Schema (sizes are bytes, or strings with a unit: "24 GiB", "512MiB", "8GB"):
    {"devices": [{"id": "CUDA0", "name": "RTX 4090", "total": "24 GiB", "free": "23 GiB",
                  "kind": "gpu", "backend": "CUDA"},             # kind/backend/free optional (gpu, SIM, = total)
                 {"endpoint": "192.168.1.20:50052", "total": "24 GiB"}],   # a remote device (strata worker):
                                                  # id "RPC0[192.168.1.20:50052]" (its index at that worker) by default
     "host_ram_total": "64 GiB", "host_ram_available": "48 GiB", "cpu_cores": 16, "cpu_name": "...",
     "cpu_features": ["AVX2", "REPACK"],    # optional: ggml CPU features (which weights llama.cpp repacks)
     "huge_pages": true}                    # optional: weights read into 2 MiB pages (a CPU-only plan reads them)
A missing or wrong field raises ValueError naming it (e.g. `devices[1].total`).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from app.discovery.inventory import Device, Inventory
from app.ggml import rpc

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000 ** 2, "mb": 1000 ** 2, "mib": 1024 ** 2,
          "g": 1000 ** 3, "gb": 1000 ** 3, "gib": 1024 ** 3, "t": 1000 ** 4, "tb": 1000 ** 4, "tib": 1024 ** 4}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")
KINDS = ("gpu", "igpu", "accel", "cpu")


def parse_size(value, field: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{field}: expected a size in bytes or a string like '24 GiB', got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"{field}: size must be >= 0, got {value!r}")
        return int(value)
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m and m.group(2).lower() in _UNITS:
            return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    raise ValueError(f"{field}: expected a size in bytes or a string like '24 GiB', got {value!r}")


def _req(d: dict, key: str, where: str):
    if key not in d:
        raise ValueError(f"simulated inventory: missing field {where}{key}")
    return d[key]


def _endpoint(d: dict, where: str) -> str | None:
    """A remote device's worker ("host:port"), or None for a local device."""
    if d.get("endpoint") is None:
        return None
    if not isinstance(d["endpoint"], str):
        raise ValueError(f"simulated inventory: {where}endpoint must be a \"host:port\" string, got {d['endpoint']!r}")
    try:
        return rpc.parse_endpoint(d["endpoint"])
    except ValueError as e:
        raise ValueError(f"simulated inventory: {where}endpoint: {e}") from None


def inventory_from_dict(data: dict) -> Inventory:
    if not isinstance(data, dict):
        raise ValueError("simulated inventory: expected a JSON object with 'devices', 'host_ram_total', ...")
    devs = _req(data, "devices", "")
    if not isinstance(devs, list):
        raise ValueError("simulated inventory: field devices must be a list")
    out = []
    seen = set()
    per_worker: dict[str, int] = {}
    for i, d in enumerate(devs):
        w = f"devices[{i}]."
        if not isinstance(d, dict):
            raise ValueError(f"simulated inventory: {w[:-1]} must be an object")
        endpoint = _endpoint(d, w)
        if "id" in d or not endpoint:
            dev_id = _req(d, "id", w)
        else:
            dev_id = rpc.remote_id(endpoint, per_worker.get(endpoint, 0))
        if not isinstance(dev_id, str) or not dev_id or dev_id.upper() == "CPU" or dev_id in seen:
            raise ValueError(f"simulated inventory: {w}id must be a unique non-empty name other than CPU, got {dev_id!r}")
        if endpoint is None and (remote := rpc.parse_remote_id(dev_id)):
            endpoint = remote[0]                             # "RPC0[host:port]" names a remote device by itself
        if endpoint:
            per_worker[endpoint] = per_worker.get(endpoint, 0) + 1
        seen.add(dev_id)
        total = parse_size(_req(d, "total", w), f"{w}total")
        free = parse_size(d.get("free", total), f"{w}free")
        if free > total:
            raise ValueError(f"simulated inventory: {w}free ({free}) is more than {w}total ({total})")
        kind = d.get("kind", "gpu")
        if kind not in KINDS:
            raise ValueError(f"simulated inventory: {w}kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if endpoint and kind == "cpu":     # llama.cpp's RPC client offloads to every remote device as to a GPU
            raise ValueError(f"simulated inventory: {w}kind: a remote device (endpoint {endpoint}) cannot be 'cpu' "
                             f"(a worker serving its CPU is offloaded to like a GPU: leave kind out)")
        name = d.get("name", f"worker {endpoint}" if endpoint else dev_id)
        out.append(Device(id=dev_id, name=str(name), kind=kind, backend=str(d.get("backend", "RPC" if endpoint else "SIM")),
                          total=total, free=free, index=i, uuid=d.get("uuid"), pci_bus_id=d.get("pci_bus_id"),
                          endpoint=endpoint))
    ram_total = parse_size(_req(data, "host_ram_total", ""), "host_ram_total")
    ram_avail = parse_size(data.get("host_ram_available", ram_total), "host_ram_available")
    cores = _req(data, "cpu_cores", "")
    if not isinstance(cores, int) or isinstance(cores, bool) or cores < 1:
        raise ValueError(f"simulated inventory: cpu_cores must be a positive integer, got {cores!r}")
    feats = data.get("cpu_features", [])
    if not isinstance(feats, list) or not all(isinstance(f, str) and f for f in feats):
        raise ValueError(f"simulated inventory: cpu_features must be a list of names like \"AVX2\", got {feats!r}")
    huge_pages = data.get("huge_pages", False)
    if not isinstance(huge_pages, bool):
        raise ValueError(f"simulated inventory: huge_pages must be true or false, got {huge_pages!r}")
    return Inventory(devices=tuple(out), host_ram_total=ram_total, host_ram_available=ram_avail, cpu_cores=cores,
                     cpu_name=str(data.get("cpu_name", "simulated CPU")), simulated=True,
                     notes=("simulated inventory",), cpu_features=tuple(feats), huge_pages=huge_pages)


def load_simulated(path) -> Inventory:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ValueError(f"simulated inventory {p}: cannot read ({e.strerror or e})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"simulated inventory {p}: not valid JSON ({e})") from None
    try:
        return inventory_from_dict(data)
    except ValueError as e:
        raise ValueError(f"{e} (in {p})") from None

"""Remote devices: the `strata worker`s this machine may use (llama.cpp RPC), as inventory devices.

Workers are named in `STRATA_RPC=host:port,...` or, when that is unset, the settings file's `rpc_workers` (the
desktop app's Settings dialog). Read by `strata devices`, `strata plan` and `strata serve`
through `discover()`. A worker that is unreachable, busy (a worker serves one client at a time) or malformed in
the list is a note in the inventory, never an error: planning goes on with the devices that answered.

Each answering worker's devices join the inventory with their free and total memory as llama.cpp's RPC client
reports them (`ggml_backend_rpc_get_device_memory`, asked in the device-probe child), marked with the worker's
endpoint, and with the id llama.cpp gives their buffers: `RPC<i>[host:port]`.
"""
from __future__ import annotations

import os
from dataclasses import replace

from app import settings
from app.discovery.inventory import Device, Inventory
from app.ggml import ggml_lib, rpc

HELLO_TIMEOUT_S = 3.0


def configured_workers() -> tuple[list[str], list[str]]:
    """(endpoints, notes) from STRATA_RPC ("host:port,host:port") when it is set, else from the settings file's
    `rpc_workers`; malformed entries, or a settings file that cannot be read, become notes."""
    raw = os.environ.get("STRATA_RPC")
    if raw is not None and raw.strip():
        return parse_workers(raw, "STRATA_RPC")
    try:
        listed = settings.load().get("rpc_workers")
    except settings.SettingsError as e:
        return [], [f"RPC workers from the settings file not used: {e}"]
    return parse_workers(listed, "settings rpc_workers")


def parse_workers(raw, source: str) -> tuple[list[str], list[str]]:
    """(endpoints, notes) from a comma-separated string or a list of "host:port" strings."""
    if raw is None:
        return [], []
    notes: list[str] = []
    items = raw if isinstance(raw, list) else str(raw).split(",")
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            notes.append(f"{source}: {item!r} is not a \"host:port\" string; ignored")
            continue
        if not item.strip():
            continue
        try:
            ep = rpc.parse_endpoint(item)
        except ValueError as e:
            notes.append(f"{source}: {e}; ignored")
            continue
        if ep not in out:
            out.append(ep)
    return out, notes


def reachable_workers(endpoints: list[str], timeout: float = HELLO_TIMEOUT_S) -> tuple[list[str], list[str]]:
    """(endpoints that complete a handshake now, notes on the others: why, and that planning goes without them)."""
    down = rpc.unreachable(endpoints, timeout)
    notes = [f"{why}; planning without it" for ep, why in down.items()]
    return [ep for ep in endpoints if ep not in down], notes


def probe_remote(endpoints: list[str]) -> list[dict]:
    """In the probe child: each worker's devices through llama.cpp's RPC client. Call only with endpoints that
    just answered `hello` (the client aborts the process on a worker it cannot reach)."""
    out = []
    for ep in endpoints:
        handles = ggml_lib.rpc_add_worker(ep)
        for i in range(len(handles)):
            free, total = ggml_lib.rpc_device_memory(ep, i)
            out.append({"endpoint": ep, "index": i, "free": free, "total": total})
    return out


def remote_devices(found: list[dict], first_index: int = 0) -> list[Device]:
    """Inventory devices for the probe child's `remote` list."""
    per_worker: dict[str, int] = {}
    for r in found:
        per_worker[r["endpoint"]] = per_worker.get(r["endpoint"], 0) + 1
    out = []
    for j, r in enumerate(found):
        ep, i = r["endpoint"], int(r["index"])
        label = f"worker {ep}" + (f" #{i}" if per_worker[ep] > 1 else "")
        out.append(Device(id=rpc.remote_id(ep, i), name=label, kind="gpu", backend="RPC", total=int(r["total"]),
                          free=int(r["free"]), index=first_index + j, endpoint=ep))
    return out


def reserve_workers(inv: Inventory, in_use_device_ids) -> Inventory:
    """`inv` with no room on the workers that loaded models already use: a worker serves one client (one runner)
    at a time, so a second model cannot share it whatever memory it has left."""
    busy = set(rpc.endpoints_of(in_use_device_ids))
    if not busy or not any(d.endpoint in busy for d in inv.devices):
        return inv
    devices = tuple(replace(d, free=0) if d.endpoint in busy else d for d in inv.devices)
    return replace(inv, devices=devices, notes=inv.notes + tuple(
        f"RPC worker {ep} is in use by another loaded model (a worker serves one runner at a time)"
        for ep in sorted(busy)))

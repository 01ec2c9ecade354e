"""NVIDIA GPUs through NVML (`nvidia-ml-py`): reliable free/total VRAM, name, UUID, PCI bus id, driver, utilization.

Returns ([gpu dicts], note). No driver / no library / no GPU gives ([], "why"), never an exception.
Covered by tests/unit/discovery/test_discovery.py (this machine's inventory, the NVML merge).
"""
from __future__ import annotations


def _str(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def nvml_gpus() -> tuple[list[dict], str | None]:
    try:
        import pynvml   # late: optional at run time (no NVIDIA driver, broken install): a note, not an error
    except Exception as e:  # ImportError, or a broken install
        return [], f"NVML unavailable: nvidia-ml-py not importable ({e})"
    try:
        pynvml.nvmlInit()
    except Exception as e:
        return [], f"NVML unavailable: {e} (no NVIDIA driver?)"
    out = []
    try:
        try:
            driver = _str(pynvml.nvmlSystemGetDriverVersion())
        except Exception:
            driver = None
        n = pynvml.nvmlDeviceGetCount()
        for i in range(n):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                mem = pynvml.nvmlDeviceGetMemoryInfo(h)
                g = {"index": i, "name": _str(pynvml.nvmlDeviceGetName(h)), "free": int(mem.free),
                     "total": int(mem.total), "driver": driver, "uuid": None, "pci_bus_id": None,
                     "utilization": None}
                try:
                    g["uuid"] = _str(pynvml.nvmlDeviceGetUUID(h))
                except Exception:
                    pass
                try:
                    g["pci_bus_id"] = _str(pynvml.nvmlDeviceGetPciInfo(h).busId)
                except Exception:
                    pass
                try:
                    g["utilization"] = int(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
                except Exception:
                    pass
                out.append(g)
            except Exception:
                continue
    except Exception as e:
        return out, f"NVML error: {e}"
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return out, None if out else "NVML: no NVIDIA GPU found"


def normalize_pci(bus_id: str | None) -> tuple[int, int, int, int] | None:
    """'00000000:01:00.0' (NVML) and '0000:01:00.0' (ggml) -> (domain, bus, device, function)."""
    if not bus_id:
        return None
    try:
        s = bus_id.strip().lower()
        dom, bus, rest = s.split(":")
        dev, fn = rest.split(".")
        return int(dom, 16), int(bus, 16), int(dev, 16), int(fn, 16)
    except ValueError:
        return None

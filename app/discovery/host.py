"""Host memory and CPU facts, without extra dependencies (psutil is used when installed)."""
from __future__ import annotations

import os
import platform


def host_memory() -> tuple[int, int]:
    """(total, available) bytes of system RAM."""
    try:
        import psutil  # type: ignore  # optional dependency: late, and /proc/meminfo below when missing

        vm = psutil.virtual_memory()
        return int(vm.total), int(vm.available)
    except Exception:
        pass
    try:
        vals = {}
        with open("/proc/meminfo") as f:
            for line in f:
                k, _, rest = line.partition(":")
                vals[k] = int(rest.split()[0]) * 1024
        return vals["MemTotal"], vals.get("MemAvailable", vals.get("MemFree", 0))
    except (OSError, KeyError, ValueError, IndexError):
        pass
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        return int(total), int(avail)
    except (ValueError, OSError, AttributeError):
        return 0, 0


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()

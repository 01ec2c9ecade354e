"""Host memory and CPU facts, without extra dependencies (psutil is used when installed)."""
from __future__ import annotations

import os
import platform


def host_memory() -> tuple[int, int]:
    """(total, available) bytes of system RAM."""
    try:
        import psutil  # optional dependency ([tool.mypy] knows): late, and /proc/meminfo below when missing

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


def compute_threads() -> int:
    """Default compute threads: the physical cores this process may run on, llama.cpp's own default for its tools
    (common_cpu_get_num_math): a second hardware thread of a core does not speed up matrix work, and leaving the
    siblings free keeps the rest of the desktop responsive. Linux reads the topology of the CPUs in the affinity
    mask; elsewhere psutil's physical count (optional dependency), else all logical CPUs."""
    try:
        allowed = os.sched_getaffinity(0)
        cores = set()
        for cpu in allowed:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                cores.add(f.read().strip())
        if cores:
            return len(cores)
    except (AttributeError, OSError):
        pass
    try:
        import psutil  # optional dependency: late, as in host_memory

        n = psutil.cpu_count(logical=False)
        if n:
            return int(n)
    except Exception:
        pass
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

"""Host memory and CPU facts, without extra dependencies (psutil is used when installed)."""
from __future__ import annotations

import os
import platform
import re

# the kernel's transparent huge page mode for anonymous memory: "[always] madvise never"
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
# glibc >= 2.35: malloc asks the kernel for transparent huge pages (madvise MADV_HUGEPAGE) on the chunks it maps
HUGETLB_TUNABLE = "glibc.malloc.hugetlb=1"


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


def thp_mode(path: str = THP_ENABLED) -> str:
    """The kernel's transparent huge page mode: "always", "madvise", "never", or "" (not Linux, or unreadable)."""
    try:
        with open(path) as f:
            m = re.search(r"\[(\w+)\]", f.read())
    except OSError:
        return ""
    return m.group(1) if m else ""


def glibc_version() -> tuple[int, int] | None:
    """(major, minor) of the C library's glibc, None for another C library or platform."""
    try:
        name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
        if name == "glibc":
            major, minor = version.split(".")[:2]
            return int(major), int(minor)
    except (AttributeError, ValueError, OSError):
        pass
    return None


def huge_pages_usable() -> bool:
    """Whether memory this host's processes read the weights into can sit in 2 MiB pages (huge_pages_allowed)."""
    return huge_pages_allowed(thp_mode(), glibc_version())


def huge_pages_allowed(mode: str, glibc: tuple[int, int] | None) -> bool:
    """Under this THP mode and glibc: the kernel gives every large anonymous region huge pages ("always"), or gives
    them where asked ("madvise") and glibc's malloc can be told to ask (HUGETLB_TUNABLE, glibc 2.35 and later)."""
    if mode == "always":
        return True
    return mode == "madvise" and glibc is not None and glibc >= (2, 35)


def with_hugetlb_tunable(tunables: str) -> str:
    """GLIBC_TUNABLES with malloc's huge page request added (a hugetlb value the user set stays)."""
    parts = [t for t in tunables.split(":") if t]
    if any(t.startswith("glibc.malloc.hugetlb=") for t in parts):
        return tunables
    return ":".join(parts + [HUGETLB_TUNABLE])


def anon_huge_page_bytes(path: str = "/proc/self/smaps_rollup") -> int:
    """This process's anonymous memory in transparent huge pages (0 where the kernel does not say)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0

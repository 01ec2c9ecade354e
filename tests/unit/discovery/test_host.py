"""This machine's memory and CPU facts (app/discovery/host.py), checked against what Linux itself says: the RAM
/proc/meminfo gives, the CPUs this thread may run on, and one compute thread per physical core among them."""
from __future__ import annotations

import os
import sys

import pytest

from app.discovery.host import (anon_huge_page_bytes, compute_threads, cpu_cores, cpu_name, glibc_version, host_memory,
                               huge_pages_allowed, huge_pages_usable, thp_mode, with_hugetlb_tunable)

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc and /sys")


@linux
def test_memory_is_what_proc_meminfo_says():
    with open("/proc/meminfo") as f:
        kib = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f)}
    total, available = host_memory()
    assert total == kib["MemTotal"] * 1024
    assert 0 < available <= total


@linux
def test_cores_follow_the_affinity_mask():
    allowed = os.sched_getaffinity(0)
    assert cpu_cores() == len(allowed)
    assert 1 <= compute_threads() <= cpu_cores()
    one = min(allowed)
    os.sched_setaffinity(0, {one})
    try:
        assert cpu_cores() == 1 and compute_threads() == 1
    finally:
        os.sched_setaffinity(0, allowed)
    assert cpu_cores() == len(allowed)


@linux
def test_hardware_threads_of_one_core_count_once():
    siblings = {}
    for cpu in os.sched_getaffinity(0):
        with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
            siblings.setdefault(f.read().strip(), []).append(cpu)
    assert compute_threads() == len(siblings)


def test_the_cpu_has_a_name():
    name = cpu_name()
    assert isinstance(name, str) and name
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if models:
            assert name == models[0]


@pytest.mark.parametrize("text,mode", [("always [madvise] never\n", "madvise"), ("[always] madvise never\n", "always"),
                                       ("always madvise [never]\n", "never"), ("", "")])
def test_thp_mode_is_the_bracketed_choice(tmp_path, text, mode):
    f = tmp_path / "enabled"
    f.write_text(text)
    assert thp_mode(str(f)) == mode
    assert thp_mode(str(tmp_path / "missing")) == ""


def test_huge_pages_need_the_kernel_and_for_madvise_a_glibc_that_asks():
    assert huge_pages_allowed("always", None)                     # the kernel gives them unasked
    assert huge_pages_allowed("madvise", (2, 35)) and huge_pages_allowed("madvise", (3, 0))
    assert not huge_pages_allowed("madvise", (2, 34))             # no glibc.malloc.hugetlb tunable before 2.35
    assert not huge_pages_allowed("madvise", None)                # another C library: nothing asks
    assert not huge_pages_allowed("never", (2, 36)) and not huge_pages_allowed("", (2, 36))


def test_the_hugetlb_tunable_joins_what_the_user_set():
    assert with_hugetlb_tunable("") == "glibc.malloc.hugetlb=1"
    assert with_hugetlb_tunable("glibc.malloc.arena_max=2") == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    assert with_hugetlb_tunable("glibc.malloc.hugetlb=0") == "glibc.malloc.hugetlb=0"     # the user's choice stays


@linux
def test_this_host_says_what_its_kernel_and_c_library_say():
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        assert f"[{thp_mode()}]" in f.read()
    name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
    assert name == "glibc" and glibc_version() == tuple(int(x) for x in version.split(".")[:2])
    assert huge_pages_usable() == huge_pages_allowed(thp_mode(), glibc_version())
    assert anon_huge_page_bytes() >= 0

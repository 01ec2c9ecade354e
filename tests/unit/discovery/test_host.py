"""This machine's memory and CPU facts (app/discovery/host.py), checked against what Linux itself says: the RAM
/proc/meminfo gives, the CPUs this thread may run on, and one compute thread per physical core among them."""
from __future__ import annotations

import os
import sys

import pytest

from app.discovery.host import compute_threads, cpu_cores, cpu_name, host_memory

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

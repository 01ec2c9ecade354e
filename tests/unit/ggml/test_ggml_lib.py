"""ggml device bindings, the log capture, Layout -> llama.cpp params, and the buffer-line parser, on the real
libraries (llama.cpp calls here use no_alloc + load_mode NONE, which cannot abort)."""
from __future__ import annotations

import ctypes
import sys

import pytest

from app.ggml import alloc_report, ggml_lib, llama_log
from app.engine.layout import llama_params as load_params
from app.engine.planner.search import plan
from app.engine.layout.types import PlanOptions
from app.engine.gguf.model_info import read_model_info
from app.discovery.simulated import inventory_from_dict

CPU_ONLY = inventory_from_dict({"devices": [], "host_ram_total": "16 GiB", "cpu_cores": 2})


def test_list_devices_has_the_cpu():
    devs = ggml_lib.list_devices()
    cpu = [d for d in devs if d["type"] == "cpu"]
    assert len(cpu) == 1 and cpu[0]["name"] == "CPU" and cpu[0]["total"] > 0 and cpu[0]["handle"]
    assert [d["index"] for d in devs] == list(range(len(devs)))


def test_cpu_buffer_type_is_the_one_libllama_uses():
    cpu_dev = ggml_lib.dev_by_name("CPU")
    assert ggml_lib.cpu_buffer_type() == ggml_lib.dev_buffer_type(cpu_dev) == ggml_lib.buffer_type_for("CPU")
    name = ggml_lib.api().fn("ggml_backend_buft_name")(ggml_lib.cpu_buffer_type())
    assert name == b"CPU"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/maps is Linux")
def test_only_one_copy_of_libggml_is_mapped():
    ggml_lib.api()
    maps = open("/proc/self/maps").read().splitlines()
    for lib in ("libggml-base.so", "libggml.so"):
        files = {ln.split()[-1] for ln in maps if ln.split()[-1].rsplit("/", 1)[-1].startswith(lib)}
        assert len(files) == 1, files


def test_unknown_device_is_a_clear_error():
    with pytest.raises(ValueError, match="NOPE0"):
        ggml_lib.dev_by_name("NOPE0")


def test_layout_params_reach_llama_cpp(moe_gguf):
    """Overrides, devices and no_alloc go through the raw pointers: llama.cpp logs each overridden tensor."""
    info = read_model_info(moe_gguf)
    lay = plan(info, CPU_ONLY, PlanOptions(num_ctx=512))
    from dataclasses import replace

    lay = replace(lay, tensor_buft_overrides=((r"blk\.(0|2)\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),))
    mp, keep = load_params.model_params(lay, no_alloc=True)
    assert mp.no_alloc and mp.load_mode == load_params.LOAD_MODE_NONE
    assert mp.devices and ctypes.c_void_p.from_address(mp.devices).value is None, "empty, NULL-terminated list"
    from llama_cpp import llama_cpp as L

    with llama_log.capture_log() as lines:
        model = L.llama_model_load_from_file(str(moe_gguf).encode(), mp)
    assert model
    L.llama_model_free(model)
    over = sorted(ln.split()[1] for ln in lines if "buffer type overridden to CPU" in ln)
    assert over == sorted(f"blk.{b}.ffn_{w}_exps.weight" for b in (0, 2) for w in ("gate", "up", "down")), over
    assert any("print_info" in ln for ln in lines), "the capture sees ordinary INFO lines too"


def test_context_params_follow_the_layout(smollm2_path):
    lay = plan(read_model_info(smollm2_path), CPU_ONLY, PlanOptions(num_ctx=1024, num_parallel=4, kv_type="q8_0"))
    cp = load_params.context_params(lay, n_threads=1)
    assert (cp.n_ctx, cp.n_seq_max, cp.n_batch, cp.n_ubatch) == (4096, 4, 512, 512)
    assert cp.type_k == cp.type_v == 8 and cp.flash_attn_type == load_params.FLASH_ATTN_ENABLED
    assert cp.n_threads == 1 and not cp.embeddings
    mp, keep = load_params.model_params(lay)
    assert mp.n_gpu_layers == 0 and mp.tensor_split[ggml_lib.max_devices() - 1] == 0.0
    with pytest.raises(ValueError, match="KV cache type"):
        load_params.ggml_type("q3_k")


def test_log_capture_joins_pieces_and_levels():
    llama_log.install()
    with llama_log.capture_log() as lines:
        llama_log._on_log(2, b"load_tensors:   CPU_Mapped model buf", None)
        llama_log._on_log(5, b"fer size =    92.10 MiB\n", None)      # CONT: same line
        llama_log._on_log(4, b"an error\nand more\n", None)
    assert lines == ["load_tensors:   CPU_Mapped model buffer size =    92.10 MiB", "an error", "and more"]


def test_parse_buffer_lines():
    lines = [
        "load_tensors:   CPU_Mapped model buffer size =    92.10 MiB",
        "load_tensors:        CUDA0 model buffer size =  4000.00 MiB",
        "load_tensors:   CPU_REPACK model buffer size =    10.00 MiB",
        "llama_kv_cache:        CUDA0 KV buffer size =   512.00 MiB",
        "llama_kv_cache:          CPU KV buffer size =     0.00 MiB",
        "llama_context:  CUDA_Host  output buffer size =     0.75 MiB",
        "sched_reserve:        CUDA0 compute buffer size =   300.50 MiB",
        "sched_reserve:    CUDA_Host compute buffer size =    12.01 MiB",
        "llama_kv_cache: size =   90.00 MiB ( 1024 cells, 30 layers, 4/4 seqs), K (f16): 45.00 MiB",
    ]
    MiB = 1024 * 1024
    r = alloc_report.parse_buffer_lines(lines, ["CUDA0"])
    # CPU_REPACK (weights the CPU backend repacked at load) is its own kind, next to the mapping
    assert r["CPU"] == {"model": round(92.10 * MiB), "kv": 0, "compute": round(12.01 * MiB),
                        "output": round(0.75 * MiB), "repack": 10 * MiB}
    assert r["CUDA0"] == {"model": 4000 * MiB, "kv": 512 * MiB, "compute": round(300.5 * MiB), "output": 0,
                          "repack": 0}
    assert alloc_report.compute_sizes(lines, ["CUDA0"]) == {"CPU": round(12.01 * MiB), "CUDA0": round(300.5 * MiB)}
    assert alloc_report.buffer_device("Vulkan1") == "Vulkan1" and alloc_report.buffer_device("Vulkan_Host") == "CPU"
    assert alloc_report.buffer_device("CUDA0_Split", ["CUDA0"]) == "CUDA0"


def test_engine_is_built_as_the_makefile_says():
    """The venv's llama.cpp has the RPC backend and, on a CPU with AMX-INT8, no AMX matmul path (it segfaulted in
    llama_decode on this machine's Xeon). A build from pip's wheel cache with other flags fails here, by name,
    instead of as dozens of runner crashes (CI met exactly that)."""
    libs = {p.name for p in ggml_lib.lib_dir().iterdir()}
    assert any(n.startswith("libggml-rpc.so") for n in libs), f"no RPC backend in {ggml_lib.lib_dir()}: make rebuild-engine"
    cpu_lib = next(ggml_lib.lib_dir() / n for n in sorted(libs) if n.startswith("libggml-cpu") and n.endswith(".so"))
    cpu_has_amx = " amx_int8" in open("/proc/cpuinfo").read() if sys.platform.startswith("linux") else False
    if cpu_has_amx:
        has_amx_matmul = b"ggml_backend_amx_mul_mat" in cpu_lib.read_bytes()
        assert not has_amx_matmul, f"{cpu_lib} has ggml's AMX matmul (segfaults here): make rebuild-engine"

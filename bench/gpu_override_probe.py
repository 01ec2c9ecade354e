"""Bisect for the GPU override crash (see README/notes): load .gpu/moe.gguf with an expert override to the CPU
buffer type, with/without a devices list. Usage on a CUDA build: python bench/gpu_override_probe.py none|devs|ov|ov+devs"""
import ctypes, sys
from llama_cpp import llama_cpp as L
from app.ggml import ggml_lib
L.llama_backend_init()
class OV(ctypes.Structure):
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]
variant = sys.argv[1]
ov = (OV * 2)()
pat = ctypes.create_string_buffer(rb"blk\.\d+\.ffn_(up|down|gate)_exps")
ov[0].pattern = ctypes.cast(pat, ctypes.c_char_p)
ov[0].buft = ggml_lib.cpu_buffer_type()
print("cpu buft", hex(ov[0].buft or 0), "via dev", hex(ggml_lib.dev_buffer_type(ggml_lib.dev_by_name("CPU")) or 0), flush=True)
mp = L.llama_model_default_params()
mp.n_gpu_layers = -1
if variant in ("ov", "ov+devs"):
    mp.tensor_buft_overrides = ctypes.addressof(ov)
if variant in ("devs", "ov+devs"):
    devs = (ctypes.c_void_p * 2)(ggml_lib.dev_by_name("CUDA0"), None)
    mp.devices = ctypes.addressof(devs)
m = L.llama_model_load_from_file((sys.argv[2] if len(sys.argv) > 2 else ".gpu/moe.gguf").encode(), mp)
print(variant, "loaded", bool(m), flush=True)

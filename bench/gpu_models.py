"""The synthetic GGUFs of the GPU checks (docs/gpu-results.md), written with tests/support/gguf_factory.py
(random weights, SmolLM2's tokenizer; the text is noise, the shapes, bytes, placement and kernels are real). Run
on the GPU machine:

    python bench/gpu_models.py DIR [small|big|host|dense3b|all]

- moe-small.gguf   qwen3moe 8 layers, 32 experts (4 used), n_embd 256, Q4_0: the crash bisect and the gpu test
- dense-small.gguf llama 4 layers, n_embd 256, Q8_0: tests/integration/engine/test_runner_gpu.py's all-on-GPU test
- moe-30b.gguf     Qwen3-30B-A3B shape at reduced width: 48 layers, 128 experts (8 used), n_embd 1024 (Qwen3: 2048),
                   16 query / 2 KV heads of 128 (Qwen3: 32 / 4), expert FFN 512 (Qwen3: 768), Q4_K: ~5.6 GB
- dense-3b.gguf    Llama-3.2-3B shape: 28 layers, n_embd 3072, 24 / 8 heads of 128, FFN 8192, Q4_K: ~1.8 GB
- smollm2-shape.gguf, qwen05-shape.gguf  SmolLM2-135M's and Qwen2.5-0.5B's shapes (llama, Q8_0, trained context
                   32768): bench_host_step.py, bench_engine.py, bench_long_context.py
`dense3b` writes dense-3b.gguf alone (op_offload on a dense model without the 5 GiB MoE).
The vocabulary is SmolLM2's 49152 tokens (Qwen3: 151936, Llama 3: 128256).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]

from gguf_factory import write_dense_llama, write_moe_qwen3  # noqa: E402


def small(d: Path) -> None:
    write_moe_qwen3(d / "moe-small.gguf", n_layer=8, n_expert=32, n_expert_used=4, n_embd=256, n_head=4,
                    n_head_kv=2, head_dim=64, n_ff_exp=256, qtype="Q4_0", n_ctx=8192)
    write_dense_llama(d / "dense-small.gguf", n_layer=4, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, qtype="Q8_0",
                      n_ctx=8192)


def dense3b(d: Path) -> None:
    write_dense_llama(d / "dense-3b.gguf", n_layer=28, n_embd=3072, n_head=24, n_head_kv=8, n_ff=8192,
                      qtype="Q4_K", n_ctx=32768)


def big(d: Path) -> None:
    write_moe_qwen3(d / "moe-30b.gguf", n_layer=48, n_expert=128, n_expert_used=8, n_embd=1024, n_head=16,
                    n_head_kv=2, head_dim=128, n_ff_exp=512, qtype="Q4_K", n_ctx=32768)
    dense3b(d)


def host(d: Path) -> None:
    """SmolLM2-135M's and Qwen2.5-0.5B's shapes (llama architecture, SmolLM2's vocabulary) for bench_host_step.py."""
    write_dense_llama(d / "smollm2-shape.gguf", n_layer=30, n_embd=576, n_head=9, n_head_kv=3, n_ff=1536,
                      qtype="Q8_0", n_ctx=32768, tie_output=True)
    write_dense_llama(d / "qwen05-shape.gguf", n_layer=24, n_embd=896, n_head=14, n_head_kv=2, n_ff=4864,
                      qtype="Q8_0", n_ctx=32768, tie_output=True)


def main() -> int:
    d = Path(sys.argv[1])
    which = sys.argv[2] if len(sys.argv) > 2 else "all"
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if which in ("small", "all"):
        small(d)
    if which in ("big", "all"):
        big(d)
    if which in ("host", "all"):
        host(d)
    if which == "dense3b":
        dense3b(d)
    for p in sorted(d.glob("*.gguf")):
        print(f"{p.name:<18} {p.stat().st_size / 2**30:7.2f} GiB")
    print(f"models written in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How long plan() takes (pure Python, no I/O) on the shapes the tests use. Prints a table; asserts nothing.

    .venv/bin/python bench/bench_plan.py
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]

from app.discovery.simulated import load_simulated  # noqa: E402
from app.engine.gguf.builtin_model import builtin_model_path  # noqa: E402
from app.engine.planner.search import plan  # noqa: E402
from app.engine.layout.types import PlanOptions  # noqa: E402
from app.engine.gguf.model_info import read_model_info  # noqa: E402
from model_shapes import dense_8b, huge_dense, qwen3_30b_a3b  # noqa: E402

SIM = ROOT / "tests" / "support" / "sim_devices"
COMPUTE = {"CPU": 300 << 20, "*": 300 << 20}


def main() -> None:
    models = {"smollm2-135m": read_model_info(builtin_model_path()), "dense-8b": dense_8b(),
              "qwen3-30b-a3b": qwen3_30b_a3b(), "dense-70b": huge_dense()}
    print(f"{'model':<15} {'devices':<11} {'median ms':>9} {'max ms':>8}  result")
    for inv_name in ("one_6gb", "one_8gb", "one_16gb", "two_24gb", "small_box"):
        inv = load_simulated(SIM / f"{inv_name}.json")
        for name, info in models.items():
            times = []
            for _ in range(30):
                t = time.perf_counter()
                lay = plan(info, inv, PlanOptions(num_ctx=8192), COMPUTE)
                times.append((time.perf_counter() - t) * 1e3)
            res = f"ngl={lay.n_gpu_layers} gpus={len(lay.gpu_devices)} fits={lay.fits}"
            print(f"{name:<15} {inv_name:<11} {statistics.median(times):>9.2f} {max(times):>8.2f}  {res}")


if __name__ == "__main__":
    main()

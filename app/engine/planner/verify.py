"""Predicted vs actual memory: plan a model, load it for real with that Layout, compare per device and kind.

Runs in a CHILD process (`python -m app.engine.planner.verify MODEL ...`), looping over option sets in one process, so a
llama.cpp abort cannot end the caller and the matrix stays fast. Per option set: plan with estimates, measure the
compute buffers with a no_alloc dry run of that plan, plan again with the measurement, load the model + context
for real with the final Layout and read the non-zero `model/KV/compute/output buffer size` lines.

    python -m app.engine.planner.verify MODEL.gguf [--ctx 512,2048] [--parallel 1,4] [--kv f16,q8_0] [--devices sim.json] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence

from app.discovery import discover
from app.discovery.simulated import inventory_from_dict
from app.engine.gguf.model_info import read_model_info
from app.engine.layout import llama_params as load_params
from app.engine.planner.dryrun import dry_run_here
from app.engine.planner.options import plan_options
from app.engine.planner.search import plan
from app.ggml import alloc_report, cxx_runtime, llama_log
from app.ggml.child_json import run_json_child
from app.engine.planner.compare import KINDS, compare, predicted_of  # noqa: F401 - KINDS: verify's callers

MiB = 1024 * 1024
Combo = tuple[int, int, str] | tuple[int, int, str, bool]    # (num_ctx, num_parallel, kv_type[, flash_attn])


def verify_here(path: str, combos: Sequence[Combo], inventory_dict: dict | None = None,
                n_threads: int = 1) -> list[dict]:
    """In THIS process: for each (num_ctx, num_parallel, kv_type[, flash_attn]) plan, dry-run, plan, load for real,
    compare."""
    cxx_runtime.preload()                  # before libllama maps (docs/architecture.md, "llama.cpp facts" 15)
    from llama_cpp import llama_cpp as L   # late: maps libllama; only the verify child process calls this

    llama_log.install()
    info = read_model_info(path)
    inv = inventory_from_dict(inventory_dict) if inventory_dict else discover()
    rows = []
    for num_ctx, par, kv, *fa in combos:
        # n_ctx_train=0: verify measures exactly the context asked for, past the training context too
        # (llama.cpp allows that with a warning), so its table's rows are the sizes named on the command line
        opts = plan_options({"kv_type": kv, "flash_attn": fa[0] if fa else None}, num_ctx_default=num_ctx,
                            num_parallel=par, n_ctx_train=0)
        first = plan(info, inv, opts)
        dry = dry_run_here(first, n_threads)
        kv_measured = tuple(dry["kv"]) if dry.get("kv") and dry["kv"][1] else None
        layout = plan(info, inv, opts, compute=dry["compute"], kv_measured=kv_measured)
        mp, keep = load_params.model_params(layout)
        cp = load_params.context_params(layout, n_threads=n_threads)
        t0 = time.perf_counter()
        with llama_log.capture_log() as lines:
            model = L.llama_model_load_from_file(path.encode(), mp)
            ctx = L.llama_init_from_model(model, cp) if model else None
        load_s = time.perf_counter() - t0
        del keep
        if not model or not ctx:
            rows.append({"num_ctx": num_ctx, "parallel": par, "kv": kv, "error": "load failed: " + " | ".join(
                ln for ln in lines if "error" in ln.lower())[-400:]})
            if model:
                L.llama_model_free(model)
            continue
        actual = alloc_report.parse_buffer_lines(lines, layout.gpu_devices)
        L.llama_free(ctx)
        L.llama_model_free(model)
        rows.append({"num_ctx": num_ctx, "parallel": par, "kv": kv, "flash_attn": opts.flash_attn, "fits": layout.fits,
                     "predicted": predicted_of(layout), "actual": actual, "load_s": round(load_s, 3),
                     "kv_measured": any(r.startswith("KV cache as the dry run measured") for r in layout.reasons)})
    return rows


def run_verify(path: str, combos: Sequence[Combo], inventory_dict: dict | None = None,
               timeout: float = 600) -> list[dict]:
    """verify_here in a child process; raises ChildError (a RuntimeError) with the child's stderr tail if it dies."""
    return run_verify_many([str(path)], combos, inventory_dict, timeout)[str(path)]


def run_verify_many(paths: list[str], combos: Sequence[Combo], inventory_dict: dict | None = None,
                    timeout: float = 600) -> dict[str, list[dict]]:
    """verify_here for several models in ONE child process (one interpreter and llama.cpp start for all)."""
    req = json.dumps({"paths": [str(p) for p in paths], "combos": combos, "inventory": inventory_dict})
    return run_json_child("app.engine.planner.verify", "--child", what="verify child", timeout=timeout, stdin=req)


def format_table(name: str, rows: list[dict]) -> str:
    lines = [f"{'model':<22} {'ctx':>5} {'par':>3} {'kv':<5} {'device':<7} {'pred MiB':>9} {'actual MiB':>10} "
             f"{'total':>7} {'model':>7} {'kv':>7} {'compute':>7} {'output':>7} {'repack':>7}"]
    for r in rows:
        if "error" in r:
            lines.append(f"{name:<22} {r['num_ctx']:>5} {r['parallel']:>3} {r['kv']:<5} ERROR {r['error']}")
            continue
        for d, c in compare(r).items():
            ke = c["kind_err"]
            lines.append(f"{name:<22} {r['num_ctx']:>5} {r['parallel']:>3} {r['kv']:<5} {d:<7} "
                         f"{c['predicted'] / MiB:>9.2f} {c['actual'] / MiB:>10.2f} {c['total_err']:>+7.2%} "
                         + " ".join(f"{ke[k]:>+7.2%}" for k in KINDS))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m app.engine.planner.verify")
    ap.add_argument("model", nargs="?")
    ap.add_argument("--ctx", default="512,2048,8192")
    ap.add_argument("--parallel", default="1,4")
    ap.add_argument("--kv", default="f16,q8_0")
    ap.add_argument("--devices", help="simulated inventory JSON (plans for it; the load still uses this machine)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        req = json.loads(sys.stdin.read())
        out = {path: verify_here(path, [tuple(c) for c in req["combos"]], req.get("inventory"))
               for path in req["paths"]}
        print(json.dumps(out), flush=True)
        return 0
    if not a.model:
        ap.error("MODEL is required")
    combos = [(int(c), int(p), k) for c in a.ctx.split(",") for p in a.parallel.split(",") for k in a.kv.split(",")]
    inv = json.load(open(a.devices)) if a.devices else None
    rows = run_verify(a.model, combos, inv)
    if a.json:
        print(json.dumps(rows, indent=1))
    else:
        print(format_table(os.path.basename(a.model)[:22], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

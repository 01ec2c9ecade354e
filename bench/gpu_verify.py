"""Predicted vs actual memory on a real GPU: dense all on the GPU, dense with part of its
layers on the CPU, MoE with part of its experts on the CPU, and several layouts of one model at several budgets.
Each case plans for this machine's inventory with the GPU's free memory cut to a budget (none = as it is), then
app.engine.planner.verify loads it for real and compares per device and kind (bounds of tests/integration/engine/test_verify_layout:
total within 2%, each kind within 5% or the log's rounding).

    python bench/gpu_verify.py CASE.json [--json OUT]
CASE.json: [{"name": "dense-3b all GPU", "model": "...", "budget_gib": null, "combos": [[4096, 1, "f16"]]}, ...]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MiB = 2 ** 20
ROUNDING = int(0.005 * MiB) + 1


def inventory_dict(budget: int | None) -> dict:
    """This machine's inventory as a simulated-inventory dict, the first GPU's free memory cut to budget + margin."""
    from app.discovery import discover
    from app.engine.layout.types import PlanOptions

    inv = discover()
    margin = PlanOptions().margin
    devs = []
    for i, d in enumerate(inv.devices):
        free = d.free if (budget is None or i > 0) else min(d.free, budget + margin)
        devs.append({"id": d.id, "name": d.name, "total": d.total, "free": free, "kind": d.kind,
                     "backend": d.backend, "pci_bus_id": d.pci_bus_id})
    return {"devices": devs, "host_ram_total": inv.host_ram_total, "host_ram_available": inv.host_ram_available,
            "cpu_cores": inv.cpu_cores, "cpu_name": inv.cpu_name, "cpu_features": list(inv.cpu_features)}


def within(row: dict) -> bool:
    from app.engine.planner.verify import KINDS, compare

    if "error" in row or set(row["predicted"]) != set(row["actual"]):
        return False
    for dev, c in compare(row).items():
        if abs(c["total_err"]) > 0.02:
            return False
        p, a = row["predicted"][dev], row["actual"][dev]
        if any(abs(p[k] - a[k]) > max(0.05 * a[k], ROUNDING) for k in KINDS):
            return False
    return True


def main() -> int:
    from app.engine.planner.verify import format_table, run_verify

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases")
    ap.add_argument("--json")
    a = ap.parse_args()
    out = []
    for case in json.loads(Path(a.cases).read_text()):
        budget = int(case["budget_gib"] * 2 ** 30) if case.get("budget_gib") else None
        rows = run_verify(case["model"], [tuple(c) for c in case["combos"]], inventory_dict(budget), timeout=900)
        ok = [within(r) for r in rows]
        print(f"\n## {case['name']} (budget {case.get('budget_gib') or 'none'} GiB): "
              f"{sum(ok)}/{len(ok)} rows within the bounds", flush=True)
        print(format_table(case["name"][:22], rows), flush=True)
        for r in rows:
            if "error" not in r:
                print(f"   ctx {r['num_ctx']} x{r['parallel']} {r['kv']}: fits {r['fits']}, load {r['load_s']} s",
                      flush=True)
        out.append({**case, "rows": rows, "within": ok})
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

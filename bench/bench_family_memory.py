"""Predicted vs actual memory for every architecture family (tests/support/gguf_factory.FAMILIES), as one summary table.

    .venv/bin/python bench/bench_family_memory.py [--ctx 512,8192,32768] [--parallel 1,4] [--kv f16,q8_0] [--full]

Writes each family's synthetic GGUF to a temporary folder, plans and loads it for real over every combination
(one child process for all loads, app.engine.planner.verify), and prints per family: the worst total error and the
worst KV error over the combinations, and the KV bytes at the largest context x parallel. `--full` also prints
every row. tests/integration/engine/test_family_memory.py asserts the same bounds (2% total, 5% per kind); this prints the numbers.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]

from gguf_factory import FAMILIES, write_family  # noqa: E402  (tests/ is not a package)

from app.engine.planner.verify import compare, format_table, run_verify_many  # noqa: E402

MiB = 1024 * 1024


def summary_row(name: str, rows: list[dict]) -> str:
    fam = FAMILIES[name]
    errors = [r for r in rows if "error" in r]
    if errors:
        return f"| {name} | {fam.arch} | {fam.attention} | ERROR {errors[0]['error'][:60]} | | | |"
    cmp = [compare(r)["CPU"] for r in rows]
    worst_total = max((c["total_err"] for c in cmp), key=abs)
    worst_kv = max((c["kind_err"]["kv"] for c in cmp), key=abs)
    # the log prints MiB with two decimals, so a tiny cache's percentage is mostly that rounding: say the bytes too
    worst_kv_kib = max((abs(r["predicted"]["CPU"]["kv"] - r["actual"]["CPU"]["kv"]) / 1024 for r in rows))
    big = max(rows, key=lambda r: (r["num_ctx"] * r["parallel"], r["kv"] == "f16"))
    kv_pred, kv_act = big["predicted"]["CPU"]["kv"] / MiB, big["actual"]["CPU"]["kv"] / MiB
    measured = sum(1 for r in rows if r.get("kv_measured"))
    return (f"| {name} | {fam.arch} | {fam.attention} | {worst_total:+.2%} | {worst_kv:+.2%} ({worst_kv_kib:.1f} KiB) | "
            f"{kv_pred:.2f} / {kv_act:.2f} ({big['num_ctx']}x{big['parallel']} {big['kv']}) | {measured} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ctx", default="512,8192,32768")
    ap.add_argument("--parallel", default="1,4")
    ap.add_argument("--kv", default="f16,q8_0")
    ap.add_argument("--full", action="store_true", help="also print every combination's row")
    a = ap.parse_args(argv)
    combos = [(int(c), int(p), k) for c in a.ctx.split(",") for p in a.parallel.split(",") for k in a.kv.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: write_family(name, Path(tmp)) for name in FAMILIES}
        print(f"loading {len(paths)} families x {len(combos)} combinations...", file=sys.stderr)
        res = run_verify_many([str(p) for p in paths.values()], combos, timeout=3600)
    print(f"combinations: num_ctx {a.ctx} x parallel {a.parallel} x KV {a.kv}; worst = largest |error| over them; "
          "kv_measured = rows where the dry run's measurement had to replace the KV shape\n")
    print("| family | arch | attention | worst total | worst KV (largest abs) | KV MiB pred / actual | kv_measured |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, p in paths.items():
        print(summary_row(name, res[str(p)]))
    if a.full:
        for name, p in paths.items():
            print("\n" + format_table(name, res[str(p)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

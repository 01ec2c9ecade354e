"""`strata plan MODEL` (the layout without loading) and `strata devices` (the inventory).
Covered by tests/integration/cli/test_cli_devices_plan.py (`strata plan` output)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from app.cli import configured
from app.discovery import discover
from app.discovery.inventory import with_cap
from app.engine.gguf.model_info import GGUFError, read_model_info
from app.engine.planner.options import plan_layout, plan_options
from app.engine.layout.types import KV_TYPES
from app.format import format_bytes

MiB = 1024 ** 2


def register(sub) -> None:
    p = sub.add_parser("plan", help="show where a model's layers would go (no loading)")
    p.add_argument("model", help="a store name (e.g. smollm2:135m) or a path to a .gguf file")
    p.add_argument("--ctx", type=int, default=4096, help="context per sequence (num_ctx), default 4096")
    p.add_argument("--parallel", type=int, default=1, help="parallel sequences (num_parallel), default 1")
    p.add_argument("--devices", metavar="SIM.json", help="plan for a simulated inventory (JSON) instead of this machine")
    p.add_argument("--kv-type", default="f16", choices=KV_TYPES, help="KV cache type")
    p.add_argument("--num-gpu", type=int, help="layers on GPU (llama.cpp n_gpu_layers; -1 = all)")
    p.add_argument("--main-gpu", type=int, help="GPU index to use first")
    p.add_argument("--tensor-split", help="comma-separated weights, one per GPU")
    p.add_argument("--cpu-moe", type=int, help="number of layers whose MoE experts stay on the CPU")
    p.add_argument("--margin-mib", type=int, default=512, help="memory kept free on each device (MiB)")
    p.add_argument("--no-measure", action="store_true", help="estimate the compute buffer instead of a dry run")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_plan)

    d = sub.add_parser("devices", help="list the devices llama.cpp can use here (GPUs, RAM)")
    d.add_argument("--devices", metavar="SIM.json", help="show a simulated inventory instead")
    d.add_argument("--json", action="store_true", help="print JSON")
    d.set_defaults(func=cmd_devices)


def resolve_model(name: str) -> Path:
    """A path to an existing file, else a store name (when the store exists). FileNotFoundError if neither."""
    p = Path(name).expanduser()
    if p.is_file():
        return p
    try:
        return Path(configured.store().resolve_path(name))
    except Exception as e:  # ModelNotFound, InvalidName: say so
        raise FileNotFoundError(f"{name}: not a file and not a model in the store ({e})") from None


def _ranges(xs) -> str:
    xs = list(xs)
    if not xs:
        return "-"
    out, start, prev = [], xs[0], xs[0]
    for x in xs[1:] + [None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return ",".join(out)


def cmd_plan(args) -> int:
    try:
        path = resolve_model(args.model)
        info = read_model_info(path)
        cfg = configured.config()
        inv = with_cap(discover(args.devices or cfg.devices_json), cfg.max_memory)     # STRATA_MAX_MEMORY
        split = None
        if args.tensor_split:
            try:
                split = tuple(float(x) for x in args.tensor_split.split(","))
            except ValueError:
                raise ValueError(f"tensor_split: {args.tensor_split!r} is not a comma-separated list of numbers") from None
        opts = plan_options({"num_gpu": args.num_gpu, "main_gpu": args.main_gpu, "tensor_split": split,
                             "cpu_moe": args.cpu_moe, "kv_type": args.kv_type,
                             "margin": max(0, args.margin_mib) * MiB},
                            num_ctx_default=args.ctx, num_parallel=args.parallel, n_ctx_train=info.context_length)
        layout = plan_layout(info, inv, opts, measure=not args.no_measure)
    except (FileNotFoundError, GGUFError, ValueError) as e:
        print(f"strata plan: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"model": args.model, "fits": layout.fits, "layout": layout.to_dict(),
                          "inventory": inv.to_dict(), "suggestions": list(layout.suggestions)}, indent=2))
        return 0 if layout.fits else 1
    print(f"{info.name} ({info.architecture}, {info.n_layer} layers, {format_bytes(info.weight_bytes)} weights, "
          f"{info.quantization}) - num_ctx {args.ctx} x {args.parallel} seq, KV {args.kv_type}")
    w = max([10] + [len(d.device_id) for d in layout.devices])        # remote ids name their machine: RPC0[host:port]
    print(f"{'device':<{w}} {'blocks':<14} {'experts':<14} {'weights':>11} {'KV':>11} {'compute':>11} "
          f"{'total':>11} {'budget':>11}")
    for d in layout.devices:
        sizes = (d.weights_total, d.kv, d.compute + d.output, d.total, d.budget)
        print(f"{d.device_id:<{w}} {_ranges(d.layers):<14} {_ranges(d.expert_layers):<14} "
              + " ".join(f"{format_bytes(b):>11}" for b in sizes))
    print(f"llama.cpp: n_gpu_layers={layout.n_gpu_layers} devices={list(layout.gpu_devices)} "
          f"tensor_split={list(layout.tensor_split)} op_offload={layout.op_offload}")
    for pat, dev in layout.tensor_buft_overrides:
        print(f"  override {pat} -> {dev}")
    for r in layout.reasons:
        print(f"  - {r}")
    print("fits" if layout.fits else "DOES NOT FIT")
    for s in layout.suggestions:
        print(f"  suggestion: {s}")
    return 0 if layout.fits else 1


def cmd_devices(args) -> int:
    try:
        inv = discover(args.devices or configured.config().devices_json)
    except ValueError as e:
        print(f"strata devices: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(inv.to_dict(), indent=2))
        return 0
    print(f"CPU: {inv.cpu_name or '?'}, {inv.cpu_cores} cores, RAM {format_bytes(inv.host_ram_available)} available of "
          f"{format_bytes(inv.host_ram_total)}" + (" (simulated)" if inv.simulated else ""))
    if not inv.devices:
        print("no GPU")
    w = max([10] + [len(d.id) for d in inv.devices])
    for d in inv.devices:
        extra = f", {d.utilization}% busy" if d.utilization is not None else ""
        extra += f", remote (strata worker at {d.endpoint})" if d.endpoint else ""
        print(f"{d.id:<{w}} {d.kind:<5} {d.backend:<7} {d.name}: {format_bytes(d.free)} free of {format_bytes(d.total)}"
              + (f", PCI {d.pci_bus_id}" if d.pci_bus_id else "") + extra)
    for n in inv.notes:
        print(f"note: {n}")
    return 0

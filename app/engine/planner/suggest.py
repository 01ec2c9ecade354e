"""What would fit when a plan does not: concrete option changes, each verified by planning again with it.

Every suggestion starts with the option changes it stands for (`num_ctx=3840: ...`, `kv_type=q8_0, num_ctx=6144:
...`), so a client can apply it; the rest says why. The changes are tried in the order the issue asks for, the
least intrusive first: a smaller context (the largest that fits, a multiple of 256), a quantized KV cache at the
requested context (q8_0, then q4_0; llama.cpp needs flash attention for a quantized V cache and head sizes that are
multiples of the quant block), fewer parallel sequences, leaving num_gpu to the planner; and only when none of them
fits alone, one sequence with the lightest KV cache at the largest context, and last a smaller model.

Each candidate is checked with the planner's own memory model (`validate` + `_core`, i.e. `plan()` without the
recursion into suggestions): about a millisecond each, a few dozen at most (binary searches). Measured compute
buffers (`compute`), taken at the requested options, are kept for the candidates: smaller contexts and fewer
sequences need no more compute than that, so a suggestion never claims more room than there is.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from app.engine.planner import placement as L
from app.engine.layout.types import PlanOptions
from app.engine.planner.validate import validate
from app.engine.planner.memory import KV_BLOCKS
from app.engine.planner.context import CTX_STEP
from app.engine.gguf.model_info import ModelInfo
from app.discovery.inventory import Inventory

# lighter KV cache types, least lossy first, for each type a user may have asked for
LIGHTER_KV = {"f16": ("q8_0", "q4_0"), "q8_0": ("q4_0",), "q4_0": ()}


fmt_bytes = L.human_size


def _largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """Largest x in [lo, hi] with ok(x) (ok is monotone: true up to some point), None when not even ok(lo)."""
    if hi < lo or not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _kv(t: str) -> str:
    return f"{'an' if t[0] in 'f' else 'a'} {t} KV cache"


def _with_kv(o: PlanOptions, kv_type: str) -> PlanOptions:
    """o with this KV type; a quantized V cache needs flash attention, so flash_attn=false becomes true."""
    fa = True if (kv_type in L.QUANTIZED_KV and o.flash_attn is False) else o.flash_attn
    return replace(o, kv_type=kv_type, flash_attn=fa)


def _changes(o: PlanOptions, new: PlanOptions) -> str:
    """`key=value, ...` for the options that differ (the prefix a client can apply)."""
    out = []
    for name in ("kv_type", "flash_attn", "num_parallel", "num_ctx", "num_gpu"):
        a, b = getattr(o, name), getattr(new, name)
        if a != b:
            out.append(f"{name}={'auto' if b is None else str(b).lower() if isinstance(b, bool) else b}")
    return ", ".join(out)


def _kv_refusal(info: ModelInfo, kv_type: str) -> str | None:
    """Why llama.cpp would refuse this KV type for this model (head size not a multiple of the quant block)."""
    blck = KV_BLOCKS[kv_type][0]
    if info.head_dim_k % blck or info.head_dim_v % blck:
        return (f"a {kv_type} KV cache is not possible: llama.cpp needs head sizes that are multiples of {blck} "
                f"(this model: {info.head_dim_k}/{info.head_dim_v})")
    return None


def _fa_note(o: PlanOptions, new: PlanOptions) -> str:
    if new.kv_type in L.QUANTIZED_KV and o.kv_type not in L.QUANTIZED_KV:
        return "; a quantized V cache needs flash attention" + (", so it is turned on" if o.flash_attn is False
                                                                  else " (on by default with it)")
    return ""


def suggestions(info: ModelInfo, inventory: Inventory, o: PlanOptions, compute) -> tuple[str, ...]:
    """Concrete option changes that fit, each checked by planning again, in the order a user would try them;
    when no single change fits, one combination that does, else why nothing can (a smaller model, or free memory)."""
    return _Suggester(info, inventory, o, compute).run()


class _Suggester:
    def __init__(self, info: ModelInfo, inventory: Inventory, o: PlanOptions, compute):
        self.info, self.inventory, self.o, self.compute = info, inventory, o, compute
        self.seqs = "1 sequence" if o.num_parallel == 1 else f"{o.num_parallel} sequences"
        self.out: list[str] = []
        self.notes: list[str] = []      # why an obvious change is not offered (not a change to apply)
        self.usable: list[str] = []     # lighter KV types this model can use

    def fits(self, opts: PlanOptions) -> bool:
        try:
            validate(self.info, self.inventory, opts)
        except ValueError:
            return False
        return L.place(self.info, self.inventory, opts, self.compute).fits

    def largest_ctx(self, base: PlanOptions, below: int) -> int | None:
        """Largest num_ctx < `below`, a multiple of 256, that fits with `base`'s other options."""
        n = _largest(1, (below - 1) // CTX_STEP, lambda s: self.fits(replace(base, num_ctx=s * CTX_STEP)))
        return None if n is None else n * CTX_STEP

    def run(self) -> tuple[str, ...]:
        ctx = self.smaller_context()
        self.lighter_kv(ctx)
        self.fewer_sequences()
        self.auto_num_gpu()
        if not self.out and not self.one_combination():
            self.nothing_fits()
        return tuple(self.out + self.notes)

    def smaller_context(self) -> int | None:
        """1. a smaller context with the KV type asked for."""
        o = self.o
        ctx = self.largest_ctx(o, o.num_ctx)
        if ctx:
            self.out.append(f"num_ctx={ctx}: the largest context per sequence that fits with {self.seqs} and "
                            f"{_kv(o.kv_type)} (asked for {o.num_ctx})")
        return ctx

    def lighter_kv(self, ctx: int | None) -> None:
        """2. a quantized KV cache at the requested context (or, if none fits there, a larger context than 1.)"""
        o = self.o
        for t in LIGHTER_KV.get(o.kv_type, ()):
            why_not = _kv_refusal(self.info, t)
            if why_not:
                if not self.notes:
                    self.notes.append(why_not)
                continue
            self.usable.append(t)
        kv_ok = next((t for t in self.usable if self.fits(_with_kv(o, t))), None)
        if kv_ok:
            new = _with_kv(o, kv_ok)
            self.out.append(f"{_changes(o, new)}: {_kv(kv_ok)} fits at the requested num_ctx={o.num_ctx} with "
                            f"{self.seqs}{_fa_note(o, new)}")
            return
        for t in self.usable:
            new = _with_kv(o, t)
            c = self.largest_ctx(new, o.num_ctx)
            if c and c > (ctx or 0):
                new = replace(new, num_ctx=c)
                self.out.append(f"{_changes(o, new)}: {_kv(t)} fits a larger context than {o.kv_type} "
                                f"({c} per sequence with {self.seqs}){_fa_note(o, new)}")
                return

    def fewer_sequences(self) -> None:
        """3. fewer parallel sequences, each with the context asked for."""
        o = self.o
        if o.num_parallel > 1:
            p = _largest(1, o.num_parallel - 1, lambda n: self.fits(replace(o, num_parallel=n)))
            if p:
                self.out.append(f"num_parallel={p}: {p} sequence{'s fit' if p > 1 else ' fits'} at once with "
                                f"num_ctx={o.num_ctx} and {_kv(o.kv_type)} (asked for {o.num_parallel})")

    def auto_num_gpu(self) -> None:
        """4. a user-fixed num_gpu that does not fit."""
        if self.o.num_gpu is not None and self.fits(replace(self.o, num_gpu=None)):
            self.out.append("num_gpu=auto: leaving num_gpu unset lets the planner find a layout that fits")

    def one_combination(self) -> bool:
        """5. no single change fits: one sequence, the lightest KV cache that works, the largest context."""
        o = self.o
        for t in (o.kv_type, *self.usable):
            base = _with_kv(replace(o, num_parallel=1), t)
            c = self.largest_ctx(base, o.num_ctx + 1)
            if c:
                new = replace(base, num_ctx=c)
                self.out.append(f"{_changes(o, new)}: nothing fits with one change; this combination does "
                                f"(the largest context with one sequence"
                                f"{' and ' + _kv(t) if t != o.kv_type else ''})")
                return True
        return False

    def nothing_fits(self) -> None:
        """6. a smaller model (or more free memory): not even the least demanding options fit."""
        o, info, inventory = self.o, self.info, self.inventory
        least = _with_kv(replace(o, num_parallel=1, num_ctx=CTX_STEP, num_gpu=None), (self.usable or [o.kv_type])[-1])
        lay = L.place(info, inventory, least, self.compute)
        need = sum(d.total for d in lay.devices)
        gpus = L.usable_gpus(inventory)
        host_budget = max(0, inventory.host_ram_available - o.margin)
        budget = host_budget + sum(max(0, d.free - o.margin) for d in gpus)
        where = (f"RAM: {fmt_bytes(inventory.host_ram_available)} available minus the {fmt_bytes(o.margin)} margin "
                 f"= {fmt_bytes(host_budget)}")
        if gpus:
            where += "; GPUs: " + ", ".join(f"{d.id} {fmt_bytes(max(0, d.free - o.margin))}" for d in gpus)
        cap = inventory.memory_cap
        if cap is not None and cap < budget:       # Strata's memory cap is the tighter bound
            budget = cap
            where = f"Strata's memory cap (STRATA_MAX_MEMORY), less what the loaded models hold, leaves {fmt_bytes(cap)}"
        if budget <= 0:      # no model fits in nothing: the memory (or the margin) is the problem, not the model
            self.out.append(f"free some memory: the planner's budget is 0 MiB ({where}), so no model fits; the least "
                            f"demanding plan for this one (num_ctx={CTX_STEP}, one sequence, {_kv(least.kv_type)}) "
                            f"needs {fmt_bytes(need)} (the weights alone {fmt_bytes(info.weight_bytes)}); `strata plan "
                            f"--margin-mib` plans with a smaller margin")
            return
        self.out.append(f"use a smaller quantization or a smaller model: even num_ctx={CTX_STEP} with one sequence "
                        f"and {_kv(least.kv_type)} needs {fmt_bytes(need)} (the weights alone "
                        f"{fmt_bytes(info.weight_bytes)}); the planner's budget is {fmt_bytes(budget)} ({where})")

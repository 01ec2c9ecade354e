"""Independent checks of a Layout, written from llama.cpp's rules (src/llama-model.cpp load_tensors), not from the
planner's code: where does each tensor land for the Layout's n_gpu_layers / devices / tensor_split / overrides,
and a brute-force search over the same placement space for the best achievable (blocks on GPU, full blocks)."""
from __future__ import annotations

import itertools
import re
import struct

from app.engine.planner.memory import kv_bytes_per_layer, output_buffer_bytes

_BLK = re.compile(r"^blk\.(\d+)\.")


def f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def layer_devices(n_layer: int, ngl: int, gpus: list[str], split: list[float]) -> list[str]:
    """Device of each of the n_layer+1 positions (the last is the output layer), as llama.cpp assigns them."""
    i_gpu_start = max(n_layer + 1 - ngl, 0)
    act = min(ngl, n_layer + 1) if gpus else 0
    cum, total = [], 0.0
    for w in split[: len(gpus)]:
        total = f32(total + f32(w))
        cum.append(total)
    cum = [f32(c / total) for c in cum] if total else cum
    out = []
    for il in range(n_layer + 1):
        if il < i_gpu_start or (il - i_gpu_start) >= act:
            out.append("CPU")
            continue
        frac = f32(f32(float(il - i_gpu_start)) / act)
        j = next((jj for jj, s in enumerate(cum) if s > frac), len(cum))
        out.append(gpus[j])
    return out


def realise(info, layout) -> tuple[dict[str, str], dict[str, int], dict[str, int]]:
    """(tensor -> device, weight bytes per device, KV bytes per device) for what llama.cpp would do with `layout`."""
    n = info.n_layer
    devs = layer_devices(n, layout.n_gpu_layers, list(layout.gpu_devices), list(layout.tensor_split))
    pats = [(re.compile(p), d) for p, d in layout.tensor_buft_overrides]
    where, wbytes = {}, {}
    for t in info.tensors:
        dev = next((d for p, d in pats if p.search(t.name)), None)
        if dev is None:
            m = _BLK.match(t.name)
            if t.name.startswith("token_embd."):
                dev = "CPU"
            elif m:
                dev = devs[int(m.group(1))]
            else:
                dev = devs[n]           # output, output_norm: the output layer
        where[t.name] = dev
        wbytes[dev] = wbytes.get(dev, 0) + t.n_bytes
    if info.output_bytes == 0 and devs[n] != "CPU":      # tied output: llama.cpp copies token_embd to the GPU
        wbytes[devs[n]] = wbytes.get(devs[n], 0) + info.token_embd_bytes
    o = layout.options
    kv = kv_bytes_per_layer(info, o.num_ctx, o.num_parallel, o.kv_type, o.num_batch or 512, o.num_ubatch)
    kvb = {}
    for i in range(n):
        kvb[devs[i]] = kvb.get(devs[i], 0) + kv[i]
    return where, wbytes, kvb


def score_of(info, where: dict[str, str]) -> tuple[int, int]:
    """(blocks whose attention is on a GPU, blocks entirely on one GPU)."""
    on, full = 0, 0
    for i in range(info.n_layer):
        ds = {d for name, d in where.items() if name.startswith(f"blk.{i}.")}
        attn = where.get(f"blk.{i}.attn_q.weight")
        if attn and attn != "CPU":
            on += 1
            if ds == {attn}:
                full += 1
    return on, full


class BruteForce:
    """Exhaustive search of llama.cpp parameter space of the forms the planner may emit: n_gpu_layers, device order
    (any subset/permutation of the GPUs), block counts per device, 'first GPU block partial', experts of blocks < m
    on the CPU. Memory per device: the tensor table + KV per layer + compute per used device."""

    def __init__(self, info, options, gpus: dict[str, int], compute_gpu: int):
        self.info, self.o, self.gpus, self.compute_gpu = info, options, gpus, compute_gpu
        n = info.n_layer
        self.n = n
        self.A, self.F, self.E = [0] * n, [0] * n, [0] * n
        exps = re.compile(r"ffn_(up|down|gate|gate_up)_(ch|)exps")
        for t in info.tensors:
            m = _BLK.match(t.name)
            if not m:
                continue
            i = int(m.group(1))
            rest = t.name[m.end():]
            if exps.search(t.name):
                self.E[i] += t.n_bytes
            elif rest.startswith("ffn_"):
                self.F[i] += t.n_bytes
            else:
                self.A[i] += t.n_bytes
        self.kv = kv_bytes_per_layer(info, options.num_ctx, options.num_parallel, options.kv_type,
                                     options.num_batch or 512, options.num_ubatch)
        self.out_gpu = (info.output_bytes or info.token_embd_bytes) + info.other_bytes
        self.moe = info.n_expert > 0

    def fits_and_score(self, order, counts, partial, m):
        n, k = self.n, sum(counts)
        first = n - k
        use = {}
        start = first
        for dev, c in zip(order, counts):
            b = self.compute_gpu
            for i in range(start, start + c):
                b += self.A[i] + self.kv[i]
                if not (partial and i == first):
                    b += self.F[i] + (self.E[i] if i >= m else 0)
            start += c
            use[dev] = b
        use[order[-1]] += self.out_gpu
        if any(use[d] > self.gpus[d] for d in use):
            return None
        full = sum(1 for i in range(first, n) if not (partial and i == first) and not (self.moe and i < m))
        return (k, full)

    def best(self, fixed_k=None, fixed_m=None, orders=None):
        names = list(self.gpus)
        if orders is None:
            orders = [p for r in range(1, len(names) + 1) for p in itertools.permutations(names, r)]
        best = (0, 0)
        ks = [fixed_k] if fixed_k is not None else range(1, self.n + 1)
        ms = [fixed_m] if fixed_m is not None else (range(self.n + 1) if self.moe else [0])
        for order in orders:
            for k in ks:
                for counts in _compositions(k, len(order)):
                    for partial in ((False,) if fixed_k is not None else (False, True)):
                        for m in ms:
                            s = self.fits_and_score(order, counts, partial, m)
                            if s is not None and s > best:
                                best = s
        return best


def _compositions(k: int, parts: int):
    if parts == 1:
        yield (k,)
        return
    for first in range(k + 1):
        for rest in _compositions(k - first, parts - 1):
            yield (first,) + rest


def output_bytes(info, options) -> int:
    return output_buffer_bytes(info, options.num_parallel, options.embedding)

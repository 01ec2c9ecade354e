"""Remote devices in a placement: their order in llama.cpp's `devices`, and what crossing the network costs.

A model split over machines runs its blocks in order: the token embedding on this machine's CPU, then the
CPU's blocks, then each device's run of blocks in `devices` order, the output layer on the last device, and
the logits back on this machine. Every change of machine along that path sends the hidden state over the
network, once per token while generating and once per batch of n_ubatch tokens while reading a prompt;
the last hop (from a remote device holding the output layer) sends the logits instead, n_vocab floats per
token. (docs/architecture.md, "Beyond one machine").
"""
from __future__ import annotations

from app.discovery.inventory import Device

LOCAL = "this machine"


def remote_first(gpus: tuple[Device, ...], order: tuple[int, ...]) -> tuple[int, ...]:
    """llama.cpp's `devices` order for these indices into `gpus`: remote devices first, in inventory order (the
    order workers are listed in; a worker's devices are next to each other), then the local ones (llama.cpp's own
    default order too). Blocks then flow CPU -> workers -> local GPUs and the output layer stays on a local GPU
    when there is one, so the big logits never cross the network."""
    rem = sorted(i for i in order if gpus[i].endpoint)
    return tuple(rem) + tuple(i for i in order if not gpus[i].endpoint)


def machine_path(gpus: tuple[Device, ...], order: tuple[int, ...], counts: tuple[int, ...]) -> list[str]:
    """The machines a token's computation visits, in order, starting and ending on this machine."""
    path = [LOCAL]
    for g, cnt in zip(order, counts):
        m = gpus[g].endpoint or LOCAL
        if cnt and m != path[-1]:
            path.append(m)
    if path[-1] != LOCAL:
        path.append(LOCAL)
    return path


def hop_reasons(gpus: tuple[Device, ...], order: tuple[int, ...], counts: tuple[int, ...], first_block: int,
                n_embd: int, n_vocab: int, n_ubatch: int) -> list[str]:
    """The Layout's reasons about the network: which blocks each worker holds, the hops, what they carry."""
    if not any(gpus[g].endpoint for g in order):
        return []
    path = machine_path(gpus, order, counts)
    hops = len(path) - 1
    hidden, logits = n_embd * 4, n_vocab * 4     # f32 activations between blocks; f32 logits of an output row
    out_remote = bool(gpus[order[-1]].endpoint)
    # a prompt batch carries every token's hidden state, but logits only for the rows that are output (one)
    per_token = hidden * (hops - 1) + (logits if out_remote else hidden)
    per_batch = hidden * n_ubatch * (hops - 1) + (logits if out_remote else hidden * n_ubatch)
    held, start = [], first_block
    for j, (g, cnt) in enumerate(zip(order, counts)):
        if gpus[g].endpoint and cnt:
            held.append(f"{_blocks(start, cnt)}{' + output' if j == len(order) - 1 else ''} on {gpus[g].id}")
        start += cnt
    return [f"on RPC workers: {', '.join(held)}",
            f"network cost: {hops} hops per token ({' -> '.join(path)}), about {_kib(per_token)} per generated "
            f"token and {_kib(per_batch)} per {n_ubatch}-token prompt batch"
            + (f"; the output layer is remote, so each token's logits ({_kib(logits)}) cross the network"
               if out_remote else "")]


def _blocks(start: int, cnt: int) -> str:
    return f"block {start}" if cnt == 1 else f"blocks {start}-{start + cnt - 1}"


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MiB"

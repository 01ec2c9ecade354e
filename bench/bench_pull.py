"""`/api/pull` against the loopback test registry (tests/support/registry_fixture.py), phase by phase, next to the plainest
correct download of the same blob (one aiohttp GET streamed to a file and hashed: what curl + sha256sum do).

    .venv/bin/python bench/bench_pull.py [--mb 256] [--reps 3]

Loopback has no per-connection bandwidth limit, so this measures Strata's own cost (HTTP client, writes at
offsets, the separate sha256 pass, the store), not what parallel ranges buy on a real link. Phases come from the
stream's own lines: download = first layer line -> "verifying sha256 digest", verify -> "writing manifest",
register -> "success". Prints a table of medians; asserts nothing.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]

import aiohttp  # noqa: E402
import httpx  # noqa: E402

from gguf_factory import write_minimal  # noqa: E402
from registry_fixture import Registry  # noqa: E402
from service_util import store_factory  # noqa: E402

from app.service.config import ServiceConfig  # noqa: E402
from app.service.server import ServiceThread  # noqa: E402


async def plain_download(url: str, dest: Path) -> float:
    t0 = time.perf_counter()
    h = hashlib.sha256()
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        with open(dest, "wb") as f:
            async for chunk in r.content.iter_chunked(1 << 20):
                h.update(chunk)
                f.write(chunk)
    return time.perf_counter() - t0


def timed_pull(url: str, ref: str) -> dict:
    marks = {}
    t0 = time.perf_counter()
    with httpx.Client(base_url=url, timeout=600) as c, c.stream("POST", "/api/pull",
                                                                json={"model": ref, "insecure": True}) as r:
        for line in r.iter_lines():
            if not line.strip():
                continue
            status = json.loads(line).get("status", "error")
            marks.setdefault("first_layer" if status.startswith("pulling ") and status != "pulling manifest"
                             else status, time.perf_counter())
    end = marks.get("success")
    if end is None:
        raise RuntimeError(f"pull failed: {marks}")
    return {"total": end - t0, "download": marks["verifying sha256 digest"] - marks["first_layer"],
            "verify": marks["writing manifest"] - marks["verifying sha256 digest"],
            "register": marks["success"] - marks["writing manifest"]}


def run_config(reg: Registry, blob_ref: str, env: dict, reps: int, cut_at: int | None, digest: str) -> list[dict]:
    out = []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as home:
            old = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            svc = ServiceThread(ServiceConfig(port=0, n_threads=1), store_factory=store_factory(Path(home))).start()
            try:
                if cut_at is not None:
                    reg.faults.cut_after[digest] = cut_at
                out.append(timed_pull(svc.url, blob_ref))
            finally:
                svc.stop()
                for k, v in old.items():
                    os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        gguf = write_minimal(Path(tmp) / "big.gguf", rows=args.mb * 1000 * 1000 // 128, seed=7).read_bytes()
    size_mb = len(gguf) / 1e6
    reg = Registry().start()
    try:
        m = reg.add_model("bench/big", "latest", gguf)
        digest = m["layers"][0]["digest"]
        ref = f"{reg.host}/bench/big"
        with tempfile.TemporaryDirectory() as tmp:
            plain = statistics.median(asyncio.run(plain_download(f"{reg.url}/v2/bench/big/blobs/{digest}",
                                                                 Path(tmp) / "x")) for _ in range(args.reps))
        configs = [
            ("parallel ranges (16 parts, 8 at once)", {"STRATA_PULL_PART_MIN": str(len(gguf) // 16 + 1)}, None),
            ("one stream", {"STRATA_PULL_PART_MIN": str(len(gguf) + 1)}, None),
            ("one stream, cut at 50% and resumed", {"STRATA_PULL_PART_MIN": str(len(gguf) + 1)}, len(gguf) // 2),
        ]
        print(f"blob: {size_mb:.0f} MB GGUF, loopback; plain GET + sha256: {plain:.2f} s "
              f"({size_mb / plain:.0f} MB/s)\n")
        print(f"{'pull':<40} {'total s':>8} {'MB/s':>6} {'download s':>11} {'verify s':>9} {'register s':>11} "
              f"{'plain/total':>12}")
        for label, env, cut in configs:
            runs = run_config(reg, ref, env, args.reps, cut, digest)
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            print(f"{label:<40} {med['total']:>8.2f} {size_mb / med['total']:>6.0f} {med['download']:>11.2f} "
                  f"{med['verify']:>9.2f} {med['register']:>11.3f} {plain / med['total']:>12.2f}")
    finally:
        reg.stop()


if __name__ == "__main__":
    main()

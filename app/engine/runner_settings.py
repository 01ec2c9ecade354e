"""What a runner child is told at start instead of reading the environment.

The service reads its STRATA_* variables once (app/service/config.py) and hands a RunnerSettings to every
RunnerClient, which passes it to the child with the layout; the runner reads no variable of its own (only the
test hooks, runner/testhooks.py, which exist for tests and stay environment-driven). Tests and benches that start
a RunnerClient directly pass one, or get the defaults.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunnerSettings:
    speculative: str = ""                     # STRATA_SPECULATIVE: "" = the runner's default (runner/speculation/drafting.py)
    stream_interval_ms: float | None = None   # STRATA_STREAM_INTERVAL_MS: None = from the devices (output_thread)
    log_level: str = "WARNING"                # STRATA_RUNNER_LOG: the runner's Python log level
    # the prompt cache on disk (runner/cache/disk_cache.py): its folder ("" = none: runners started outside a service),
    # and its bound in MiB over all models (STRATA_PROMPT_DISK_CACHE_MIB; -1 = automatic, 0 = off)
    disk_cache_dir: str = ""
    disk_cache_mib: int = -1
    async_prep: str = "auto"                  # where the next step's host work overlaps the decode
                                              # (runner/step/step_prepare.py): "auto", or "off"/"shadow"/"helper" to
                                              # measure and test each (bench/bench_host_step.py)
    # STRATA_DECODE_LATENCY_FACTOR: while prompts are read, a step of the sequences writing a reply may take this many
    # times their step alone (runner/step/step_budget.py); 0 = prompts always take the whole batch (the old chunking)
    decode_latency_factor: float = 1.75

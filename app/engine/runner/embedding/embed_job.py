"""One embedding job on the context thread (embeddings.py does the decoding): which sequence id it may use, and
the result or error sent to the parent. It runs between steps, to the end, like one long step.
Covered by tests/integration/engine/test_runner.py (embeddings through a real runner).
"""
from __future__ import annotations

import logging
from typing import Protocol

from app.engine import protocol as P
from app.engine.runner.cache.prompt_cache import PromptCache
from app.engine.runner.output.output_port import EmbedJob

log = logging.getLogger("strata.engine")


class StepTimer(Protocol):
    """The step clock (step/step_clock.StepClock), which the heartbeat reads: a job runs as one long step."""

    def begin(self, n_tokens: int, t0: float | None = None) -> float: ...

    def end(self) -> None: ...


def run_embed_job(job: EmbedJob, embedder, prompt_cache: PromptCache, free_slots: list[int], clock: StepTimer,
                  send) -> bool:
    """Run one embedding job to the end; False (job kept) while a generative model has no free slot for it
    (the service leases a slot per embedding request, so one frees up as running sequences finish)."""
    req, token_lists, n_tokens = job.req, job.token_lists, job.n_tokens
    seq_id = 0
    if embedder.is_embedding_model:
        prompt_cache.forget_all()     # it decodes on this context and clears its memory
    else:
        if not free_slots:
            return False
        seq_id = prompt_cache.borrow(free_slots)   # the least useful cached prefix goes (to the host cache)
    clock.begin(n_tokens)                       # one long step, for the heartbeat
    try:
        vectors = embedder.embed(token_lists, normalize=req.normalize, seq=seq_id)
        send(P.EmbedResult(req.id, vectors, n_tokens))
    except Exception as e:
        log.exception("embedding failed")
        send(P.EmbedResult(req.id, [], 0, error=f"embedding failed: {e}"))
    finally:
        clock.end()
    return True

"""The narrow port between the output thread and the context thread's loop, and the typed items crossing it.

The output thread admits requests and tokenizes embedding inputs; what it hands to the loop goes through this
port and nothing else: `ready` (an admitted Seq joins the ready queue), `enqueue` (an `EmbedJob`), `wake`
(a stop string or an output failure ended a sequence: reap it now), `forget` (a request is done: its id may be
used again). The loop reads `LoopInbox`'s queues; deques are safe for one appending and one popping thread.
The other way, the loop (and the reader thread) put `OutputItem`s on the output thread's queue.
Covered by tests/unit/engine/runner/step/test_step_parts.py and test_step_cycle.py.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import NamedTuple, Protocol, Union

from app.engine import protocol as P
from app.engine.runner.sequence import Seq
from app.engine.runner.step_plan import Sampled


# ---- loop -> output thread (its queue) --------------------------------------------------------------------------
class Admit(NamedTuple):
    """A request to admit (template, tokenize, sampler chain: admission.py), from the reader thread."""
    seq: Seq


class StepTokens(NamedTuple):
    """A step's sampled tokens, per sequence in batch order: text, stop strings and logprobs are made of them."""
    sampled: list[Sampled]


class Released(NamedTuple):
    """A sequence gave its slot back: its one DoneEvent or ErrorEvent is due."""
    seq: Seq


class EmbedInputs(NamedTuple):
    """An embedding request whose inputs the output thread tokenizes (then hands back as an `EmbedJob`)."""
    req: P.EmbedRequest


class PrefillProgress(NamedTuple):
    """A prefill chunk of `seq` was decoded and its prompt goes on: `processed` of its tokens are in KV cells."""
    seq: Seq
    processed: int


class Quit(NamedTuple):
    """The runner stops: the output thread ends."""


OutputItem = Union[Admit, StepTokens, Released, EmbedInputs, PrefillProgress, Quit]


# ---- output thread -> loop (the port) -----------------------------------------------------------------------------
class EmbedJob(NamedTuple):
    """An embedding request with its inputs tokenized, for the loop to run between steps (embed_job.py)."""
    req: P.EmbedRequest
    token_lists: list[list[int]]
    n_tokens: int


class LoopPort(Protocol):
    def ready(self, seq: Seq) -> None: ...
    def enqueue(self, job: EmbedJob) -> None: ...
    def wake(self) -> None: ...
    def forget(self, seq_id: str) -> None: ...


class LoopInbox:
    """The loop's side of the port: its ready queue, embedding jobs and wake event, and the live requests by id."""

    def __init__(self):
        self.seqs: dict[str, Seq] = {}      # reader thread adds, output thread forgets (on done)
        self.ready_q: deque[Seq] = deque()  # admitted, waiting for a slot (the scheduler pops)
        self.embed_jobs: deque[EmbedJob] = deque()   # the loop pops one when it has run
        self.event = threading.Event()

    def ready(self, seq: Seq) -> None:
        self.ready_q.append(seq)
        self.event.set()

    def enqueue(self, job: EmbedJob) -> None:
        self.embed_jobs.append(job)
        self.event.set()

    def wake(self) -> None:
        self.event.set()

    def forget(self, seq_id: str) -> None:
        self.seqs.pop(seq_id, None)

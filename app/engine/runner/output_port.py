"""The narrow port between the output thread and the context thread's loop.

The output thread admits requests and tokenizes embedding inputs; what it hands to the loop goes through this
port and nothing else: `ready` (an admitted Seq joins the ready queue), `enqueue` (an embedding job), `wake`
(a stop string or an output failure ended a sequence: reap it now), `forget` (a request is done: its id may be
used again). The loop reads `LoopInbox`'s queues; deques are safe for one appending and one popping thread.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Protocol

from app.engine.runner.sequence import Seq


class LoopPort(Protocol):
    def ready(self, seq: Seq) -> None: ...
    def enqueue(self, job) -> None: ...
    def wake(self) -> None: ...
    def forget(self, seq_id: str) -> None: ...


class LoopInbox:
    """The loop's side of the port: its ready queue, embedding jobs and wake event, and the live requests by id."""

    def __init__(self):
        self.seqs: dict[str, Seq] = {}      # reader thread adds, output thread forgets (on done)
        self.ready_q: deque[Seq] = deque()  # admitted, waiting for a slot (the scheduler pops)
        self.embed_jobs: deque = deque()    # (EmbedRequest, token lists, n tokens) (the loop pops when run)
        self.event = threading.Event()

    def ready(self, seq: Seq) -> None:
        self.ready_q.append(seq)
        self.event.set()

    def enqueue(self, job) -> None:
        self.embed_jobs.append(job)
        self.event.set()

    def wake(self) -> None:
        self.event.set()

    def forget(self, seq_id: str) -> None:
        self.seqs.pop(seq_id, None)

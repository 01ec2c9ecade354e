"""Stopping a running llama_decode for a cancel: the flag, the ids in flight, and the log levels of an abort.

The reader thread's cancel sets the flag when the request is in the decode running now (the step's batch, or one
of a draft model's decodes while the executor drafts the next step). The flag belongs to one decode: the context
thread runs each abortable decode inside `running(ids)`, which lowers the flag before the decode and after it, under
the same lock as the cancel's check, so a cancel that lands as one decode ends (after llama.cpp's last poll of the
flag, or between the cancel's check and its write) never stops the next decode, which may not hold that request
at all (the other sequences' drafts would be lost for the step). The flag being set means 'an abort we asked for
is in flight'. The abort callback is libc strlen on the flag: no GIL (a
Python callback would take the GIL once per graph node and slow a decode by ~80% while another thread is busy;
docs/architecture.md, "Runner"). CPU backends poll it per graph node.
Covered by tests/unit/engine/runner/step/test_step_cycle.py and tests/integration/engine/test_draft_model.py.
"""
from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from llama_cpp import llama_cpp as L

from app.ggml import llama_log

# What llama.cpp logs (ERROR/WARN) when a decode ends because our abort callback said so: ggml status 1 is
# GGML_STATUS_ABORTED and llama_decode's 2 is "aborted". While the runner itself has asked for an abort these are
# the expected result of a client's Stop/disconnect, not errors, so they go to DEBUG; a real failure (any other
# status or return code) keeps its level even then.
ABORT_LOG_LINES = ("failed with error 1", "compute status: 1", "removing memory module entries",
                   "failed to decode, ret = 2")


class DecodeAbort:
    def __init__(self, model):
        # a recurrent state is updated in place while a batch computes: a decode stopped half-way leaves every
        # sequence of the batch with a state that matches no position (it cannot be rolled back), so a cancel
        # on such a model waits for the running decode instead of aborting it
        self.abortable = not (L.llama_model_is_recurrent(model) or L.llama_model_is_hybrid(model))
        self.in_flight: frozenset[str] = frozenset()    # ids in the running decode (written under _lock)
        self._lock = threading.Lock()       # the cancel's check-and-set against a decode's start and end
        self.flag = ctypes.create_string_buffer(2)
        self.callback = ctypes.cast(ctypes.CDLL(None).strlen, L.ggml_abort_callback)
        llama_log.add_level_rule(self._relevel_abort_lines)

    def install(self, ctx) -> None:
        """Let the flag stop decodes on `ctx` (the target's context, and a draft model's)."""
        L.llama_set_abort_callback(ctx, self.callback, ctypes.cast(self.flag, ctypes.c_void_p))

    @contextmanager
    def running(self, ids: Iterable[str]) -> Iterator[None]:
        """Context thread: the decode of the requests `ids` runs inside this block; a cancel of one of them
        meanwhile stops it. The flag is down when the block starts and when it ends, whatever a cancel did
        around the previous decode."""
        with self._lock:
            self.in_flight = frozenset(ids)
            self.flag[0] = b"\x00"
        try:
            yield
        finally:
            with self._lock:
                self.in_flight = frozenset()
                self.flag[0] = b"\x00"

    def cancel(self, req_id: str) -> None:
        """Reader thread: stop the running decode now if `req_id` is in it and the model allows it."""
        with self._lock:
            if req_id in self.in_flight and self.abortable:
                self.request()

    def request(self) -> None:
        self.flag[0] = b"\x01"

    def close(self) -> None:
        llama_log.remove_level_rule(self._relevel_abort_lines)

    def _relevel_abort_lines(self, level: int, line: str) -> int:
        if level > logging.DEBUG and self.flag.raw[0] and any(k in line for k in ABORT_LOG_LINES):
            return logging.DEBUG
        return level

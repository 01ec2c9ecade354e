"""One request's state inside the runner (`Seq`), shared by admission, the context thread and the output thread."""
from __future__ import annotations

import numpy as np

PREFILL, GEN = "prefill", "gen"
WAIT = "wait"                   # placed in a slot, waiting for another sequence to compute a shared prefix
N_KEEP = 4                      # tokens kept at the start of a sequence on context shift (Ollama's num_keep)


class Seq:
    """One request's state from arrival to done. Fields are written by one thread at a time (see comments)."""

    def __init__(self, req):
        self.req = req
        self.id = req.id
        self.cancelled = False          # set by the reader thread
        self.finish: str | None = None  # requested end reason (context or output thread)
        self.out_reason: str | None = None   # reason the output thread saw first (a stop string)
        self.error: str | None = None
        self.error_kind = "error"
        self.error_data: dict | None = None     # numbers for the client's error (a context overflow's counts)
        self.slot: int | None = None
        self.state = PREFILL
        self.prompt = np.zeros(0, dtype=np.int32)   # tokens still to feed (prefill, or re-process window)
        self.todo = 0                   # index of the next prompt token to feed
        self.n_prompt = 0
        self.n_past = 0                 # tokens in this sequence's KV cells
        self.history: list[int] = []    # the tokens in KV, for the re-process fallback and `context`
        self.n_cached = 0               # prompt tokens found in KV cells (prompt cache), not decoded again
        self.checkpoint_at: list[int] = []   # prompt positions to take a context checkpoint at (admission)
        self.n_exact: int | None = None  # after a context shift: how many leading cells equal a cold computation
        self.wait_src = None            # state WAIT: the running Seq whose first `wait_n` cells this one copies
        self.wait_n = 0
        self.pending = -1               # sampled, not yet decoded
        self.speculate = bool(getattr(req, "speculate", True))   # may draft (the runner may still say no)
        self.drafter = None             # ngram_draft.NgramDrafter, made at the first step that may draft
        self.draft: list[int] = []      # this step's draft: decoded after `pending`, verified when sampling
        self.n_drafted = self.n_accepted = 0
        self.n_gen = 0
        self.sampler = None             # constrained.SeqSampler (chain + grammar)
        self.n_keep = 0
        self.dropped_messages = 0       # admission: oldest messages left out to fit the context (context_fit.py)
        self.truncated_tokens = 0       # admission: prompt tokens cut by the raw prompt's token rule
        self.t_admit = self.t_first = self.t_done = 0.0
        # output-thread state
        self.detok = None
        self.stop = None
        self.stop_bytes = None          # output.StopBytes, read by the context thread after sampling
        self.n_unsent = 0
        self.held = ""                  # text ready to send, held for the stream interval (output_thread.py)
        self.t_sent = 0.0               # when text was last sent (0: never, so the first token goes at once)
        self.n_out = 0
        self.pending_lp: list = []
        self.media = None               # media.MediaPrompt: the prompt's image chunks (admission; freed on release)

    def free_media(self) -> None:
        if self.media is not None:
            self.media.free()

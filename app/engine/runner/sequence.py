"""One request's state inside the runner, split by the thread that writes it, so every field has one writer.

Three threads touch a request (docs/architecture.md, "Runner"):
- the READER thread (main.py) makes the `Seq` from the immutable request and later only sets `cancelled`;
- the OUTPUT thread (output_thread.py) runs admission, which fills `Seq.adm` (`Admitted`) before it hands the
  Seq to the loop through the ready port, and afterwards writes only `Seq.out` (`OutputState`);
- the CONTEXT thread (the step loop: step_scheduler, step_executor, step_update) writes the rest of `Seq`. When it
  takes a Seq from the ready queue it copies what it will change (prompt, sampler, media, stop bytes, checkpoint
  positions) out of `adm` (`take_admitted`), so admission's record is never written again.
A thread reads another's fields only after a hand-off (the ready queue, the output queue), or reads a flag whose
stale value is harmless (`cancelled`, `out.reason`: the next step sees it).
"""
from __future__ import annotations

import numpy as np

PREFILL, GEN = "prefill", "gen"
WAIT = "wait"                   # placed in a slot, waiting for another sequence to compute a shared prefix
N_KEEP = 4                      # tokens kept at the start of a sequence on context shift (Ollama's num_keep)


class Admitted:
    """What admission (admission.py, OUTPUT thread) made of the request; written before the hand-off, then read-only."""

    def __init__(self):
        self.prompt = np.zeros(0, dtype=np.int32)   # the prompt's tokens (image positions as negative pseudo-tokens)
        self.n_prompt = 0
        self.n_keep = 0                 # tokens a context shift keeps at the start
        self.checkpoint_at: list[int] = []   # prompt positions to take a context checkpoint at
        self.media = None               # media.MediaPrompt: the prompt's image chunks
        self.sampler = None             # constrained.SeqSampler (chain + grammar)
        self.stop_bytes = None          # text.StopBytes: the loop checks sampled pieces against the stop strings
        self.dropped_messages = 0       # oldest messages left out to fit the context (context_fit.py)
        self.truncated_tokens = 0       # prompt tokens cut by the raw prompt's token rule
        self.think_budget: int | None = None    # the thinking budget set (think_budget.py), None: no cap
        self.error: str | None = None   # why admission refused the request (it never reaches the loop)
        self.error_kind = "error"
        self.error_data: dict | None = None     # numbers for the client's error (a context overflow's counts)
        self.report: dict | None = None # the prompt's anatomy and comparison with earlier prompts (cache/explain.py)
        self.views: list[list[int]] = []    # the prompt's other forms, tokenized, for prompt lookup (prompt_views.py)


class OutputState:
    """What the OUTPUT thread keeps per request while it turns sampled tokens into events (output_thread.py)."""

    def __init__(self):
        self.detok = None               # text.Detokenizer (made by admission, on this thread)
        self.stop = None                # text.StopMatcher
        self.reason: str | None = None  # an end the output thread saw first (a stop string, a failure); the loop reaps
        self.error: str | None = None
        self.n_out = 0                  # tokens shown
        self.n_unsent = 0               # tokens whose text is held, not yet sent
        self.held = ""                  # text ready to send, held for the stream interval
        self.t_sent = float("-inf")     # when text was last sent (never: the first token goes at once, whatever
                                        # the interval; 0 would hold it while the clock's uptime is below the interval)
        self.pending_lp: list = []      # logprobs of the held tokens


class Seq:
    """One request from arrival to done. Unmarked fields belong to the CONTEXT thread (the step loop)."""

    def __init__(self, req):
        self.req = req                  # immutable
        self.id = req.id
        self.speculate = bool(getattr(req, "speculate", True))   # may draft (the runner may still say no)
        self.cancelled = False          # READER thread (its only field)
        self.adm = Admitted()           # OUTPUT thread, admission only
        self.out = OutputState()        # OUTPUT thread
        # ---- context thread ----
        self.finish: str | None = None  # why the loop ended it (set once, at release)
        self.error: str | None = None   # a decode, sampling or image failure
        self.slot: int | None = None
        self.state = PREFILL
        self.prompt = np.zeros(0, dtype=np.int32)   # tokens still to feed (prefill, or re-process window)
        self.todo = 0                   # index of the next prompt token to feed
        self.n_past = 0                 # tokens in this sequence's KV cells
        self.history: list[int] = []    # the tokens in KV, for the re-process fallback and `context`
        self.n_cached = 0               # prompt tokens found in KV cells (prompt cache), not decoded again
        self.n_reused = 0               # of n_cached, those cache reuse moved from other positions (approximate)
        self.cache_source = ""          # where n_cached came from: "slot" | "host" | "sequence" | "disk"
        self.cache_candidates: dict[str, int] = {}   # the longest common prefix each source offered
        self.checkpoint_at: list[int] = []   # prompt positions still to take a context checkpoint at
        self.n_exact: int | None = None  # after a context shift: how many leading cells equal a cold computation
        self.wait_src = None            # state WAIT: the running Seq whose first `wait_n` cells this one copies
        self.wait_n = 0
        self.pending = -1               # sampled, not yet decoded
        self.drafter = None             # ngram_draft.NgramDrafter (the proposer's own), made when it first drafts
        self.views: list[list[int]] = []    # from adm.views: the prompt's other forms the drafter also copies from
        # the draft proposed for the next step (the update sets it after sampling); the next plan takes it into
        # its span (step_plan.Span.draft), which verifies it
        self.draft: list[int] = []
        self.n_drafted = self.n_accepted = 0
        self.n_gen = 0
        self.sampler = None             # from adm.sampler; freed (None) at release
        self.media = None               # from adm.media; freed at release
        self.stop_bytes = None          # from adm.stop_bytes (pushed each sampled piece)
        self.t_admit = self.t_first = self.t_done = 0.0

    def take_admitted(self) -> None:
        """CONTEXT thread, when it takes the Seq from the ready queue: its own copies of what it will change."""
        a = self.adm
        self.prompt, self.sampler, self.media, self.stop_bytes = a.prompt, a.sampler, a.media, a.stop_bytes
        self.checkpoint_at = list(a.checkpoint_at)
        self.views = a.views

    @property
    def kv_slot(self) -> int:
        """CONTEXT thread: the slot of a placed sequence, for the batch rows and KV cells a step gives it."""
        if self.slot is None:
            raise RuntimeError(f"sequence {self.id} is not placed in a slot")
        return self.slot

    def free_media(self) -> None:
        if self.media is not None:
            self.media.free()
            self.media = None

    @property
    def error_message(self) -> str | None:
        """The failure a client is told about: the output thread's, the loop's or admission's (first that exists)."""
        return self.out.error or self.error or self.adm.error

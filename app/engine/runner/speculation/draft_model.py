"""Drafts from a second, small model with the target's vocabulary (speculative decoding's draft model).

The draft model has its own llama_model and llama_context, with one sequence per target slot (seq id = slot).
After a step's sampling (the step executor's execute phase), each sequence that goes on generating and may draft
gets its draft context caught up with the target's tokens (what its cells hold and the token it decodes next),
then up to k tokens are drafted greedily, one draft-model decode per token
for all drafting sequences at once; a draft ends early where the draft model is unsure (top probability below
p_min: there the target would likely disagree, and a near-tie could flip between batch shapes) or at an
end-of-generation token. The next step verifies the draft in the target's batch like any other proposer's
(runner/speculation/proposer.py), so the reply is the target's own, token for token.

The draft context's KV is kept equal to a prefix of the target's tokens: `cells[slot]` lists what it holds. After
verification it is cut back to the accepted prefix (llama_memory_seq_rm); before drafting, whatever the target's
sequence now holds that the draft context does not (a new prompt, a prefix the prompt cache brought from another
slot or from host memory, a context shift) is found by the longest common prefix and decoded again from there,
at most one batch of catch-up tokens per step (a sequence still catching up does not draft yet).
Context thread only (the same thread decodes both contexts, so one OpenMP team serves both).
"""
from __future__ import annotations

import logging
import os
from contextlib import nullcontext

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.gguf.vocab_match import MAX_SIZE_DIFFERENCE
from app.engine.layout.llama_params import context_params, draft_layout, model_params
from app.engine.layout.types import Layout
from app.engine.runner.batch import NpBatch
from app.engine.runner.decode_abort import DecodeAbort
from app.engine.runner.sequence import Seq
from app.engine.runner.speculation.proposer import DraftAsk

log = logging.getLogger("strata.engine")


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists (whole-slice compares first: C speed)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n                       # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class DraftModel:
    """The draft model behind the step loop's proposer interface (runner/speculation/proposer.py)."""
    kind = "model"
    gated = False                       # the user chose it per model: its drafts are always made

    def __init__(self, model, ctx, n_slots: int, *, max_tokens: int = 8, p_min: float = 0.6, name: str = "",
                 n_vocab_target: int = 0):
        self.model, self.ctx, self.name = model, ctx, name
        self.vocab = L.llama_model_get_vocab(model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        # a token past the target's vocabulary (one family's sizes differ by a few padding ids) is never drafted
        self.n_vocab_target = n_vocab_target or self.n_vocab
        self.mem = L.llama_get_memory(ctx)
        self.n_batch = L.llama_n_batch(ctx)
        self.n_ctx_seq = L.llama_n_ctx_seq(ctx)
        self.max_tokens, self.p_min = max(1, int(max_tokens)), float(p_min)
        self.cells: list[list[int]] = [[] for _ in range(n_slots)]
        self.batch = NpBatch(max(self.n_batch, n_slots))
        self.abort: DecodeAbort | None = None

    def attach_abort(self, abort: DecodeAbort) -> None:
        """Let a cancel stop this model's decodes: each runs inside `abort.running` with the requests it holds."""
        self.abort = abort
        abort.install(self.ctx)

    # ---- the proposer interface ------------------------------------------------------------------------------
    def propose(self, asks: list[DraftAsk], n_seqs: int, capacity: int) -> dict[str, list[int]]:
        spare = capacity - n_seqs
        catch_up = self.n_batch
        b = self.batch
        b.clear()
        live: list[tuple[Seq, int, int]] = []          # (sequence, its longest draft, batch row of its logits)
        fed: list[tuple[Seq, list[int]]] = []           # what each sequence's row(s) in `b` add to its cells
        for ask in asks:
            seq = ask.seq
            limit = min(ask.limit, self.max_tokens, spare)
            if seq.cancelled or seq.slot is None or seq.media is not None or limit <= 0:
                continue                                # (an image's embeddings: the draft model has no projector)
            target = ask.tokens()
            cells = self._sync(seq.slot, target)
            todo = target[len(cells):]
            if len(todo) > catch_up:                    # a long prompt: catch up over several steps, no draft yet
                if catch_up > 0:
                    b.add_span(todo[:catch_up], len(cells), seq.slot, logits_last=False)
                    fed.append((seq, todo[:catch_up]))
                    catch_up = 0
                continue
            row = b.add_span(todo, len(cells), seq.slot, logits_last=True)
            fed.append((seq, todo))
            catch_up -= len(todo)
            live.append((seq, limit, row))
            spare -= limit
        if b.n == 0:
            return {}
        drafts: dict[str, list[int]] = {}
        if not self._decode(fed):
            return {}
        while live:
            nxt = []
            for seq, limit, row in live:
                tok = self._pick(row)
                if tok is None:
                    continue
                d = drafts.setdefault(seq.id, [])
                d.append(tok)
                if len(d) < limit:
                    nxt.append((seq, limit))
            if not nxt:
                break
            b.clear()
            fed, live = [], []
            for seq, limit in nxt:
                if seq.cancelled:                       # cancelled since: its draft no longer matters
                    continue
                tok = drafts[seq.id][-1]
                live.append((seq, limit, b.add(tok, len(self.cells[seq.kv_slot]), seq.kv_slot, True)))
                fed.append((seq, [tok]))
            if not fed or not self._decode(fed):
                break                                   # the drafts so far stand; their cells were rolled back
        return drafts

    def emitted(self, seq: Seq, tokens: list[int]) -> None:
        pass                                # (the next proposal catches the draft context up with them)

    def verified(self, seq: Seq, n_held: int, n_drafted: int, n_accepted: int) -> None:
        """Cut the draft context back to what the target's sequence now holds: its first `n_held` tokens (the
        drafted cells past the accepted prefix were rejected)."""
        if seq.slot is None:
            return
        cells = self.cells[seq.slot]
        if n_held < len(cells):
            if not L.llama_memory_seq_rm(self.mem, seq.slot, n_held, -1):
                L.llama_memory_seq_rm(self.mem, seq.slot, -1, -1)
                n_held = 0
            del cells[n_held:]

    def close(self) -> None:
        if self.ctx:
            L.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            L.llama_model_free(self.model)
            self.model = None

    # ---- helpers -----------------------------------------------------------------------------------------------
    def _sync(self, slot: int, target: list[int]) -> list[int]:
        """Drop the slot's draft cells past their common prefix with `target`, and always the last token of
        `target` (it is decoded again: its logits give the first draft token)."""
        cells = self.cells[slot]
        n = min(common_prefix(cells, target), len(target) - 1)
        if n < len(cells):
            if not L.llama_memory_seq_rm(self.mem, slot, n, -1):
                L.llama_memory_seq_rm(self.mem, slot, -1, -1)
                n = 0
            del cells[n:]
        return cells

    def _decode(self, fed) -> bool:
        """Decode the batch; on success each sequence's cells grow by what it fed. On failure (a cancel's abort,
        no KV slot) every fed row is removed again and False comes back. A cancel stops it only when one of the
        requests it holds is cancelled while it runs (decode_abort.DecodeAbort.running)."""
        scope = self.abort.running(seq.id for seq, _ in fed) if self.abort is not None else nullcontext()
        with scope:
            rc = L.llama_decode(self.ctx, self.batch.struct)
        if rc != 0:
            for seq, _ in fed:
                L.llama_memory_seq_rm(self.mem, seq.slot, len(self.cells[seq.slot]), -1)
            if rc != 2:
                log.warning("draft model: llama_decode returned %d (no drafts this step)", rc)
            return False
        for seq, toks in fed:
            self.cells[seq.slot].extend(toks)
        return True

    def _pick(self, row: int) -> int | None:
        """The draft model's most likely token at `row`, or None where it is unsure or ends the reply."""
        ptr = L.llama_get_logits_ith(self.ctx, row)
        if not ptr:
            return None
        x = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))
        tok = int(x.argmax())
        if self.p_min > 0 and 1.0 / float(np.exp(x - x[tok]).sum()) < self.p_min:
            return None
        if tok >= self.n_vocab_target or L.llama_vocab_is_eog(self.vocab, tok):
            return None
        return tok


def load_draft(layout: Layout, n_threads: int | None, n_vocab_target: int) -> DraftModel | None:
    """The layout's draft model loaded beside the target (None when it has none); RuntimeError with the reason
    when it cannot serve as one (file gone, load failure, another vocabulary, a recurrent model)."""
    plan = layout.draft
    if plan is None:
        return None
    if not os.path.isfile(plan.model_path):
        raise RuntimeError(f"draft model file not found: {plan.model_path}")
    dl = draft_layout(layout)
    mp, keep = model_params(dl)
    model = L.llama_model_load_from_file(plan.model_path.encode(), mp)
    del keep
    if not model:
        raise RuntimeError(f"llama.cpp could not load the draft model {plan.model_path}")
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    why = None
    if abs(n_vocab - n_vocab_target) > MAX_SIZE_DIFFERENCE:      # the service compared the texts before the load
        why = f"its vocabulary has {n_vocab} tokens, the model's {n_vocab_target}"
    elif L.llama_model_is_recurrent(model) or L.llama_model_is_hybrid(model):
        why = "it is a recurrent model (its state cannot drop rejected tokens)"
    if why:
        L.llama_model_free(model)
        raise RuntimeError(f"draft model {plan.name or plan.model_path} cannot draft: {why}")
    ctx = L.llama_init_from_model(model, context_params(dl, n_threads))
    if not ctx:
        L.llama_model_free(model)
        raise RuntimeError("llama.cpp could not create the draft model's context (not enough memory?)")
    return DraftModel(model, ctx, layout.n_parallel, max_tokens=plan.max_tokens, p_min=plan.p_min, name=plan.name,
                      n_vocab_target=n_vocab_target)

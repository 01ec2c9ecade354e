"""Prompt lookup drafts for speculative decoding: no second model, just the sequence's own tokens.

A reply that repeats its prompt (an edited file printed whole, code completion echoing the code around it, a
summary quoting its source) or itself can be guessed several tokens ahead: find the most recent earlier place where
the last n tokens (prompt + reply so far) occurred, and propose what followed them there (llama.cpp's prompt
lookup, `common_ngram_simple_draft` in common/ngram-map.cpp, looks for one n-gram size; here the longest of
N_MIN..N_MAX that matches wins). The step executor verifies the proposal in one decode with the pending token
(step_executor.py, `_sample`): every token is still sampled from the model, so a wrong draft costs batch rows,
never a different reply.

How many of the proposed tokens are decoded is draft_policy.py's call (measured step costs against the
sequence's acceptance rate, kept here). Context thread only.
"""
from __future__ import annotations

from app.engine.runner.draft_policy import AcceptanceRate, StepCosts

N_MIN, N_MAX = 3, 6          # n-gram sizes looked up, longest first (2-token matches are mostly chance in prose)
MAX_DRAFT = 16               # longest draft (rows of the batch per sequence and step)
INDEX_PER_STEP = 1024        # token positions indexed per call (a long prompt is indexed over a few steps, ~5 ms each)


class NgramDrafter:
    """One sequence's lookup table and acceptance rate.

    `tokens` are the sequence's tokens in order (the prompt, then every token sampled, ending with the one about
    to be decoded); `index[(n-gram)]` is the position right after that n-gram's most recent occurrence that has at
    least one token after it, so a lookup never finds the sequence's own tail."""

    def __init__(self, tokens):
        self.tokens: list[int] = [int(t) for t in tokens]
        self.index: dict[tuple[int, ...], int] = {}
        self.indexed = 0                    # positions e < indexed have their n-grams ending at e in the index
        self.rate = AcceptanceRate()

    def push(self, token: int) -> None:
        """A token the sequence emitted (it will be decoded next, or it already was as an accepted draft)."""
        self.tokens.append(int(token))

    def _catch_up(self) -> None:
        toks, index = self.tokens, self.index
        end = min(len(toks) - 1, self.indexed + INDEX_PER_STEP)     # the last token has no continuation yet
        for e in range(max(self.indexed, N_MIN), end + 1):
            for n in range(N_MIN, min(N_MAX, e) + 1):
                index[tuple(toks[e - n:e])] = e
        self.indexed = max(self.indexed, end + 1)

    def lookup(self, limit: int) -> list[int]:
        """Up to `limit` tokens that followed the most recent earlier occurrence of the longest matching tail."""
        toks = self.tokens
        if limit <= 0 or len(toks) <= N_MIN:
            return []
        self._catch_up()
        for n in range(min(N_MAX, len(toks) - 1), N_MIN - 1, -1):
            e = self.index.get(tuple(toks[len(toks) - n:]))
            if e is not None:
                out = toks[e:min(e + limit, len(toks))]
                cut = next((i for i, t in enumerate(out) if t < 0), len(out))   # an image's pseudo-tokens
                return out[:cut]                                                 # (runner/media.py) are no text
        return []


class NgramProposer:
    """Prompt lookup behind the step loop's proposer interface (runner/proposer.py): each sequence's guess from its
    own NgramDrafter, as long as pays for its batch rows (draft_policy.StepCosts at the sequence's acceptance rate),
    in the order the sequences come, each seeing the rows the ones before it took."""
    kind = "ngram"
    gated = True

    def __init__(self):
        self.costs = StepCosts()

    def propose(self, asks, n_seqs: int, capacity: int) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        rows = n_seqs
        for seq, limit in asks:
            limit = min(limit, capacity - rows)
            if limit <= 0:
                continue
            if seq.drafter is None:
                seq.drafter = NgramDrafter(seq.history + [seq.pending])
            guess = seq.drafter.lookup(limit)
            n = self.costs.best_length(seq.drafter.rate.rate, n_seqs, rows, len(guess)) if guess else 0
            if n == 0:
                seq.drafter.rate.idle()
                continue
            out[seq.id] = guess[:n]
            rows += n
        return out

    def verified(self, seq, n_drafted: int, n_accepted: int) -> None:
        if seq.drafter is not None:
            seq.drafter.rate.update(n_drafted, n_accepted)

    def close(self) -> None:
        pass

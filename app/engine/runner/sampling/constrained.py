"""One sequence's sampler: the chain, and the grammar kept apart from it, so llama.cpp never aborts on a grammar.

llama.cpp throws (a C++ exception cannot cross ctypes: the runner process dies) when its grammar is fed a token
it rejects (`Unexpected empty grammar stack after accepting piece`, src/llama-grammar.cpp), and GGML_ABORTs
when it is fed an end-of-generation token before the grammar is complete. So no token reaches
`llama_sampler_accept` on a grammar unless that grammar allows it:
- sampling is llama.cpp's common_sampler's (common/sampling.cpp, `common_sampler_sample`): the chain (without
  the grammar) picks a token; the grammar tests it on a one-candidate array; when rejected, the grammar masks
  the full candidate list and the chain picks again. A token the grammar still rejects (it admits nothing here)
  ends this sequence with an error naming the grammar (`GrammarStuck`); the batch goes on.
- lazy tool-call grammars (`tool_choice: auto`) are not given to llama.cpp as lazy grammars, whose trigger
  replays buffered tokens unchecked. The reply's text is watched here (tool_grammar.ToolGrammar.find_trigger);
  at the trigger an ordinary grammar starts whose root begins with the text already written
  (`ToolGrammar.triggered`) and is fed the tokens from there, each tested first. If one is rejected the
  grammar is dropped and the watch goes on after that point: the reply stays free text.
Sequences without a grammar (or still waiting for a trigger) sample with `llama_sampler_sample` alone, or, when
the chain is greedy with at most a repeat penalty, take the argmax of the logits (greedy.py: same token, no
candidate array).
"""
from __future__ import annotations

import bisect
import ctypes
import logging
import threading
from collections import OrderedDict

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.runner.sampling import chain as sampling
from app.engine.runner.sampling.greedy import GreedyPick
from app.engine.runner.sampling.tool_grammar import BARE, MARKER, ToolGrammar, may_open_bare

log = logging.getLogger("strata.engine")

TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data


class GrammarStuck(RuntimeError):
    """The grammar admits no token the sampler can pick: the sequence cannot continue under it."""


_PARSED_SIZE = 32
_parsed: OrderedDict[tuple[int, str], None] = OrderedDict()      # (vocab, GBNF) llama.cpp has parsed
_parsed_lock = threading.Lock()


def check_parses(vocab, gbnf: str) -> None:
    """SamplingError unless llama.cpp parses `gbnf` for `vocab`; a text that parsed before is not parsed again
    (an agent's tool grammar comes with each of its requests)."""
    key = (ctypes.cast(vocab, ctypes.c_void_p).value or 0, gbnf)
    with _parsed_lock:
        if key in _parsed:
            _parsed.move_to_end(key)
            return
    sampling.free_grammar(sampling.grammar_sampler(vocab, gbnf))
    with _parsed_lock:
        _parsed[key] = None
        while len(_parsed) > _PARSED_SIZE:
            _parsed.popitem(last=False)


class SeqSampler:
    """The sampler chain of one sequence plus its grammar (a GBNF string, a ToolGrammar, or None).

    `label` names the grammar in errors ("format JSON schema", "tool_choice required"...); `piece(token,
    special=True)` gives a token's bytes as llama.cpp's grammar sees them (special tokens as their text)."""

    def __init__(self, chain, vocab, n_vocab: int, grammar=None, label: str = "grammar", piece=None,
                 greedy: GreedyPick | None = None):
        self.chain = chain
        self.greedy = greedy                # the chain's pick without it (greedy.py), fed the tokens it is fed
        self.vocab = vocab
        self.n_vocab = n_vocab
        self.label = label
        self.piece = piece
        self.grammar = None                 # llama_sampler* of the grammar in force
        self.lazy: ToolGrammar | None = None
        self.text = bytearray()             # while lazy: the reply so far, and each token's start in it
        self.tokens: list[int] = []
        self.starts: list[int] = []
        self.search_from = 0
        self.bare = True                    # a bare `{"name"` call (maybe in a ```json fence) may still start the reply
        self.budget = None                  # a think_budget.ThinkBudget, set by admission
        self.hold = None                    # an answer_hold.AnswerHold (bar_calls), set by admission
        self._cur: np.ndarray | None = None  # numpy llama_token_data[n_vocab], made when a grammar is in force
        self._one = L.llama_token_data()
        self._one_arr = L.llama_token_data_array(data=ctypes.pointer(self._one), size=1, selected=-1, sorted=False)
        if isinstance(grammar, ToolGrammar) and grammar.lazy:
            if piece is None:
                raise ValueError("a lazy grammar needs the token pieces")
            self.lazy = grammar
            # parsed once now, so a grammar llama.cpp cannot parse is the request's error, not the trigger's
            check_parses(vocab, grammar.triggered(MARKER if grammar.opener else BARE, ""))
        elif grammar is not None:
            self.grammar = sampling.grammar_sampler(vocab, grammar if isinstance(grammar, str) else grammar.gbnf)

    def free(self) -> None:
        sampling.free_chain(self.chain)
        sampling.free_grammar(self.grammar)
        self.chain = self.grammar = None

    # ---- sampling (the context thread) ---------------------------------------------------------------------
    def sample(self, ctx, row: int) -> int:
        """Pick the next token from the logits of batch row `row` and accept it into the chain (and grammar);
        with a thinking budget spent, the next token of the text that ends thinking instead (think_budget)."""
        forced = self.budget.next_forced() if self.budget is not None and self.grammar is None else None
        if forced is not None:
            self._accept(forced)
            if self.lazy is not None:
                self.watch(forced)
            tok = forced
        else:
            tok = self._sample(ctx, row)
        if self.budget is not None:
            self.budget.seen(tok)
        return tok

    def _sample(self, ctx, row: int) -> int:
        if self.grammar is None:
            if self.hold is not None and self.hold.active:
                tok = self._held(ctx, row, self.hold)
                self._accept(tok)
            elif self.greedy is not None:
                tok = self.greedy.pick(self._logits(ctx, row))
                self._accept(tok)
            else:
                tok = L.llama_sampler_sample(self.chain, ctx, row)
            if self.lazy is not None:
                self.watch(tok)
            return tok
        logits = self._logits(ctx, row)
        tok = self._pick(logits, False)
        if not self.allows(self.grammar, tok):
            tok = self._pick(logits, True)           # resample with the grammar applied first
            if not self.allows(self.grammar, tok):
                raise GrammarStuck(f"the {self.label} grammar admits no token the sampler can pick here")
        L.llama_sampler_accept(self.grammar, tok)
        self._accept(tok)
        return tok

    def _held(self, ctx, row: int, hold) -> int:
        """The pick while the reply has said nothing yet (answer_hold): the model's own, unless the hold refuses it
        (the end of the reply; barred, a call's start): then the best of the tokens it does not mask."""
        logits = self._logits(ctx, row)
        tok = self.greedy.pick(logits) if self.greedy is not None else self._pick(logits, False)
        if hold.refuses(tok):
            kept = hold.mask(logits)
            try:
                tok = self.greedy.pick(logits) if self.greedy is not None else self._pick(logits, False)
            finally:
                hold.unmask(logits, kept)
        hold.seen(tok)
        return tok

    def _accept(self, tok: int) -> None:
        L.llama_sampler_accept(self.chain, tok)
        if self.greedy is not None:
            self.greedy.accept(tok)

    def accept_prompt(self, tokens, window: int) -> None:
        """The prompt's last `window` tokens to the chain's penalties (chain.accept_prompt), and to the greedy
        pick's copy of them."""
        sampling.accept_prompt(self.chain, tokens, window)
        if self.greedy is not None and window > 0:
            for t in tokens[-window:]:
                self.greedy.accept(int(t))

    def _logits(self, ctx, row: int) -> np.ndarray:
        ptr = L.llama_get_logits_ith(ctx, row)
        if not ptr:
            raise RuntimeError(f"no logits for batch row {row}")
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def _pick(self, logits: np.ndarray, grammar_first: bool) -> int:
        cur = self._cur
        if cur is None:
            cur = self._cur = np.empty(self.n_vocab, dtype=TOKEN_DATA)
            self._ids = np.arange(self.n_vocab, dtype=np.int32)
            self._arr = L.llama_token_data_array(
                data=ctypes.cast(cur.ctypes.data, ctypes.POINTER(L.llama_token_data)),
                size=self.n_vocab, selected=-1, sorted=False)
        cur["id"] = self._ids                        # samplers sort and shrink the array: refill it each time
        cur["logit"] = logits
        cur["p"] = 0.0
        self._arr.size, self._arr.selected, self._arr.sorted = self.n_vocab, -1, False
        if grammar_first:
            L.llama_sampler_apply(self.grammar, ctypes.byref(self._arr))
            if not (cur["logit"] > -np.inf).any():
                raise GrammarStuck(f"the {self.label} grammar admits no token here")
        L.llama_sampler_apply(self.chain, ctypes.byref(self._arr))
        sel = self._arr.selected
        if not 0 <= sel < self._arr.size:
            raise RuntimeError("the sampler chain selected no token")
        return int(cur["id"][sel])

    def allows(self, grammar, tok: int) -> bool:
        """Whether `grammar` accepts `tok` now (an end-of-generation token only once the grammar is complete)."""
        # llama_cpp annotates its Structure fields with their ctypes types; ctypes takes (and gives) Python ints
        self._one.id, self._one.logit, self._one.p = tok, 1.0, 0.0  # type: ignore[assignment]
        self._one_arr.size, self._one_arr.selected, self._one_arr.sorted = 1, -1, False
        L.llama_sampler_apply(grammar, ctypes.byref(self._one_arr))
        return self._one.logit != -np.inf

    # ---- lazy tool-call grammars ---------------------------------------------------------------------------
    def watch(self, tok: int) -> None:
        """A token sampled freely while a lazy grammar waits: start the grammar when it completes a trigger."""
        if self.lazy is None or L.llama_vocab_is_eog(self.vocab, tok):
            return
        self.starts.append(len(self.text))
        self.tokens.append(tok)
        self.text += self.piece(tok, special=True)
        if self.bare and not may_open_bare(self.text):
            self.bare = False
            if not self.lazy.opener:             # nothing else can start a call: sample freely from here
                self.lazy = None
                return
        tail = len(self.text) - len(self.piece(tok, special=True)) - len(self.lazy.opener or "")
        found = self.lazy.find_trigger(self.text, max(self.search_from, tail, 0), self.bare)
        if found is not None:
            self._start(*found)

    def _start(self, pos: int, kind: str) -> None:
        """Start the grammar at byte `pos` of the reply: fed from the token that holds `pos`, every token
        tested before it is accepted."""
        i = bisect.bisect_right(self.starts, pos) - 1
        self.search_from, self.bare = pos + 1, False
        try:
            prefix = bytes(self.text[self.starts[i]:pos]).decode("utf-8")
        except UnicodeDecodeError:       # the token holding the trigger starts inside a character: not a call
            return
        assert self.lazy is not None                 # only a lazy grammar waits for its trigger (watch)
        g = sampling.grammar_sampler(self.vocab, self.lazy.triggered(kind, prefix))
        for tok in self.tokens[i:]:
            if not self.allows(g, tok):
                log.debug("%s: the text at the trigger does not fit the grammar; it stays free text", self.label)
                sampling.free_grammar(g)
                return
            L.llama_sampler_accept(g, tok)
        self.grammar, self.lazy = g, None
        self.text, self.tokens, self.starts = bytearray(), [], []

"""Request admission, on the runner's output thread: validate the request, render the chat template, tokenize,
truncate to the context, build the grammar and the sampler chain, and set up the output state.

The context thread never waits on this work: a sequence reaches the `ready` queue only once its prompt tokens
and sampler chain exist (docs/architecture.md, "Runner").
"""
from __future__ import annotations

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.runner import chat_template, grammar, sampling
from app.engine.runner.embeddings import tokenize
from app.engine.runner.output import MAX_TOP_LOGPROBS, Detokenizer, StopBytes, StopMatcher, Vocab
from app.engine.runner.sequence import N_KEEP, Seq


def validate(req) -> None:
    """The request fields the runner itself relies on (the service validates the rest); ValueError names them."""
    if not isinstance(req.num_predict, int) or isinstance(req.num_predict, bool):
        raise ValueError("num_predict must be an integer")
    if not isinstance(req.top_logprobs, int) or not 0 <= req.top_logprobs <= MAX_TOP_LOGPROBS:
        raise ValueError(f"top_logprobs must be an integer in 0..{MAX_TOP_LOGPROBS}")
    if not isinstance(req.stop, list) or not all(isinstance(s, str) for s in req.stop):
        raise ValueError("stop must be a list of strings")


class Admission:
    """Turns a `Seq` holding a GenerateRequest into one the context thread can run (`__call__`)."""

    def __init__(self, model, n_ctx_seq: int, vocab_out: Vocab):
        self.vocab = L.llama_model_get_vocab(model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_seq = n_ctx_seq
        self.vocab_out = vocab_out
        raw_tpl = L.llama_model_chat_template(model, None)
        self.template = raw_tpl.decode("utf-8", "replace") if raw_tpl else None
        self.bos_id, eos_id = L.llama_vocab_bos(self.vocab), L.llama_vocab_eos(self.vocab)
        self.bos = self._special(self.bos_id)
        self.eos = self._special(eos_id)

    def _special(self, token: int) -> str:
        return self.vocab_out.piece(token, special=True).decode("utf-8", "replace") if token >= 0 else ""

    def __call__(self, seq: Seq) -> None:
        req = seq.req
        validate(req)
        toks = self.prompt_tokens(req)
        seq.n_keep = min(N_KEEP, len(toks))
        if len(toks) > self.n_ctx_seq:            # keep the start (system prompt head) and the most recent part
            toks = toks[:seq.n_keep] + toks[len(toks) - (self.n_ctx_seq - seq.n_keep):]
        seq.prompt = np.asarray(toks, dtype=np.int32)
        seq.n_prompt = len(toks)
        gbnf = grammar.grammar_for(req.json_mode, req.json_schema)
        seq.chain = sampling.build_chain(req.sampling, self.vocab, self.n_vocab, gbnf, self.n_ctx_seq)
        sampling.accept_prompt(seq.chain, seq.prompt, sampling.penalty_window(req.sampling, self.n_ctx_seq))
        seq.detok = Detokenizer(self.vocab_out)
        seq.stop = StopMatcher(list(req.stop))
        seq.stop_bytes = StopBytes(list(req.stop)) if any(req.stop) else None

    def prompt_text(self, req) -> str:
        """The text to tokenize: messages through the GGUF's chat template (or joined, raw), or the prompt."""
        if req.messages is not None and not req.raw:
            return chat_template.render_chat(self.template, req.messages, bos_token=self.bos, eos_token=self.eos)
        if req.messages is not None:
            return "".join(str(m.get("content") or "") for m in chat_template.validate_messages(req.messages))
        if req.prompt is not None:
            if not isinstance(req.prompt, str):
                raise ValueError("prompt must be a string")
            if req.raw:
                return req.prompt
            return chat_template.render_chat(self.template, chat_template.prompt_messages(req.prompt, req.system),
                                             bos_token=self.bos, eos_token=self.eos)
        raise ValueError("the request needs a prompt or messages")

    def prompt_tokens(self, req) -> list[int]:
        toks = tokenize(self.vocab, self.prompt_text(req), add_special=True, parse_special=True)
        if len(toks) >= 2 and toks[0] == toks[1] == self.bos_id:
            toks = toks[1:]                       # the template wrote BOS and the tokenizer added another
        if not toks:
            raise ValueError("the prompt is empty")
        return toks

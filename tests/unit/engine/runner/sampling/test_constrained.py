"""The grammar kept out of the chain (runner/sampling/constrained.SeqSampler): whatever the chain, every token
sampled is one the grammar allows (SmolLM2's logits)."""
from __future__ import annotations

from llama_cpp import llama_cpp as L

from app.engine import protocol as P
from app.engine.runner.batch import NpBatch
from app.engine.runner.embedding.embeddings import tokenize
from app.engine.runner.sampling.chain import build_chain
from app.engine.runner.sampling.constrained import SeqSampler
from app.engine.runner.sampling.grammar import grammar_for
from engine_util import decode_prompt as _decode_prompt


def test_every_sampler_option_samples_under_a_grammar(llama):
    """The grammar kept out of the chain (constrained.SeqSampler): whatever the chain's samplers (truncation,
    mirostat, a strong bias towards a word), every sampled token is one a fresh copy of the grammar allows in
    turn, and the reply opens as JSON does."""
    _, ctx, vocab, v = llama
    mem = L.llama_get_memory(ctx)
    hello = tokenize(vocab, "Hello", add_special=False)[0]
    for p in (P.SamplingParams(), P.SamplingParams(temperature=0), P.SamplingParams(mirostat=1, seed=2),
              P.SamplingParams(mirostat=2, seed=3), P.SamplingParams(temperature=1.5, top_k=0, top_p=0.5, min_p=0.1,
                                                                     typical_p=0.8, seed=4),
              P.SamplingParams(temperature=0, logit_bias={hello: 100.0})):
        gbnf = grammar_for(json_mode=True)
        s = SeqSampler(build_chain(p, v.n_vocab, n_ctx=512), vocab, v.n_vocab, gbnf, "format json", v.piece)
        check = SeqSampler(None, vocab, v.n_vocab, gbnf)
        L.llama_memory_clear(mem, True)
        toks, row = _decode_prompt(ctx, vocab, "Reply in JSON:")
        out = b""
        try:
            for i in range(8):
                tok = s.sample(ctx, row)
                assert check.allows(check.grammar, tok), (p, out, v.piece(tok))
                L.llama_sampler_accept(check.grammar, tok)
                out += v.piece(tok)
                b = NpBatch(4)
                row = b.add_span([tok], len(toks) + i, 0, logits_last=True)
                assert L.llama_decode(ctx, b.struct) == 0
        finally:
            s.free()
            check.free()
        assert out.startswith(b"{"), (p, out)
    L.llama_memory_clear(mem, True)

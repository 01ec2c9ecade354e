"""Grammars for JSON mode and JSON schemas (runner/sampling/grammar.py), built into llama.cpp samplers."""
from __future__ import annotations

import pytest

from app.engine.runner.sampling.chain import SamplingError, free_grammar, grammar_sampler
from app.engine.runner.sampling.grammar import GrammarError, grammar_for


def test_grammars_for_json_and_schemas(llama):
    _, _, vocab, v = llama
    assert grammar_for() is None
    assert "root" in grammar_for(json_mode=True)
    g = grammar_for(json_schema={"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
    assert "root" in g
    free_grammar(grammar_sampler(vocab, g))
    with pytest.raises(GrammarError):
        grammar_for(json_schema=["not", "a", "schema"])
    with pytest.raises(SamplingError, match="grammar"):
        grammar_sampler(vocab, "root ::= [unterminated")

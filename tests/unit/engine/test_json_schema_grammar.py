"""Our JSON-schema converter (app/engine/json_schema_grammar/) against llama.cpp's own C++ tests, as data
(tests/support/fixtures/json_schema/cases.json, written by extract.py from the vendored llama.cpp):
- every case of tests/test-json-schema-to-grammar.cpp: the same grammar text as the C++ converter, or an error;
- every grammar parses in llama.cpp (llama_sampler_init_grammar on SmolLM2's vocabulary);
- every case of tests/test-grammar-integration.cpp's `test_schema`: llama.cpp's grammar sampler, fed the string
  as SmolLM2 tokens (each tested before it is accepted), accepts the valid strings and rejects the invalid ones.
Then the cases a tool-calling model met: JSON whitespace with newlines, no raw control characters in strings, and the
service's parser reading what the grammar let through."""
from __future__ import annotations

import json
import re

import pytest
from llama_cpp import llama_cpp as L

from app.engine.json_schema_grammar import SchemaError, json_schema_to_grammar
from app.engine.runner.embedding.embeddings import tokenize
from app.engine.runner.output.text import Vocab
from app.engine.runner.sampling.chain import free_grammar, grammar_sampler
from app.engine.runner.sampling.constrained import SeqSampler
from app.engine.runner.sampling.grammar import GrammarError, grammar_for
from app.service.generation.toolcalls import parse_all
from repo_paths import FIXTURES

CASES = json.loads((FIXTURES / "json_schema" / "cases.json").read_text())


def trim(s: str) -> str:
    """The C++ test's comparison: outer whitespace and each line's indentation removed."""
    return re.sub(r"(^|\n)[ \t]+", r"\1", s.strip(" \n\r\t"))


def matches(vocab, gbnf: str, text: str) -> bool:
    """Whether llama.cpp's grammar accepts `text` whole: every token allowed when it comes, and the grammar
    complete at the end (it then allows end-of-generation)."""
    n_vocab = L.llama_vocab_n_tokens(vocab)
    s = SeqSampler(None, vocab, n_vocab, gbnf, "test")
    try:
        toks = tokenize(vocab, text, add_special=False, parse_special=False) if text else []
        pieces = Vocab(vocab, n_vocab)
        assert b"".join(pieces.piece(t) for t in toks) == text.encode(), text   # tokens spell the text exactly
        for t in toks:
            if not s.allows(s.grammar, t):
                return False
            L.llama_sampler_accept(s.grammar, t)
        return s.allows(s.grammar, L.llama_vocab_eos(vocab))
    finally:
        s.free()


@pytest.mark.parametrize("case", CASES["conversion"], ids=[c["name"] for c in CASES["conversion"]])
def test_same_grammar_as_llama_cpp(vocab, case):
    if case["status"] == "FAILURE":
        with pytest.raises(SchemaError):
            json_schema_to_grammar(case["schema"])
        return
    got = json_schema_to_grammar(case["schema"])
    assert trim(got) == trim(case["grammar"])
    free_grammar(grammar_sampler(vocab, got))                     # and llama.cpp parses it


@pytest.mark.parametrize("case", CASES["acceptance"], ids=[c["name"] for c in CASES["acceptance"]])
def test_grammar_accepts_valid_and_rejects_invalid_strings(vocab, case):
    gbnf = json_schema_to_grammar(case["schema"])
    assert case["passing"] or case["failing"]
    for text in case["passing"]:
        assert matches(vocab, gbnf, text), f"rejected {text!r}"
    for text in case["failing"]:
        assert not matches(vocab, gbnf, text), f"accepted {text!r}"


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
          "required": ["city", "days"]}


def test_whitespace_as_models_write_it(vocab):
    g = grammar_for(json_schema=SCHEMA)
    assert matches(vocab, g, '{\n  "city": "Paris",\n  "days": 3\n}')
    assert matches(vocab, g, '{"city":"Paris","days":3}')
    assert not matches(vocab, g, '{\n\n\n"city": "Paris", "days": 3}')        # at most two newlines, as llama.cpp


def test_no_raw_control_characters_in_strings(vocab):
    g = grammar_for(json_schema=SCHEMA)
    assert not matches(vocab, g, '{"city": "Par\nis", "days": 3}')
    assert not matches(vocab, g, '{"city": "Par\tis", "days": 3}')
    assert matches(vocab, g, '{"city": "Par\\nis \\u00e9", "days": 3}')
    for mode in (grammar_for(json_mode=True),):
        assert matches(vocab, mode, '{\n  "a": [1, 2.5e3, "x"],\n  "b": {"c": null}\n}')
        assert not matches(vocab, mode, '{"a": "raw\nnewline"}')
        assert not matches(vocab, mode, '[1, 2]')                              # format json: an object


def test_tool_arguments_use_the_same_rules(vocab):
    from app.engine.runner.sampling import tool_grammar as tg
    tools = [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}}]
    g = tg.for_request(tools, "required", "hermes", parallel=False).gbnf
    assert matches(vocab, g, '{"name": "f", "arguments": {\n    "city": "Paris",\n    "days": 3\n  }}')
    assert not matches(vocab, g, '{"name": "f", "arguments": {"city": "Par\nis", "days": 3}}')


def test_schema_errors_are_grammar_errors_naming_the_problem():
    with pytest.raises(GrammarError, match="unrecognized type kaboom"):
        grammar_for(json_schema={"type": "kaboom"})
    with pytest.raises(GrammarError, match="minLength 100000 is over the limit"):
        grammar_for(json_schema={"type": "string", "minLength": 100000})
    with pytest.raises(GrammarError, match=r"pattern repeats \{5000,\}"):
        grammar_for(json_schema={"type": "string", "pattern": "^a{5000,}$"})
    with pytest.raises(GrammarError, match="Unresolved|cannot resolve"):
        grammar_for(json_schema={"$ref": "#/$defs/missing"})


def test_an_upper_bound_no_reply_reaches_means_unbounded(vocab):
    """Claude Code bounds its tools' strings at maxLength 524288 (and arrays, patterns alike): past what any reply
    in a context reaches, so the grammar leaves the bound out instead of refusing the request; bounds within
    reach are kept, and the request's schema is not changed."""
    schema = {"type": "object", "properties": {
        "content": {"type": "string", "maxLength": 524288},
        "lines": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 100000},
        "id": {"type": "string", "pattern": "^[a-z]{1,50000}$"},
        "default": {"type": "string", "maxLength": 2000000}},          # a property named like a keyword
        "required": ["content", "lines", "id"], "additionalProperties": False}
    before = json.dumps(schema, sort_keys=True)
    g = grammar_for(json_schema=schema)
    assert json.dumps(schema, sort_keys=True) == before
    assert matches(vocab, g, '{"content": "' + "x" * 3000 + '", "lines": ["abc", "de"], "id": "' + "q" * 1500 + '"}')
    assert not matches(vocab, g, '{"content": "x", "lines": ["abcd"], "id": "q"}')      # maxLength 3 still holds
    assert not matches(vocab, g, '{"content": "x", "lines": [], "id": "Q"}')            # the pattern still holds


def test_the_parser_keeps_what_the_grammar_let_through():
    """A raw newline inside a string (which an older grammar admitted, and models write) still parses as a call."""
    d = parse_all("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": "Par\nis"}}</tool_call>')
    assert [(c.name, c.arguments) for c in d.calls] == [("get_weather", {"city": "Par\nis"})]
    assert d.content == ""
    d = parse_all("generic", '{"name": "get_weather", "arguments": {"city": "Par\nis"}}', ["get_weather"])
    assert [c.arguments for c in d.calls] == [{"city": "Par\nis"}]

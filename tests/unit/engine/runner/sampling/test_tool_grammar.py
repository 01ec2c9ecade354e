"""Tool-call grammars on the real SmolLM2 vocabulary: llama.cpp parses every family's grammar, a forced grammar
admits only a call, and a lazy one leaves text free until the family's marker and then admits only the call."""
from __future__ import annotations

import pytest
from llama_cpp import llama_cpp as L

from app.engine.runner.output.text import Vocab
from app.engine.runner.sampling import tool_grammar as tg
from app.engine.runner.sampling.chain import free_grammar, grammar_sampler
from app.engine.runner.sampling.constrained import SeqSampler
from app.engine.runner.sampling.grammar import GrammarError
from app.service.generation.toolcalls import parse_all
from grammar_util import TOOLS, accept_text, allowed, piece_id, watch_text


@pytest.mark.parametrize("family", ["hermes", "llama3", "mistral", "generic"])
def test_every_lazy_grammar_parses_in_llama_cpp(vocab, family):
    g = tg.for_request(TOOLS, "auto", family)
    assert g is not None and g.lazy
    for kind, prefix in ((tg.BARE, ""), (tg.BARE, "\n "), (tg.MARKER, ""), (tg.MARKER, 'say "hi"\t')):
        if kind == tg.MARKER and not g.opener:
            continue
        free_grammar(grammar_sampler(vocab, g.triggered(kind, prefix)))


def test_forced_grammar_admits_only_a_call(vocab):
    n_vocab = L.llama_vocab_n_tokens(vocab)
    s = grammar_sampler(vocab, tg.for_request(TOOLS, "required", "generic", parallel=False).gbnf)
    ok = allowed(vocab, s, n_vocab)
    assert ok[piece_id(vocab, "{")] and not ok[piece_id(vocab, "Hello")]
    accept_text(vocab, s, '{"name": "get_weather", "arguments": {"city": ')
    ok = allowed(vocab, s, n_vocab)
    assert ok[piece_id(vocab, '"')] and not ok[piece_id(vocab, "1")]      # city must be a string
    L.llama_sampler_free(s)


def test_named_tool_choice_admits_only_that_name(vocab):
    n_vocab = L.llama_vocab_n_tokens(vocab)
    s = grammar_sampler(vocab, tg.for_request(TOOLS, "get_time", "generic").gbnf)
    accept_text(vocab, s, '{"name": "get_')
    ok = allowed(vocab, s, n_vocab)
    assert ok[piece_id(vocab, "time")] and not ok[piece_id(vocab, "weather")]
    L.llama_sampler_free(s)
    with pytest.raises(GrammarError, match="not among the tools"):
        tg.for_request(TOOLS, "no_such_tool", "generic")


def lazy_sampler(vocab, family, parallel=True):
    n_vocab = L.llama_vocab_n_tokens(vocab)
    return SeqSampler(None, vocab, n_vocab, tg.for_request(TOOLS, "auto", family, parallel), "tool-call",
                      Vocab(vocab, n_vocab).piece)


def test_lazy_grammar_free_until_marker_then_constrained(vocab):
    n_vocab = L.llama_vocab_n_tokens(vocab)
    s = lazy_sampler(vocab, "hermes")
    watch_text(vocab, s, "Sure, let me look")
    assert s.grammar is None                                                # free text before the marker
    watch_text(vocab, s, ' that up. <tool_call>\n{"name": "get_weather", "arguments": {"city": ')
    assert s.grammar is not None
    ok = allowed(vocab, s.grammar, n_vocab)
    assert ok[piece_id(vocab, '"')] and not ok[piece_id(vocab, "Hello")]
    s.free()


@pytest.mark.parametrize("start", ['{\n  "name"', '\n{"name"', '{"name"', '  { "name"'])
def test_bare_call_at_the_start_triggers_with_json_whitespace(vocab, start):
    """What made llama.cpp's lazy grammar throw (`{\\n`): the grammar starts on it and constrains the rest."""
    n_vocab = L.llama_vocab_n_tokens(vocab)
    s = lazy_sampler(vocab, "hermes")
    watch_text(vocab, s, start + ': "get_weather", "arguments": {"city": ')
    assert s.grammar is not None
    ok = allowed(vocab, s.grammar, n_vocab)
    assert ok[piece_id(vocab, '"')] and not ok[piece_id(vocab, "1")]
    s.free()


def test_fenced_call_at_the_start_is_constrained_and_closed(vocab):
    """Qwen2.5-Coder-0.5B writes most calls inside a ```json fence: the grammar starts at the brace, holds the
    call, and admits the closing fence, then only the end."""
    s = lazy_sampler(vocab, "hermes")
    watch_text(vocab, s, '```json\n{\n    "name": "get_weather",\n    "arguments": {"city": "Paris"}\n}')
    assert s.grammar is not None
    assert not s.allows(s.grammar, L.llama_vocab_eos(vocab))                # the fence must close first
    watch_text(vocab, s, "\n```")
    assert s.allows(s.grammar, L.llama_vocab_eos(vocab))
    s.free()
    s = lazy_sampler(vocab, "generic")
    watch_text(vocab, s, '```python\nprint({"name": 1})')                  # other code: never a call
    assert s.grammar is None and s.lazy is None
    s.free()


@pytest.mark.parametrize("start", ['Action:\n{\n    "name"', 'Action: {"name"', '>{"name"', 'Action:\n```json\n{"name"'])
def test_a_react_label_or_a_stray_character_before_a_bare_call_triggers(vocab, start):
    """What Qwen2.5-Coder-0.5B writes under smolagents' ToolCallingAgent prompt (`Action:` and a JSON blob whose
    name it made up, `weather_interpreter`) and after a repeat penalty on `{"` (`>{"`): the grammar starts at the
    brace, so the name must be one of the tools."""
    n_vocab = L.llama_vocab_n_tokens(vocab)
    s = lazy_sampler(vocab, "hermes")
    watch_text(vocab, s, start + ': "')
    assert s.grammar is not None
    ok = allowed(vocab, s.grammar, n_vocab)
    assert ok[piece_id(vocab, "get")] and not ok[piece_id(vocab, "weather")]
    s.free()


def test_bare_calls_one_per_line_in_parallel(vocab):
    """Qwen2.5-Coder-0.5B, given a tool result, writes its next calls as bare objects one per line: the grammar
    admits the next call after a newline (cutting the reply after the first left the model's second call unsaid),
    or the end; without parallel calls only the end."""
    eos = L.llama_vocab_eos(vocab)
    call = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    s = lazy_sampler(vocab, "hermes")
    watch_text(vocab, s, call)
    assert s.allows(s.grammar, eos) and s.allows(s.grammar, piece_id(vocab, "\n"))
    watch_text(vocab, s, '\n{"name": "get_time", "arguments": {}}')
    assert s.allows(s.grammar, eos)
    s.free()
    s = lazy_sampler(vocab, "hermes", parallel=False)
    watch_text(vocab, s, call)
    assert s.allows(s.grammar, eos) and not s.allows(s.grammar, piece_id(vocab, "\n"))
    s.free()


def test_a_label_that_leads_elsewhere_stays_free(vocab):
    for text in ("Action: I will answer directly.", "Actually, {\"name\"", "> quote {\"name\""):
        s = lazy_sampler(vocab, "generic")
        watch_text(vocab, s, text)
        assert s.grammar is None and s.lazy is None, text
        s.free()


def test_text_the_grammar_rejects_stays_free(vocab):
    """The marker completed by a token that also holds text no call can continue from (`>.`): the grammar is
    dropped (it is never fed a token it rejects), the reply stays free, and a later marker starts it again."""
    s = lazy_sampler(vocab, "hermes")
    watch_text(vocab, s, "<tool_call>. Hello")
    assert s.grammar is None and s.lazy is not None
    watch_text(vocab, s, " and now <tool_call>")
    assert s.grammar is not None
    s.free()
    s = lazy_sampler(vocab, "generic")                                     # no marker: only a bare start counts
    watch_text(vocab, s, 'Text first {"name"')
    assert s.grammar is None and s.lazy is None
    s.free()


def test_no_grammar_for_none_or_no_tools():
    assert tg.for_request(TOOLS, "none", "hermes") is None
    assert tg.for_request(None, "required", "hermes") is None


def test_forced_output_parses_as_a_call():
    """What the forced grammar lets through is what the service's parser reads as a call (any family)."""
    reply = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}'
    for family in ("hermes", "llama3", "mistral", "generic", "deepseek"):
        d = parse_all(family, reply, ["get_weather", "get_time"])
        assert [(c.name, c.arguments) for c in d.calls] == [("get_weather", {"city": "Paris", "days": 2})]
        assert d.content == ""


def test_grammar_trigger_and_parser_come_from_one_record(vocab):
    """For every family whose calls the `auto` grammar models, the text the grammar admits from the family's
    marker on is read back as that call by the family's own parser (both from app/engine/chat/formats.py)."""
    from app.engine.chat.formats import FORMATS

    modelled = [f for f in FORMATS.values() if f.grammar is not None and f.grammar.opener]
    assert {f.name for f in modelled} >= {"hermes", "llama3", "mistral"}
    for f in modelled:
        shape = f.grammar
        assert shape.opener in f.shown and shape.opener in {s.start for s in f.sections}
        call = '{"name": "get_weather", "%s": {"city": "Paris"}}' % shape.args_key
        text = shape.opener + ("[" + call + "]" if shape.listed else call) + shape.closer
        s = lazy_sampler(vocab, f.name)
        watch_text(vocab, s, "Let me check. " + text)        # every token of it admitted by the grammar
        assert s.grammar is not None and s.allows(s.grammar, L.llama_vocab_eos(vocab)), f.name   # complete
        s.free()
        d = parse_all(f.name, "Let me check. " + text, ["get_weather", "get_time"])
        assert [(c.name, c.arguments) for c in d.calls] == [("get_weather", {"city": "Paris"})], f.name


def test_a_tool_set_is_built_once_and_parsed_once(vocab, monkeypatch):
    """An agent sends the same tools with every request: the grammar is built once per tool set and plan (and a
    changed tool set gets its own), and llama.cpp parses a lazy grammar's text once to check it."""
    from app.engine.runner.sampling import chain as sampling, constrained
    tg.clear_cache()
    first = tg.for_request(TOOLS, "auto", "hermes")
    assert tg.for_request([dict(t) for t in TOOLS], "auto", "hermes") is first          # equal tools: a hit
    assert tg.for_request(TOOLS, "required", "hermes") is not first                     # another plan
    other = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "name": "renamed"}}] + TOOLS[1:]
    assert tg.for_request(other, "auto", "hermes") is not first
    parses = []
    real = sampling.grammar_sampler
    monkeypatch.setattr(sampling, "grammar_sampler", lambda v, g: parses.append(g) or real(v, g))
    n_vocab = L.llama_vocab_n_tokens(vocab)
    out = Vocab(vocab, n_vocab)
    constrained._parsed.clear()
    for _ in range(3):
        SeqSampler(None, vocab, n_vocab, first, "tools", out.piece).free()
    assert len(parses) == 1

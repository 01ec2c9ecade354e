"""Tool options that change the grammar, on the real SmolLM2 vocabulary in llama.cpp:
`parallel_tool_calls: false` under tool_choice auto admits one call and then only the end of the reply, and a
`format` beside tools on auto admits either content in that format or a call (OpenAI's response_format with
tools), its rules renamed so they cannot clash with the call's."""
from __future__ import annotations

import re

from llama_cpp import llama_cpp as L
from llama_cpp.llama_grammar import JSON_GBNF

from app.engine.chat.plan import plan_chat
from app.engine.runner.output.text import Vocab
from app.engine.runner.sampling import tool_grammar as tg
from app.engine.runner.sampling.chain import free_grammar, grammar_sampler
from app.engine.runner.sampling.constrained import SeqSampler
from app.engine.runner.sampling.grammar import grammar_for
from app.service.generation.chat_features import ReplyReader
from app.service.generation.request import GenerationRequest
from app.service.generation.result import TextDelta, ToolCallEvent
from grammar_util import TOOLS, accept_text, allowed, piece_id, watch_text

ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}, "sure": {"type": "boolean"}},
          "required": ["answer"]}


def test_prefix_rules_renames_definitions_and_uses_only():
    out = tg.prefix_rules(JSON_GBNF, "fmt-")
    defined = re.findall(r"^\s*([A-Za-z0-9_-]+)\s*::=", out, re.M)
    assert defined and all(d.startswith("fmt-") for d in defined)
    assert "fmt-root   ::= fmt-object" in out and "fmt-value  ::= fmt-object | fmt-array | fmt-string" in out
    assert '"true"' in out and "[^\"\\\\\\x7F\\x00-\\x1F]" in out and "[0-9]{0,15}" in out   # literals untouched
    assert "# Optional space" in out


def test_format_with_tools_on_auto_admits_either(vocab):
    n_vocab = L.llama_vocab_n_tokens(vocab)
    gbnf = tg.with_format(TOOLS, "hermes", grammar_for(json_schema=ANSWER))
    for text in ('{"answer": "Paris"}', '{"name": "get_weather", "arguments": {"city": "Paris"}}',
                 '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'):
        s = grammar_sampler(vocab, gbnf)
        accept_text(vocab, s, text)                # llama.cpp throws on a token its grammar rejects
        free_grammar(s)
    s = grammar_sampler(vocab, gbnf)
    ok = allowed(vocab, s, n_vocab)
    assert ok[piece_id(vocab, "{")] and ok[piece_id(vocab, "<")] and not ok[piece_id(vocab, "Hello")]
    accept_text(vocab, s, '{"answer": ')
    ok = allowed(vocab, s, n_vocab)
    assert ok[piece_id(vocab, '"')] and not ok[piece_id(vocab, "1")]     # the format's own schema holds
    free_grammar(s)
    # format "json" (no schema), and a family without a marker: a JSON object or a bare call
    free_grammar(grammar_sampler(vocab, tg.with_format(TOOLS, "harmony", grammar_for(json_mode=True))))


def test_parallel_false_on_auto_admits_one_call(vocab):
    n_vocab = L.llama_vocab_n_tokens(vocab)
    call = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\n'
    for parallel in (True, False):
        s = SeqSampler(None, vocab, n_vocab, tg.for_request(TOOLS, "auto", "hermes", parallel=parallel),
                       "tool-call", Vocab(vocab, n_vocab).piece)
        watch_text(vocab, s, "Let me check. " + call)
        ok = allowed(vocab, s.grammar, n_vocab)
        assert bool(ok[piece_id(vocab, "<")]) is parallel          # another call, or only the end of the reply
        assert not ok[piece_id(vocab, "Hello")]
        s.free()
    g = tg.for_request(TOOLS, "auto", "mistral", parallel=False)
    assert g.wrapped == '("[TOOL_CALLS]" tc-ws "[" tc-ws call tc-ws "]" tc-ws)'


def test_reply_reader_keeps_one_call_without_parallel():
    """Families whose calls no grammar shapes (gpt-oss...) may still write two: the service passes the first."""
    reply = ('<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>'
             '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
             '{"city": "Paris"}<|call|>')

    for parallel, n in ((True, 2), (False, 1)):
        req = GenerationRequest(model="m", messages=[], tools=TOOLS, tool_choice="auto", parallel_tool_calls=parallel)
        r = ReplyReader(req, plan_chat("harmony", TOOLS, "auto", parallel))
        first_call_end = reply.index("<|call|>") + len("<|call|>")
        events = r.feed(TextDelta(reply[:first_call_end - 1]))
        assert not r.calls_done                     # the first call is not complete yet
        events += r.feed(TextDelta(reply[first_call_end - 1:first_call_end]))
        assert r.calls_done is (not parallel)       # the pipeline stops the model here (pipeline._reply)
        events += r.feed(TextDelta(reply[first_call_end:])) + r.finish()
        calls = [e for e in events if isinstance(e, ToolCallEvent)]
        assert [c.name for c in calls] == ["get_time", "get_weather"][:n]

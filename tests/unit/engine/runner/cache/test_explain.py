"""The cache-miss explainer's runner half (app/engine/runner/cache/explain.py) on prompts rendered by a ChatML
template with tools as Qwen2.5's renders them, tokenized one token per character (so token and character
positions agree and every case can be checked by hand): the anatomy covers the prompt exactly, and each verdict
(tail, changed, branched, evicted, new) comes with the right divergence."""
from __future__ import annotations

import json

from app.engine.runner.cache import explain
from app.engine.runner.prompt.chat_template import render_chat

TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n{{ messages[0]['content'] }}\n\n# Tools\n\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n\nCall them as JSON.<|im_end|>\n"
    "{%- else %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n{%- endif %}"
    "{%- for m in messages[1:] %}\n<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>{%- endfor %}"
    "\n<|im_start|>assistant\n")

TOOLS = [{"type": "function", "function": {"name": n, "description": f"The {n} tool: " + "x" * 40 * (i + 1),
                                           "parameters": {"type": "object", "properties": {}}}}
         for i, n in enumerate(("Bash", "Read", "Write"))]
SYSTEM = "You are a coding agent. Be brief. " * 8


def piece(t: int, special: bool = False) -> bytes:
    return chr(t).encode("utf-8")


def tokens(text: str) -> list[int]:
    return [ord(c) for c in text]


def render(messages, tools=TOOLS) -> str:
    return render_chat(TEMPLATE, messages, tools=tools)


def session(date="2026-11-27", turns=1):
    msgs = [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"<reminder>Today's date is {date}.</reminder>\nLook at notes.txt."}]
    for i in range(turns - 1):
        msgs += [{"role": "assistant", "content": f'{{"name": "Read", "arguments": {{"path": "f{i}"}}}}'},
                 {"role": "tool", "content": f"contents of file {i}\n" * 3}]
    return msgs


def admit(history, rid, msgs, tools=TOOLS):
    text = render(msgs, tools)
    return history.admit(rid, text, tokens(text), msgs, tools), text


def test_anatomy_covers_the_prompt_and_names_every_part():
    history = explain.PromptHistory(piece)
    msgs = session(turns=3)
    report, text = admit(history, "r1", msgs)
    parts = report["anatomy"]
    assert sum(p["tokens"] for p in parts) == report["prompt_tokens"] == len(text)
    assert [p["token"] for p in parts] == sorted(p["token"] for p in parts) and parts[0]["token"] == 0
    kinds = [(p["kind"], p.get("role", p["label"])) for p in parts]
    assert kinds[0] == ("system", "system")
    assert [p["label"] for p in parts if p["kind"] == "tool"] == ["Bash", "Read", "Write"]
    assert [p["index"] for p in parts if p["kind"] == "message"] == [1, 2, 3, 4, 5]
    # each tool's part is its schema as the template wrote it (tojson), and longer tools cost more
    tool_tokens = {p["label"]: p["tokens"] for p in parts if p["kind"] == "tool"}
    for t in TOOLS:
        dump = json.dumps(t, ensure_ascii=False)
        assert len(dump) <= tool_tokens[t["function"]["name"]] <= len(dump) + 1
    assert tool_tokens["Bash"] < tool_tokens["Read"] < tool_tokens["Write"]
    assert [p["turn"] for p in parts if p["kind"] == "message"] == [1, 1, 1, 1, 1]


def test_the_tools_called_so_far_are_named():
    history = explain.PromptHistory(piece)
    msgs = session(turns=2) + [{"role": "assistant", "content": "",
                                "tool_calls": [{"function": {"name": "Bash", "arguments": {"cmd": "ls"}}}]},
                               {"role": "tool", "content": "notes.txt"}]
    report, _ = admit(history, "r", msgs)
    assert report["tools_called"] == ["Bash"]
    assert "tools_called" not in admit(history, "s", session(), tools=None)[0]
    # the same conversation sent without its tools (the second try of a reply that repeated the last round's
    # calls) still names the calls it made
    report, _ = admit(history, "t", msgs, tools=None)
    assert report["tools_called"] == ["Bash"] and not [p for p in report["anatomy"] if p["kind"] == "tool"]


def test_a_session_that_only_appends_reuses_all_but_the_tail():
    history = explain.PromptHistory(piece)
    r1, t1 = admit(history, "r1", session(turns=1))
    assert "previous" not in r1
    done = explain.finish(r1, prompt_tokens=len(t1), cached=0, moved=0, source="", candidates={})
    assert done["verdict"] == "new" and done["source"] == "none" and done["new_tail"] == len(t1)
    r2, t2 = admit(history, "r2", session(turns=2))
    assert r2["previous"] == {"request": "r1", "tokens": len(t1), "shared": len(t1)}
    assert "divergence" not in r2
    done = explain.finish(r2, prompt_tokens=len(t2), cached=len(t1), moved=0, source="slot",
                          candidates={"slot": len(t1), "host": 0})
    assert done["verdict"] == "tail" and done["recomputed_beyond_tail"] == 0
    assert done["new_tail"] == len(t2) - len(t1) and done["candidates"] == {"slot": len(t1)}
    cached = [p["cached"] for p in done["anatomy"]]
    assert sum(cached) == len(t1) and all(c == p["tokens"] for c, p in zip(cached, done["anatomy"])
                                          if p["token"] + p["tokens"] <= len(t1))


def test_a_changed_date_is_found_in_its_message_with_the_text_either_side():
    history = explain.PromptHistory(piece)
    _, t1 = admit(history, "r1", session(turns=2))
    r2, t2 = admit(history, "r2", session(date="2026-11-28", turns=3))
    div = r2["divergence"]
    at = t1.index("2026-11-27") + len("2026-11-2")
    assert div["token"] == div["char"] == at
    assert div["part"]["kind"] == "message" and div["part"]["role"] == "user" and div["part"]["index"] == 1
    assert div["before"].endswith("Today's date is 2026-11-2") and len(div["before"]) == explain.SIDE_CHARS
    assert (div["old"], div["new"]) == ("7", "8")
    assert div["after_new"].startswith(".</reminder>\nLook at notes.txt.") and div["after_old"] == div["after_new"]
    # everything after the date but the new turn was in the old prompt: a chunk-moving cache could keep it
    assert len(t1) - at - 60 <= div["repeated_after"] <= len(t1) - at
    done = explain.finish(r2, prompt_tokens=len(t2), cached=at, moved=0, source="slot", candidates={"slot": at})
    assert done["verdict"] == "changed"
    assert done["recomputed_beyond_tail"] == div["repeated_after"] > explain.END_SLACK


def test_a_change_in_the_system_prompt_names_the_system_message():
    history = explain.PromptHistory(piece)
    admit(history, "r1", session())
    msgs = session()
    msgs[0] = dict(msgs[0], content=msgs[0]["content"].replace("brief", "terse", 1))
    r2, _ = admit(history, "r2", msgs)
    div = r2["divergence"]
    assert div["part"]["kind"] == "system" and div["part"]["index"] == 0
    assert (div["old"], div["new"]) == ("brief", "terse") or (div["old"][:3], div["new"][:3]) == ("bri", "ter")


def test_a_reordered_tool_is_named():
    history = explain.PromptHistory(piece)
    admit(history, "r1", session())
    tools = [TOOLS[1], TOOLS[0], TOOLS[2]]
    r2, _ = admit(history, "r2", session(), tools)
    assert r2["divergence"]["part"]["kind"] == "tool" and r2["divergence"]["part"]["label"] == "Read"


def test_another_conversation_on_the_same_system_prompt_branches():
    history = explain.PromptHistory(piece)
    _, t1 = admit(history, "r1", session(turns=2))
    msgs = [session()[0], {"role": "user", "content": "Something else entirely, with no reminder at all."}]
    r2, t2 = admit(history, "r2", msgs)
    div = r2["divergence"]
    assert div["part"]["role"] == "user" and div["part"]["index"] == 1 and div["repeated_after"] == 0
    done = explain.finish(r2, prompt_tokens=len(t2), cached=div["token"], moved=0, source="slot", candidates={})
    assert done["verdict"] == "branched" and done["recomputed_beyond_tail"] == 0


def test_a_prompt_the_cache_lost_is_evicted():
    history = explain.PromptHistory(piece)
    _, t1 = admit(history, "r1", session(turns=1))
    r2, t2 = admit(history, "r2", session(turns=2))
    done = explain.finish(r2, prompt_tokens=len(t2), cached=0, moved=0, source="", candidates={})
    assert done["verdict"] == "evicted" and done["recomputed_beyond_tail"] == len(t1)
    off = explain.finish(r2, prompt_tokens=len(t2), cached=0, moved=0, source="", candidates={}, cache_prompt=False)
    assert off["verdict"] == "off" and off["recomputed_beyond_tail"] == 0


def test_the_most_similar_earlier_prompt_is_compared():
    history = explain.PromptHistory(piece)
    admit(history, "a", session(turns=3))
    admit(history, "b", [{"role": "system", "content": "Another client."}, {"role": "user", "content": "hi"}],
          tools=None)
    r, _ = admit(history, "c", session(turns=4))
    assert r["previous"]["request"] == "a" and "divergence" not in r
    # a conversation's previous turn is preferred to another that shares a few more tokens with it
    msgs = session(turns=2)
    admit(history, "d", msgs)
    admit(history, "e", msgs + [{"role": "assistant", "content": '{"name": "Write", "arguments": {}}'}])
    r, _ = admit(history, "f", msgs + [{"role": "assistant", "content": '{"name": "Read", "arguments": {}}'}])
    assert r["previous"]["request"] == "d" and "divergence" not in r


def test_non_ascii_text_maps_tokens_to_characters():
    history = explain.PromptHistory(lambda t, special=False: bytes([t]))
    msgs = [{"role": "system", "content": "Système: réponds brièvement. " * 4},
            {"role": "user", "content": "Quelle est la date? 2026-11-27 — merci"}]
    text = render(msgs, None)
    data = list(text.encode("utf-8"))
    report = history.admit("r", text, data, msgs, None)
    parts = report["anatomy"]
    assert sum(p["tokens"] for p in parts) == len(data)
    user = next(p for p in parts if p.get("role") == "user")
    # the user part starts where the system message's content ends (bytes counted, not characters)
    assert bytes(data[:user["token"]]).decode().endswith("brièvement. ")
    assert bytes(data[user["token"]:]).decode().startswith("<|im_end|><|im_start|>user\nQuelle")


def test_a_change_in_the_first_tokens_is_explained_and_an_unrelated_prompt_is_new():
    history = explain.PromptHistory(piece)
    msgs = session()
    msgs[0] = dict(msgs[0], content="nonce=ab12; " + SYSTEM)
    admit(history, "r1", msgs)
    msgs[0] = dict(msgs[0], content="nonce=cd34; " + SYSTEM)
    r2, t2 = admit(history, "r2", msgs)
    div = r2["divergence"]
    assert r2["previous"]["request"] == "r1" and div["part"]["kind"] == "system"
    assert (div["old"], div["new"]) == ("ab12", "cd34") and div["repeated_after"] > 200
    done = explain.finish(r2, prompt_tokens=len(t2), cached=div["token"], moved=0, source="slot", candidates={})
    assert done["verdict"] == "changed" and done["recomputed_beyond_tail"] == div["repeated_after"]
    text = "A raw prompt with nothing in common with the rest, not even the template's first tokens."
    r3 = history.admit("r3", text, tokens(text))
    assert "previous" not in r3
    assert explain.finish(r3, prompt_tokens=len(text), cached=0, moved=0, source="", candidates={})["verdict"] == \
        "new"

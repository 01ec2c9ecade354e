"""The prompt's views for prompt lookup (speculation/prompt_views.py) and how the drafter copies from them
(ngram_draft.NgramDrafter): a reply that writes its prompt as a JSON string, or a JSON document of it indented, is
drafted from the view; a reply that copies the prompt as it stands still copies the prompt; a miss in a view
leaves the prompt's own odds alone."""
from __future__ import annotations

import json

from app.engine.runner.speculation import prompt_views as V
from app.engine.runner.speculation.ngram_draft import VIEW_END, NgramDrafter

FILE = 'def greet(name):\n    print("hello", name)\n    return "ok"\n'
DOC = {"name": "strata", "version": "2.4.1", "tags": ["local", "gguf"], "limits": {"ctx": 8192, "slots": 4}}


def forms(text: str) -> list[str]:
    """The forms of `text`'s documents, in order."""
    return [f for t in V.find_documents(text) for f in t.forms]


def test_the_escaped_view_is_the_text_as_a_json_string():
    assert V.json_string(FILE) == json.dumps(FILE)[1:-1]
    assert "\\n" in V.json_string(FILE) and '\\"' in V.json_string(FILE)
    assert V.json_string("plain words, nothing to escape") is None


def test_a_compact_document_is_written_at_two_and_four_spaces():
    text = "Reformat this:\n\n" + json.dumps(DOC, separators=(",", ":")) + "\n\nThanks."
    assert forms(text) == [json.dumps(DOC, indent=2), json.dumps(DOC, indent=4)]


def test_a_document_already_indented_so_gets_only_the_other_indentation():
    text = "Here:\n" + json.dumps(DOC, indent=2) + "\n"
    assert forms(text) == [json.dumps(DOC, indent=4)]


def test_code_braces_short_documents_and_broken_json_give_nothing():
    text = ('for k in {a for a in xs}: print([k, v])\n{"a": 1}\n{"name": "x", "broken": [1, 2,\n'
            'function f() { return [1, 2]; }\n')
    assert forms(text) == []


def test_the_search_for_documents_is_bounded_on_unclosed_brackets():
    # each line opens an array the rest of the text never closes: every '[' starts a parse that reads to the end
    # before it fails, so trying them all would read ~30M characters; the search stops at MAX_SCAN
    text = ("[" + "1, " * 500 + "\n") * 200
    tries = V.find_documents(text)
    assert all(not t.forms for t in tries)
    assert len(tries) < text.count("[")
    assert sum(t.read_to - t.start for t in tries[:-1]) < V.MAX_SCAN


def test_a_prompt_that_starts_like_the_last_one_is_searched_from_where_they_differ_with_the_same_result():
    doc = json.dumps(DOC, separators=(",", ":"))
    first = "Turn one:\n" + doc + "\nthen an open one: " + doc[:40]
    cases = [(first, first + doc[40:] + "\n"),                  # a document the next turn completes
             ("a string left open: " + doc[:20], "a string left open: " + doc + "\n" + doc),
             (first, first[:30] + "changed" + first[30:])]       # the texts part inside the first document
    for before, after in cases:
        earlier = V.find_documents(before)
        shared = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
        assert V.find_documents(after, earlier, shared) == V.find_documents(after)
    assert [t.forms for t in V.find_documents(cases[0][1]) if t.forms] == [
        (json.dumps(DOC, indent=2), json.dumps(DOC, indent=4))] * 2


def test_views_of_the_next_turn_reuse_the_documents_tokens():
    calls = []

    def tok(text, add_special):
        calls.append(text)
        return [ord(c) for c in text]
    views = V.PromptViews(tok, tok)
    text = "Schemas: " + json.dumps(DOC, separators=(",", ":")) + "\nuser: hi\n"
    first = views(text)
    calls.clear()
    second = views(text + "assistant: hello\nuser: more\n")
    assert second[1:] == first[1:]                               # the same documents' forms
    assert calls == [json.dumps(text + "assistant: hello\nuser: more\n")[1:-1]]   # only the escaped view again


def test_views_are_tokenized_by_the_tokenizers_given():
    calls = []

    def tok(text, add_special):
        calls.append((text, add_special))
        return [ord(c) for c in text]
    text = FILE + json.dumps(DOC, separators=(",", ":"))
    views = V.PromptViews(tok, tok)(text)
    assert [bytes(v).decode() for v in views] == [json.dumps(text)[1:-1], json.dumps(DOC, indent=2),
                                                   json.dumps(DOC, indent=4)]
    assert all(add is False for _, add in calls)
    assert V.PromptViews(tok, tok)("") == []


# ---- the drafter with views (token ids stand for characters) ------------------------------------------------
def ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_a_reply_writing_the_prompt_escaped_drafts_from_the_escaped_view():
    prompt = ids("Write this file:\n" + FILE + "\n")
    view = ids(json.dumps(FILE)[1:-1])
    reply = ids('{"content": "def greet(name):\\n')
    with_view = NgramDrafter(prompt + reply, [view])
    want = ids('    print(\\"hello\\", name)\\n    return')
    assert with_view.lookup(len(want)) == want
    assert with_view.score is with_view._viewed          # scored as a view's guess
    # without the view the copy is found in the plain prompt and breaks at its first quote
    plain = NgramDrafter(prompt + reply).lookup(len(want))
    assert plain != want


def printing(reply: str) -> NgramDrafter:
    """The drafter of a reply to "Print this file", with the file's escaped view."""
    return NgramDrafter(ids("Print this file:\n" + FILE + "\n" + reply), [ids(json.dumps(FILE)[1:-1])])


def test_a_reply_copying_the_prompt_as_it_stands_copies_the_prompt():
    view = ids(json.dumps(FILE)[1:-1])
    d = printing("def greet(name):\n    pri")
    assert d.lookup(12) == ids('nt("hello", ')
    assert d.score is d._own
    assert d.tokens[len(view)] == VIEW_END and d.n_views == len(view) + 1


def test_a_miss_in_a_view_leaves_the_prompts_own_odds_alone():
    d = printing('"def greet(name):\\n')
    assert d.lookup(14) == ids('    print(\\"he')
    own_before = list(d._own.rates())
    for t in ids('    print("'):                                # the reply leaves the view's form at the quote
        d.push(t)
    assert d._own.rates() == own_before
    assert d._viewed.rates() != own_before

"""Other forms of the prompt that a reply copies, for prompt lookup (ngram_draft.py) to find what the prompt itself
does not hold token for token.

A reply often copies its prompt through a transformation that changes every line's tokens, so a lookup in the
prompt breaks at each line end and the copy must be found again a few tokens later:
- **A JSON string.** An agent writes a file through a tool call (`{"name": "Write", "arguments": {"content":
  "..."}}`): the file it read or was shown comes back escaped, each newline as `\\n` and each quote as `\\"`
  (Qwen2.5's tokens `):\\n` become `):\\`, `n`). The view: the prompt's text as a JSON string's contents.
- **Reformatted JSON.** A JSON document in the prompt printed again with indentation: every line's tokens differ
  from the compact text. The views: each document of the prompt at 2 and at 4 spaces, as json.dumps writes it.
Each view is tokenized as a whole (the tokens a model writes are mostly those the tokenizer gives the same text).
The drafter puts them before the prompt's own tokens (ngram_draft.NgramDrafter), so a copy of the prompt as it
stands still finds it first. Built by admission (the output thread) for a runner that drafts by prompt lookup;
an agent's prompt repeats its last one, so its escaped view is tokenized from the earlier tokens on
(prefix_tokens.py), the search for documents goes on from where the two prompts part, and documents' forms stay
tokenized (a 78k-token prompt of code and tool schemas: ~190 ms the first turn, ~20 ms the next, on a 2-core
EPYC). Bounded work: documents are looked for at most MAX_OPENS times and over MAX_SCAN characters, and views stop
at MAX_VIEW_CHARS.
Covered by tests/unit/engine/runner/speculation/test_prompt_views.py.
"""
from __future__ import annotations

import json
import re
from collections import OrderedDict
from typing import NamedTuple

from app.engine.runner.cache.stores import common_prefix_chars

MIN_DOC_CHARS = 48           # a shorter document (`{"a": 1}`) is copied in a few tokens: not worth a view
INDENTS = (2, 4)             # the indentations replies use (json.dumps' `indent`)
MAX_OPENS = 2048             # '{' / '[' tried as a document's start
MAX_SCAN = 1 << 21           # characters the JSON decoder may read in all (a failed try reads up to its error)
MAX_VIEW_CHARS = 1 << 20     # characters of views per prompt (a bigger prompt's views are cut there)
KEPT_FORMS = 64              # documents' forms kept tokenized (an agent's tool schemas come with every turn)

_OPEN = re.compile(r"[\[{]")


def json_string(text: str) -> str | None:
    """`text` as the contents of a JSON string (no quotes around it), or None where that is the text itself."""
    body = json.dumps(text, ensure_ascii=False)[1:-1]
    return body if body != text else None


class Tried(NamedTuple):
    """One '{' or '[' of a text tried as a document's start: how far the decoder read from it (`read_to`, past the
    last character it looked at), where the search went on (`end`: after the document, or the next character), and
    the document's forms (none if it was not one, or too short)."""
    start: int
    read_to: int
    end: int
    forms: tuple[str, ...]


def find_documents(text: str, earlier: list[Tried] | None = None, shared: int = 0) -> list[Tried]:
    """Every try of `text`'s search for documents, in order: the outermost JSON objects and arrays of at least
    MIN_DOC_CHARS, written again at each of INDENTS where that is not how the text writes them. `earlier`: the tries
    of a text whose first `shared` characters are this one's: those that read nothing past them are kept as they
    are (an agent's prompt repeats its last one), the search goes on from there."""
    decoder = json.JSONDecoder()
    tries: list[Tried] = []
    scanned = size = 0
    pos = 0
    for t in earlier or ():
        if t.read_to > shared:
            break
        tries.append(t)
        scanned += t.read_to - t.start
        size += sum(map(len, t.forms))
        pos = t.end
    while len(tries) < MAX_OPENS and scanned < MAX_SCAN and size < MAX_VIEW_CHARS:
        m = _OPEN.search(text, pos)
        if m is None:
            break
        start = m.start()
        try:
            doc, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError as e:
            # it read up to its error, except in a string left open, which it read to the text's end
            read_to = len(text) + 1 if e.msg.startswith("Unterminated string") else e.pos + 1
            tries.append(Tried(start, read_to, start + 1, ()))
            scanned += read_to - start
            pos = start + 1
            continue
        except RecursionError:        # nested deeper than the decoder goes: not a document to reformat
            break
        scanned += end - start
        pos = end
        forms: tuple[str, ...] = ()
        if end - start >= MIN_DOC_CHARS and doc:
            forms = tuple(f for f in (json.dumps(doc, indent=i, ensure_ascii=False) for i in INDENTS)
                          if f != text[start:end])
            size += sum(map(len, forms))
        tries.append(Tried(start, end, end, forms))       # a document ends at its closing bracket
    return tries


class PromptViews:
    """The views of a prompt, as token lists. `tokenize_escaped(text, add_special)`: the model's tokenizer for the
    escaped view (a prefix_tokens.PrefixTokens' `tokenize`: the text repeats from one turn of an agent to the next);
    `tokenize_doc` for a document's forms (each kept tokenized, KEPT_FORMS of them). The last prompt's search for
    documents is kept: the next prompt, which starts like it, searches only what follows the part they share.
    Called from the output thread only."""

    def __init__(self, tokenize_escaped, tokenize_doc):
        self.tokenize_escaped = tokenize_escaped
        self.tokenize_doc = tokenize_doc
        self._last: tuple[str, list[Tried]] = ("", [])
        self._forms: OrderedDict[str, list[int]] = OrderedDict()

    def __call__(self, text: str) -> list[list[int]]:
        if not text:
            return []
        views: list[list[int]] = []
        escaped = json_string(text[-MAX_VIEW_CHARS:])
        if escaped is not None:
            views.append(self.tokenize_escaped(escaped, False))
        last_text, last_tries = self._last
        tries = find_documents(text, last_tries, common_prefix_chars(last_text, text))
        self._last = (text, tries)
        for t in tries:
            for form in t.forms:
                views.append(self._form_tokens(form))
        return [v for v in views if v]

    def _form_tokens(self, form: str) -> list[int]:
        toks = self._forms.get(form)
        if toks is None:
            toks = self._forms[form] = self.tokenize_doc(form, False)
            while len(self._forms) > KEPT_FORMS:
                self._forms.popitem(last=False)
        else:
            self._forms.move_to_end(form)
        return toks

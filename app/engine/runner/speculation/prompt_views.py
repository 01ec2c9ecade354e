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
the escaped view of an agent's prompt, which repeats its last one, is tokenized from the earlier tokens on
(prefix_tokens.py). Bounded work: documents are looked for at most MAX_OPENS times and over MAX_SCAN characters,
and views stop at MAX_VIEW_CHARS.
Covered by tests/unit/engine/runner/speculation/test_prompt_views.py.
"""
from __future__ import annotations

import json
import re

MIN_DOC_CHARS = 48           # a shorter document (`{"a": 1}`) is copied in a few tokens: not worth a view
INDENTS = (2, 4)             # the indentations replies use (json.dumps' `indent`)
MAX_OPENS = 2048             # '{' / '[' tried as a document's start
MAX_SCAN = 1 << 21           # characters the JSON decoder may read in all (a failed try reads up to its error)
MAX_VIEW_CHARS = 1 << 20     # characters of views per prompt (a bigger prompt's views are cut there)

_OPEN = re.compile(r"[\[{]")


def json_string(text: str) -> str | None:
    """`text` as the contents of a JSON string (no quotes around it), or None where that is the text itself."""
    body = json.dumps(text, ensure_ascii=False)[1:-1]
    return body if body != text else None


def json_documents(text: str) -> list[str]:
    """The JSON objects and arrays of `text` (outermost ones, at least MIN_DOC_CHARS long) written again at each of
    INDENTS, where that is not how the text already writes them."""
    decoder = json.JSONDecoder()
    out: list[str] = []
    pos = opens = scanned = size = 0
    while opens < MAX_OPENS and scanned < MAX_SCAN and size < MAX_VIEW_CHARS:
        m = _OPEN.search(text, pos)
        if m is None:
            break
        start = m.start()
        opens += 1
        try:
            doc, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError as e:
            scanned += max(1, e.pos - start)
            pos = start + 1
            continue
        except RecursionError:        # nested deeper than the decoder goes: not a document to reformat
            scanned += MAX_SCAN
            break
        scanned += end - start
        pos = end
        if end - start < MIN_DOC_CHARS or not doc:
            continue
        for indent in INDENTS:
            form = json.dumps(doc, indent=indent, ensure_ascii=False)
            if form != text[start:end]:
                out.append(form)
                size += len(form)
    return out


class PromptViews:
    """The views of a prompt, as token lists. `tokenize(text, add_special)`: the model's tokenizer (a
    prefix_tokens.PrefixTokens' `tokenize` for the escaped view, whose text repeats from one turn of an agent to
    the next); `tokenize_doc` the same for the documents (plain: each is tokenized once)."""

    def __init__(self, tokenize_escaped, tokenize_doc):
        self.tokenize_escaped = tokenize_escaped
        self.tokenize_doc = tokenize_doc

    def __call__(self, text: str) -> list[list[int]]:
        if not text:
            return []
        views: list[list[int]] = []
        escaped = json_string(text[-MAX_VIEW_CHARS:])
        if escaped is not None:
            views.append(self.tokenize_escaped(escaped, False))
        for doc in json_documents(text):
            views.append(self.tokenize_doc(doc, False))
        return [v for v in views if v]

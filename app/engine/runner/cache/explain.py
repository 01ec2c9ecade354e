"""Why a prompt was (not) taken from the cache, and where its tokens went: the runner's half of the cache-miss
explainer and the prompt anatomy (docs/prompt-cache.md, "Explaining a request").

Admission (output thread) calls `PromptHistory.admit` with the rendered prompt text, its tokens and the request's
messages and tools. That
- cuts the prompt into parts (`prompt_parts`): the system message, each tool's schema, each message, and the
  template's own text between them, as token ranges that cover the prompt exactly (their tokens add up to it);
- compares it with the last few prompts this runner admitted (`KEPT`; one runner = one model): the one sharing the
  longest token prefix is "the previous prompt". Where the new prompt stops matching it before its end, the
  divergence is described: the token position, the part (role and index of the message, or the tool) and the
  characters either side in both versions, the changed run found by aligning the two texts after it, and how many
  of the previous prompt's tokens reappear after the change (what a cache that moves chunks could have kept:
  chunk_reuse.reuse_chunks over the old tokens).

When the request ends (`finish`, output thread) the prompt cache's facts are added: how many tokens were reused and
from where (the slot, host RAM, another running sequence, the disk, moved by cache reuse), what each source offered
(its longest common prefix), and the verdict:
- "new": no earlier prompt shares anything worth naming;
- "tail": everything the previous prompt shares was reused: only the new tail was computed;
- "evicted": the previous prompt shares more than the cache still held (its slot went to another conversation,
  the host cache or the disk no longer had it, or `cache_prompt` was off);
- "changed": the prompt changed inside the previous one (a date, a nonce, a moved reminder, a reordered tool), and
  tokens after the change were the same: they were computed again (unless cache reuse moved them);
- "branched": the prompt leaves the previous one and does not come back to it (another conversation on the same
  system prompt, an edited message); what follows is new.
`recomputed_beyond_tail` (the flag the Server window marks) is the tokens computed beyond what a perfect cache
would have computed (the prompt minus the shared prefix minus the tokens repeated after a change).
Covered by tests/unit/engine/runner/cache/test_explain.py and tests/integration/service/test_request_explain.py."""
from __future__ import annotations

import bisect
import difflib
import json
from collections import deque
from dataclasses import dataclass

import numpy as np

from app.engine.runner.cache.chunk_reuse import _window_hashes, reuse_chunks
from app.engine.runner.cache.stores import common_prefix, common_prefix_chars

KEPT = 8                # prompts remembered per runner (an agent's turns, its side requests, another client)
MIN_SHARED = 16         # an earlier prompt sharing fewer tokens is not "the previous prompt"
END_SLACK = 8           # tokens at the end of the previous prompt that may differ in the next (a generation prompt
                        # the template renders otherwise in the history): not a divergence
SIDE_CHARS = 48         # characters shown either side of a divergence
ALIGN_CHARS = 600       # characters after a divergence aligned to find where the two versions agree again
MIN_RESYNC = 8          # ... a run of this many equal characters
REPEAT_CHUNK = 32       # tokens of the previous prompt that must reappear together after a change to count
REPEAT_GAP = 4096       # new tokens stepped over looking for them (bounds the walk's cost)
PREVIEW = 60            # characters of a message shown as its label


@dataclass
class Part:
    char: int           # where it starts in the rendered text
    kind: str           # "system" | "tool" | "message" | "template"
    label: str
    role: str = ""
    index: int = -1     # the message's index in the request's messages (tools: the tool's index)
    turn: int = 0       # messages: user turns so far (the system message and tools: 0)
    token: int = 0      # where it starts in the prompt's tokens

    def as_dict(self, tokens: int) -> dict:
        d = {"kind": self.kind, "label": self.label, "token": self.token, "tokens": tokens}
        if self.kind in ("message", "system"):
            d.update(role=self.role, index=self.index, turn=self.turn)
        elif self.kind == "tool":
            d["index"] = self.index
        return d


def _preview(text: str) -> str:
    text = " ".join(str(text).split())
    return text[:PREVIEW] + ("…" if len(text) > PREVIEW else "")


def _content_needles(m: dict) -> list[str]:
    """Strings to look for where message `m` is in the rendered text, most specific first."""
    out = []
    content = m.get("content")
    if isinstance(content, str) and content.strip():
        out.append(content)
        s = content.strip()
        out.append(s[:64])
        line = s.split("\n", 1)[0][:64]
        if line and line != s[:64]:
            out.append(line)
    for call in m.get("tool_calls") or ():
        fn = call.get("function", call) if isinstance(call, dict) else {}
        name = fn.get("name") if isinstance(fn, dict) else None
        if isinstance(name, str) and name:
            out += [f'"{name}"', name]
            break
    return out


def _tool_needles(t: dict) -> list[str]:
    fn = t.get("function", t) if isinstance(t, dict) else {}
    name = fn.get("name", "") if isinstance(fn, dict) else ""
    out = [json.dumps(t, ensure_ascii=False), json.dumps(fn, ensure_ascii=False)]
    if name:
        out += [f'"name": "{name}"', f'"{name}"', name]
    return out


def called_tools(messages) -> list[str]:
    """The names of the tools the assistant messages called, sorted."""
    names = set()
    for m in messages or ():
        for call in (m.get("tool_calls") or ()) if isinstance(m, dict) else ():
            fn = call.get("function", call) if isinstance(call, dict) else {}
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                names.add(fn["name"])
    return sorted(names)


def _tool_name(t: dict, i: int) -> str:
    fn = t.get("function", t) if isinstance(t, dict) else {}
    name = fn.get("name") if isinstance(fn, dict) else None
    return str(name) if name else f"tool {i}"


def _find(text: str, needles: list[str], lo: int) -> tuple[int, int]:
    """(start, end) of the first needle found in text[lo:], or (-1, -1)."""
    for n in needles:
        if not n:
            continue
        p = text.find(n, lo)
        if p >= 0:
            return p, p + len(n)
    return -1, -1


def _header_start(text: str, role: str, lo: int, at: int) -> int:
    """Where the turn holding the content at `at` begins: the start of the line naming its role, after `lo`."""
    r = text.rfind(role, lo, at) if role else -1
    if r < 0:
        return at
    nl = text.rfind("\n", lo, r)
    return nl + 1 if nl >= 0 else lo


def prompt_parts(text: str, messages: list[dict] | None, tools: list[dict] | None) -> list[Part]:
    """The rendered prompt cut into parts by character (sorted, the first at 0): each message where its content is
    found (in order, from the start of its turn's header line), each tool where its schema is, and the template's
    text after the last tool. A message not found stays in the part before it."""
    anchors: list[Part] = []
    pos, turn = 0, 0
    for i, m in enumerate(messages or ()):
        if not isinstance(m, dict):
            continue
        role = str(m.get("role") or "")
        if role == "user":
            turn += 1
        start, end = _find(text, _content_needles(m), pos)
        if start < 0:
            continue
        head = _header_start(text, role, pos, start)
        kind = "system" if role in ("system", "developer") and turn == 0 else "message"
        label = f"{role} #{i}: {_preview(m.get('content') or '')}" if m.get("content") else f"{role} #{i}"
        anchors.append(Part(head, kind, label, role, i, turn))
        pos = end
    pos, last_end = 0, -1
    for i, t in enumerate(tools or ()):
        start, end = _find(text, _tool_needles(t), pos)
        if start < 0:
            continue
        nl = text.rfind("\n", pos, start)
        head = nl + 1 if nl >= 0 and start - nl < 200 and text[nl + 1:start].strip() in ("", "{", "- ") else start
        anchors.append(Part(head, "tool", _tool_name(t, i), index=i))
        pos, last_end = end, end
    if last_end > 0:
        anchors.append(Part(last_end, "template", "template text after the tools"))
    anchors.sort(key=lambda p: p.char)
    out: list[Part] = []
    for a in anchors:                       # one part per start (a later anchor at the same char wins)
        if out and out[-1].char == a.char:
            out[-1] = a
        else:
            out.append(a)
    if not out:
        out = [Part(0, "template", "prompt")]
    if out[0].char > 0:
        if out[0].kind in ("system", "message"):
            out[0].char = 0                 # the first turn's header belongs to it
        else:
            out.insert(0, Part(0, "template", "template text"))
    return out


def token_char_starts(tokens, piece, text: str) -> np.ndarray:
    """Where each token starts in `text` (by characters), from its pieces' bytes (special tokens as text)."""
    lens = np.fromiter((len(piece(int(t))) for t in tokens), dtype=np.int64, count=len(tokens))
    byte_starts = np.concatenate([[0], np.cumsum(lens)[:-1]]) if len(lens) else np.zeros(0, dtype=np.int64)
    data = text.encode("utf-8")
    if not data.isascii():                 # bytes -> characters: count the characters' first bytes before each
        lead = np.frombuffer(data, dtype=np.uint8)
        chars_before = np.concatenate([[0], np.cumsum((lead & 0xC0) != 0x80)])
        byte_starts = chars_before[np.minimum(byte_starts, len(data))]
    return byte_starts


@dataclass
class _Prompt:
    rid: str
    tokens: np.ndarray
    text: str
    parts: list[Part]


class PromptHistory:
    """The last KEPT prompts of this runner and the per-request reports (output thread only)."""

    def __init__(self, piece, kept: int = KEPT):
        self.piece = piece                  # token -> bytes (special=True): text.Vocab.piece
        self.kept: deque[_Prompt] = deque(maxlen=kept)

    def admit(self, rid: str, text: str, tokens, messages=None, tools=None) -> dict:
        """The prompt's anatomy and how it compares with the earlier prompts (the part of the report known before
        it is placed); remembers it."""
        toks = np.asarray(tokens, dtype=np.int32)
        n = len(toks)
        parts = prompt_parts(text, messages, tools) if text else [Part(0, "template", "prompt")]
        if text and n:
            starts = token_char_starts(toks, self._piece, text)
            for p in parts:
                p.token = int(np.searchsorted(starts, p.char, "left"))
            parts[0].token = 0
        bounds = [p.token for p in parts] + [n]
        anatomy = [p.as_dict(max(0, bounds[i + 1] - p.token)) for i, p in enumerate(parts)
                   if bounds[i + 1] > p.token or i == 0]
        report: dict = {"request": rid, "prompt_tokens": n, "anatomy": anatomy}
        called = called_tools(messages)
        # the tools the conversation so far called (an offered tool never called only costs its schema), named also
        # for a prompt sent without its tools (the second try of a reply that repeated the last round's calls)
        if tools or called:
            report["tools_called"] = called
        prev, shared = self._most_similar(toks)
        if prev is not None:
            report["previous"] = {"request": prev.rid, "tokens": len(prev.tokens), "shared": shared}
            if shared < len(prev.tokens) - END_SLACK and shared < n - 1:
                report["divergence"] = self._divergence(prev, toks, text, parts, shared)
        self.kept.append(_Prompt(rid, toks, text, parts))
        return report

    def _piece(self, t: int) -> bytes:
        return self.piece(t, True) if t >= 0 else b""

    def _most_similar(self, toks) -> tuple[_Prompt | None, int]:
        """The earlier prompt to compare with: one this prompt continues (it shares all of it but END_SLACK
        tokens: the conversation's previous turn) before one it merely shares more with (another conversation
        that went a few tokens further alike); among those the longest shared prefix; ties to the most recent.
        When the longest shared prefix is short (a change in the first tokens: a nonce or a date at the very
        start), the one whose text reappears most in this prompt after it, if any does."""
        best, key_best, n_best = None, (False, 0), 0
        shared = []
        for p in self.kept:                 # oldest first: a tie goes to the most recent
            n = common_prefix(p.tokens, toks)
            shared.append(n)
            key = (n >= len(p.tokens) - END_SLACK, n)
            if key >= key_best:
                best, key_best, n_best = p, key, n
        if best is None or n_best >= MIN_SHARED:
            return best, n_best
        best, score_best = None, REPEAT_CHUNK
        for p, n in zip(self.kept, shared):
            score = n + _overlap(p.tokens, toks)
            if score >= score_best:
                best, score_best, n_best = p, score, n
        return best, (n_best if best is not None else 0)

    def _divergence(self, prev: _Prompt, toks, text: str, parts: list[Part], shared: int) -> dict:
        old_text = prev.text
        if text and old_text:
            c = common_prefix_chars(old_text, text)
        else:                               # raw prompts without text: the tokens' own pieces
            c = 0
            text = b"".join(self._piece(int(t)) for t in toks[:shared + 64]).decode("utf-8", "replace")
            old_text = b"".join(self._piece(int(t)) for t in prev.tokens[:shared + 64]).decode("utf-8", "replace")
            c = common_prefix_chars(old_text, text)
        k_old, k_new = _changed_run(old_text[c:c + ALIGN_CHARS], text[c:c + ALIGN_CHARS])
        i = max(0, bisect.bisect_right([p.char for p in parts], c) - 1)
        part = parts[i] if parts else Part(0, "template", "prompt")
        repeated = reuse_chunks(prev.tokens, toks, shared, REPEAT_CHUNK, len(toks) - 1, REPEAT_GAP)
        where = part.as_dict(0) | {"offset": int(c - part.char)}
        where.pop("tokens", None)
        d = {"token": int(shared), "char": int(c), "part": where,
             "before": text[max(0, c - SIDE_CHARS):c],
             "new": text[c:c + k_new], "old": old_text[c:c + k_old],
             "after_new": text[c + k_new:c + k_new + SIDE_CHARS],
             "after_old": old_text[c + k_old:c + k_old + SIDE_CHARS],
             "resynced": k_new < ALIGN_CHARS and k_old < ALIGN_CHARS,
             "repeated_after": int(sum(ch.n for ch in repeated))}
        return d


def _overlap(old, new, k: int = 16) -> int:
    """About how many tokens of `new` also occur in `old`: its k-token windows at every k-th position found among
    all of old's windows (hashes), times k. Vectorised: a few ms for 30k-token prompts."""
    if len(old) < k or len(new) < k:
        return 0
    have = _window_hashes(np.asarray(old, dtype=np.int32), k)
    want = _window_hashes(np.asarray(new, dtype=np.int32), k)[::k]
    return int(np.isin(want, have).sum()) * k


def _changed_run(old: str, new: str) -> tuple[int, int]:
    """How many characters at the start of `old` and `new` differ before the two agree again for MIN_RESYNC
    characters (the whole windows when they never do; at most SIDE_CHARS of a run is worth showing)."""
    sm = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for a, b, size in sm.get_matching_blocks():
        if size >= MIN_RESYNC:
            return a, b
    return min(len(old), SIDE_CHARS), min(len(new), SIDE_CHARS)


SOURCES = ("slot", "host", "sequence", "disk")


def finish(report: dict | None, *, prompt_tokens: int, cached: int, moved: int, source: str,
           candidates: dict | None, cache_prompt: bool = True) -> dict:
    """The whole report once the request was placed and ran: what was reused and from where, each part's cached
    tokens, the verdict and the tokens computed beyond a perfect cache's."""
    r = dict(report or {"prompt_tokens": prompt_tokens})
    r.update(prompt_tokens=prompt_tokens, cached=int(cached), moved=int(moved),
             source=source if cached > 0 else "none",
             candidates={k: int(v) for k, v in (candidates or {}).items() if v})
    anatomy = r.get("anatomy") or []
    for p in anatomy:
        p["cached"] = max(0, min(p["token"] + p["tokens"], cached) - p["token"])
    prev, div = r.get("previous"), r.get("divergence")
    computed = prompt_tokens - cached
    shared = prev["shared"] if prev else 0
    ideal_keep = max(cached, min(shared + (div or {}).get("repeated_after", 0), prompt_tokens - 1))
    if not cache_prompt:
        verdict = "off"
    elif prev is None:
        verdict = "new"
    elif div is None:
        verdict = "tail" if cached >= min(shared, prompt_tokens - 1) - END_SLACK else "evicted"
    elif cached < min(shared, prompt_tokens - 1) - END_SLACK:
        verdict = "evicted"
    elif div.get("repeated_after", 0) > 0:
        verdict = "changed"
    else:
        verdict = "branched"
    r["verdict"] = verdict
    r["new_tail"] = max(0, prompt_tokens - ideal_keep)
    r["recomputed_beyond_tail"] = max(0, computed - r["new_tail"]) if cache_prompt else 0
    return r

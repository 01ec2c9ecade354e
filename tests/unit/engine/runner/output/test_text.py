"""The output thread's text (runner/output/text.py): stop strings held across pieces and cut, the byte check that
agrees with them, UTF-8 never split by the detokenizer, logprobs normalised from raw logits (SmolLM2's)."""
from __future__ import annotations

import numpy as np
import pytest
from llama_cpp import llama_cpp as L

from app.engine.runner.embedding.embeddings import tokenize
from app.engine.runner.output.text import Detokenizer, StopBytes, StopMatcher, log_softmax, logprobs_from_logits
from engine_util import decode_prompt as _decode_prompt


def stream(matcher, pieces):
    out = []
    for p in pieces:
        safe, stopped = matcher.push(p)
        out.append(safe)
        if stopped:
            return out, True
    out.append(matcher.flush())
    return out, False


def test_stop_string_across_pieces_is_held_then_cut():
    out, stopped = stream(StopMatcher(["o Wo"]), ["Hel", "lo", " W", "orld"])
    assert stopped and "".join(out) == "Hell"
    assert out == ["Hel", "l", "", ""]                 # "o", then "o W" held back, never streamed


def test_held_text_is_released_when_it_stops_matching():
    out, stopped = stream(StopMatcher(["</end>"]), ["a</e", "nd", "x>b"])
    assert not stopped and "".join(out) == "a</endx>b"
    assert out[0] == "a"


def test_earliest_of_several_stops_wins_and_flush_returns_the_tail():
    out, stopped = stream(StopMatcher(["XYZ", "B"]), ["aaXY", "ZB"])
    assert stopped and "".join(out) == "aa"
    m = StopMatcher(["STOP"])
    assert m.push("abcST") == ("abc", False)
    assert m.flush() == "ST"


def test_stop_bytes_fire_on_the_same_piece_as_the_text_matcher():
    # the context thread's byte check must agree with the output thread's text check, including characters
    # split across pieces and stop strings that span pieces
    import codecs
    import random

    rng = random.Random(1234)
    alphabet = ["a", "b", " ", "é", "中", "😀", "\n"]
    checked = 0
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30)))
        data = text.encode()
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 12)))) if len(data) > 1 else []
        pieces = [data[i:j] for i, j in zip([0] + cuts, cuts + [len(data)])]
        i = rng.randrange(len(text))
        stops = [text[i:i + rng.randint(1, 4)], rng.choice(["zz", "😀a", "中 "])]
        dec, matcher, sb = codecs.getincrementaldecoder("utf-8")("replace"), StopMatcher(stops), StopBytes(stops)
        at_text = at_bytes = None
        for k, piece in enumerate(pieces):
            if at_text is None and matcher.push(dec.decode(piece))[1]:
                at_text = k
            if at_bytes is None and sb.push(piece):
                at_bytes = k
        assert at_text is not None and at_bytes == at_text, (pieces, stops)
        checked += 1
    assert checked == 400
    assert StopBytes([]).push(b"anything") is False and StopBytes([""]).push(b"x") is False


def test_detokenizer_never_splits_a_character(llama):
    _, _, vocab, v = llama
    text = "naïve café 😀 世界 ok"
    toks = tokenize(vocab, text, add_special=False)
    d = Detokenizer(v)
    chunks = [d.push(t) for t in toks] + [d.flush()]
    assert "".join(chunks) == text
    assert not any("\ufffd" in c for c in chunks)
    assert len(toks) > len(text.split())             # multi-byte characters really were split across tokens


def test_logprobs_from_raw_logits_are_normalised(llama):
    _, ctx, vocab, v = llama
    mem = L.llama_get_memory(ctx)
    L.llama_memory_clear(mem, True)
    _, row = _decode_prompt(ctx, vocab, "The capital of France is")
    n_vocab = v.n_vocab
    logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, row), shape=(n_vocab,)).copy()
    lp = log_softmax(logits)
    m = lp.max()
    assert abs(m + np.log(np.exp(lp - m).sum())) < 1e-9        # logsumexp over the vocabulary = 0
    best = int(np.argmax(logits))
    tl = logprobs_from_logits(logits, best, 20, v)
    assert tl.logprob == pytest.approx(lp[best]) and tl.token == v.text(best)
    assert [t[1] for t in tl.top] == sorted((t[1] for t in tl.top), reverse=True) and len(tl.top) == 20
    assert tl.top[0][1] == pytest.approx(tl.logprob)
    assert logprobs_from_logits(logits, best, 0, v).top == []

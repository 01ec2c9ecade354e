"""Prompt lookup (runner/speculation/ngram_draft.py): where a guess comes from in a long sequence, on token boundaries."""
from app.engine.runner.speculation.ngram_draft import N_MAX, NgramDrafter


def test_a_long_prompt_is_searched_whole_from_the_first_step():
    # a quoted passage near the start of a 30k-token prompt: the reply that starts quoting it is guessed at
    # once (a lookup table built over the first steps would not reach position 100 of the prompt in time)
    passage = list(range(1000, 1040))
    filler = [5000 + (i * 7919) % 40000 for i in range(30000)]
    drafter = NgramDrafter(filler[:100] + passage + filler[100:] + passage[:N_MAX])
    assert drafter.lookup(8) == passage[N_MAX:N_MAX + 8]


def test_a_match_across_token_boundaries_is_no_match():
    # 256 then 1 packs as 00 01 00 00 | 01 00 00 00; the bytes of tokens (1, 1, 1) never start mid-token
    drafter = NgramDrafter([256, 1, 0, 0, 7, 1, 1, 1, 9, 2, 1, 1, 1])
    assert drafter.lookup(4) == [9, 2, 1, 1]
    unaligned = NgramDrafter([3, 256, 256, 256, 256, 9, 1, 1, 1])
    assert unaligned.lookup(4) == []


def test_a_reply_that_copies_goes_on_from_where_it_copies():
    line = [10, 11, 12, 13]
    module = line + [20, 21] + line + [30, 31, 32, 33, 34]
    drafter = NgramDrafter(module + [99] + line + [30])
    assert drafter.lookup(3) == [31, 32, 33]        # the most recent occurrence of the tail
    for tok in (31, 32):
        drafter.push(tok)
    assert drafter.lookup(2) == [33, 34]            # the copy goes on from the place it was copying


def test_the_index_finds_what_a_scan_of_the_sequence_finds():
    """The 3-token window index against a plain scan: for every n-gram size, the latest place right after an
    earlier occurrence of the tail (one token at least after it), as the sequence grows token by token; a small
    vocabulary makes occurrences of every size frequent, prompt and reply windows both."""
    import random

    from app.engine.runner.speculation.ngram_draft import N_MIN

    def scan(toks, n):
        end = len(toks)
        return next((e for e in range(end - 1, n - 1, -1) if toks[e - n:e] == toks[end - n:end]), -1)
    rng = random.Random(7)
    for vocab, n_prompt in ((3, 40), (5, 300), (40, 2000)):
        toks = [rng.randrange(vocab) for _ in range(n_prompt)]
        drafter = NgramDrafter(toks)
        for step in range(120):
            end = len(drafter.tokens)
            found = drafter._latest_by_size(end)
            for n in range(N_MIN, N_MAX + 1):
                assert found.get(n, -1) == scan(drafter.tokens, n), (vocab, step, n)
            drafter.push(rng.randrange(vocab) if step % 3 else drafter.tokens[rng.randrange(end)])
    images = NgramDrafter([5, 6, 7, -1, -1, 5, 6, 7, 8, -1, 5, 6, 7])    # pseudo-tokens: windows holding them match nothing
    assert images.lookup(2) == [8]

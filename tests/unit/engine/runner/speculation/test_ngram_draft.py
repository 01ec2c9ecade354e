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


def feed(drafter: NgramDrafter, tokens, limit: int = 8) -> list[list[int]]:
    """Push `tokens` one by one, looking up after each as the proposer does every step: the guesses."""
    guesses = []
    for tok in tokens:
        drafter.push(tok)
        guesses.append(drafter.lookup(limit))
    return guesses


def test_a_renamed_name_is_learned_and_copied_renamed():
    """A module copied with one name renamed (token 50 -> 70, before 2): once the copy resumes after the first
    renamed place, later copies through the old name draft the new one, and go on copying after it."""
    head, body, call = [11, 12, 13, 14], [2, 3, 4, 5, 6, 7], [20, 21, 22, 23]
    module = head + [50] + body + call + [50] + body + [30, 31, 32, 33]
    drafter = NgramDrafter(module + head)
    assert drafter.lookup(3) == [50, 2, 3]                         # the old name: not known to be renamed yet
    feed(drafter, [70] + body + call)                              # the reply renames it, copies on
    assert drafter.subs == {((50,), 2): (70,)}
    assert drafter.lookup(6) == [70] + body[:5]                    # the second place: drafted renamed
    for tok in [70] + body[:5]:
        drafter.push(tok)
    assert drafter.lookup(4) == [body[5], 30, 31, 32]              # and the copy goes on past it
    assert drafter.score.at >= 6                                   # one run: the renamed tokens came true


def test_a_substitution_applies_only_before_the_same_token():
    """A name renamed where it is called (50 before 2) is not renamed where the same token stands before
    something else (50 before 9): text that only shares a word with the edit is copied as it was."""
    module = [11, 12, 13, 50, 2, 3, 4, 5, 14, 15, 16, 50, 9, 8, 7, 6]
    drafter = NgramDrafter(module + [11, 12, 13])
    assert drafter.lookup(2) == [50, 2]
    feed(drafter, [70, 2, 3, 4, 5, 14, 15, 16])
    assert drafter.subs == {((50,), 2): (70,)}
    assert drafter.lookup(3) == [50, 9, 8]


def test_a_reply_that_leaves_the_copy_for_new_text_learns_nothing():
    module = list(range(100, 130))
    drafter = NgramDrafter(module + module[:5])
    assert drafter.lookup(2) == module[5:7]
    feed(drafter, module[5:10] + list(range(200, 230)))            # copies, then writes something else
    assert drafter.subs == {}
    assert drafter.lookup(4) == []


def test_a_substitution_the_reply_does_not_repeat_is_forgotten():
    """Renamed at the first place, kept at the second: the drafted new name missed, so later copies draft the
    old one again."""
    head, body, call = [11, 12, 13, 14], [2, 3, 4, 5, 6, 7], [20, 21, 22, 23]
    module = head + [50] + body + call + [50] + body + call + [50] + body
    drafter = NgramDrafter(module + head)
    assert drafter.lookup(3) == [50, 2, 3]
    feed(drafter, [70] + body + call)
    assert drafter.lookup(2) == [70, 2]
    feed(drafter, [50] + body)                                     # the old name kept here
    assert drafter.subs == {}
    feed(drafter, call)
    assert drafter.lookup(2) == [50, 2]


def test_a_draft_is_at_most_twice_the_match_it_extends():
    """A sequence whose fresh 3-token matches have always gone on for long (its odds high at every match length),
    on a machine where rows are nearly free, meets another fresh match: it drafts at most 6 tokens there, and the
    whole guess once the copy has gone on."""
    from types import SimpleNamespace

    from app.engine.runner.speculation.draft_policy import StepCosts
    from app.engine.runner.speculation.ngram_draft import NgramProposer
    from app.engine.runner.speculation.proposer import DraftAsk
    costs = StepCosts()
    for _ in range(5):
        for rows in (2, 4, 8, 16, 24, 33):
            costs.record(1, 0.05)
            costs.record(rows, 0.05 * (1 + 0.01 * rows))          # rows nearly free: long drafts pay
    text = list(range(1000, 1400))
    seq = SimpleNamespace(id="s", drafter=NgramDrafter([1, 2] + text + [3]), views=[], n_gen=0)
    proposer = NgramProposer(costs)

    def emit(tokens):
        for tok in tokens:
            proposer.emitted(seq, [tok])
            proposer.propose([DraftAsk(seq, 32)], 1, 512)
    for k in range(8):                                              # fresh matches that each went on for 30 tokens
        emit([5000 + k] + text[40 * k:40 * k + 33])
    emit([6000] + text[330:333])                                    # and another one
    assert len(proposer.propose([DraftAsk(seq, 32)], 1, 512).get("s", [])) <= 6
    emit(text[333:360])
    assert len(proposer.propose([DraftAsk(seq, 32)], 1, 512)["s"]) == 32      # a copy going on: the whole guess

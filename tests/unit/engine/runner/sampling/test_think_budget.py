"""The thinking budget (Anthropic `thinking.budget_tokens`, runner/sampling/think_budget.py) on token streams: when it
ends thinking, with what, and that a reply which is not thinking is never touched."""
from __future__ import annotations

from app.engine.runner.sampling.think_budget import ThinkBudget, markers

CLOSE = [901, 902]                      # stand-ins for the close text's token ids


def run(budget: ThinkBudget, pieces: list[str], steps: int) -> list:
    """Feed sampled pieces (by index); forced tokens take a step when due. -> what the reply got, in order."""
    out, it = [], iter(pieces)
    for _ in range(steps):
        tok = budget.next_forced()
        if tok is None:
            try:
                tok = next(it)
            except StopIteration:
                break
        budget.seen(tok)
        out.append(tok)
    return out


def piece(tok, special=True):
    return (tok if isinstance(tok, str) else f"<{tok}>").encode()


def test_open_in_prompt_closed_when_spent():
    b = ThinkBudget(3, "hermes", CLOSE, piece, open_in_prompt=True)
    assert run(b, ["a", "b", "c", "d", "e"], 7) == ["a", "b", "c", 901, 902, "d", "e"]


def test_opened_by_the_reply():
    b = ThinkBudget(2, "hermes", CLOSE, piece, open_in_prompt=False)
    assert run(b, ["\n", "<think>", "x", "y", "z"], 8) == ["\n", "<think>", "x", 901, 902, "y", "z"]


def test_closed_by_the_model_in_time():
    b = ThinkBudget(3, "hermes", CLOSE, piece, open_in_prompt=True)
    assert run(b, ["a", "</think>", "c", "d", "e"], 5) == ["a", "</think>", "c", "d", "e"]


def test_a_reply_that_does_not_think_is_untouched():
    b = ThinkBudget(1, "hermes", CLOSE, piece, open_in_prompt=False)
    assert run(b, ["Hello", "there", "friend"], 5) == ["Hello", "there", "friend"]


def test_family_markers():
    assert markers("mistral") == ("[THINK]", "[/THINK]", "[/THINK]")
    assert markers("command_r")[1] == "<|END_THINKING|>"
    opener, ends, written = markers("harmony")
    assert opener == "<|channel|>analysis" and ends == "<|end|>" and written.endswith("<|channel|>final<|message|>")
    b = ThinkBudget(2, "harmony", CLOSE, piece, open_in_prompt=False)
    assert run(b, ["<|channel|>", "analysis", "<|message|>", "t", "u"], 6) == [
        "<|channel|>", "analysis", "<|message|>", 901, 902, "t"]


def test_effort_levels_are_a_share_of_the_room_with_floors_and_leave_the_answer_room():
    from app.engine.runner.sampling.think_budget import EFFORTS, effort_budget
    assert EFFORTS == ("minimal", "low", "medium", "high")
    # a large room: the share (1/16, 1/8, 1/4, 1/2)
    assert [effort_budget(e, 64000) for e in EFFORTS] == [4000, 8000, 16000, 32000]
    # a middling room: the floors (64, 256, 1024, 4096), capped where they would leave the answer < 1/4
    assert [effort_budget(e, 2000) for e in EFFORTS] == [125, 256, 1024, 1499]
    # a small max_tokens: every level is the cap, so an answer always follows
    assert {effort_budget(e, 200) for e in ("low", "medium", "high")} == {149}
    assert effort_budget("minimal", 200) == 64
    assert effort_budget("high", 0) == 0 and effort_budget("low", 1) == 0
    for room in (1, 10, 100, 1000, 10 ** 6):
        for e in EFFORTS:
            assert 0 <= effort_budget(e, room) < room, (e, room)


def test_a_zero_budget_ends_thinking_before_any_of_it():
    b = ThinkBudget(0, "hermes", CLOSE, piece, open_in_prompt=True)
    assert run(b, ["a", "b"], 4) == [901, 902, "a", "b"]
    b = ThinkBudget(0, "hermes", CLOSE, piece, open_in_prompt=False)
    assert run(b, ["<think>", "a", "b"], 5) == ["<think>", 901, 902, "a", "b"]

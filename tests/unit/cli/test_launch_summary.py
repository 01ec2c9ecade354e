"""`strata launch`'s summary after the agent exits (app/cli/launch.tools_summary): the tools the session offered and
never called, from its requests' cache detail as GET /api/requests/{id} gives it (tools_called, the anatomy's tool
parts, the measured prefill rate). The end-to-end check is in tests/integration/cli/test_cli_launch.py."""
from __future__ import annotations

from app.cli.launch import tools_summary


def _detail(tools: dict[str, int], called: list[str], rate: float | None = 2000.0) -> dict:
    anatomy = [{"kind": "system", "label": "system", "tokens": 500}]
    anatomy += [{"kind": "tool", "label": n, "tokens": t} for n, t in tools.items()]
    return {"cache": {"anatomy": anatomy, "tools_called": called, "prefill_rate": rate}}


def test_a_tool_called_in_any_request_is_not_unused_and_the_costliest_come_first():
    text = tools_summary([_detail({"Read": 300, "Bash": 900, "Web": 1200}, []),
                          _detail({"Read": 300, "Bash": 900, "Web": 1200}, ["Read"]),
                          {"cache": {"anatomy": [{"kind": "system", "label": "system", "tokens": 40}]}},  # no tools
                          _detail({"Task": 800}, [])])                       # a subagent's request
    assert text is not None
    head, unused = text.splitlines()
    assert head == "this session sent 3 requests offering 4 tools; called: Read"
    assert unused == ("never called: 3 tools whose schemas are 2,900 tokens of every prompt that offers them "
                      "(about 1.4 s to read at the measured 2,000 tokens/s): Web (1,200), Bash (900), Task (800)")


def test_a_call_named_by_a_request_sent_without_its_tools_counts():
    # the session's last request was asked again without its tools (a reply that repeated the last round's
    # calls): its prompt offers no tools, but its conversation called Read
    retried = {"cache": {"anatomy": [{"kind": "system", "label": "system", "tokens": 40}], "tools_called": ["Read"]}}
    text = tools_summary([_detail({"Read": 300, "Bash": 900}, []), retried])
    assert text is not None
    head, unused = text.splitlines()
    assert head == "this session sent 1 request offering 2 tools; called: Read"
    assert unused.endswith(": Bash (900)")


def test_without_a_measured_rate_only_tokens_and_without_tools_nothing():
    text = tools_summary([_detail({"Read": 30, "Edit": 20}, ["Read"], rate=None)])
    assert text is not None
    assert text.endswith("1 tool whose schemas are 20 tokens of every prompt that offers them: Edit (20)")
    assert tools_summary([_detail({"Read": 30}, ["Read"])]) == ("this session sent 1 request offering 1 tool; "
                                                                 "called: Read")
    assert tools_summary([{"cache": {}}, {}]) is None

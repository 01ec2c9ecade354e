"""`strata launch`'s note when other requests are reading long prompts on a CPU-only model (app/cli/launch.busy_note),
from /api/ps and /api/requests records as the service gives them."""
from __future__ import annotations

from app.cli.launch import LONG_READ_S, busy_note


def _req(model: str, phase: str, seconds: float, state: str = "running") -> dict:
    """A record as /api/requests lists it: reading its prompt ("prefill": no output yet, the time since it got its
    slot is the timeline's last part) or writing ("decode": its first output came)."""
    phases = [["prepare", 0.01], ["load", 0.0], ["queued", 2.0]]
    if phase == "prefill":
        return {"model": model, "state": state, "ttft": None, "phases": phases + [["finish", seconds]]}
    return {"model": model, "state": state, "ttft": 12.0, "phases": phases + [["prefill", 10.0], ["finish", seconds]]}


def test_a_long_prompt_being_read_on_a_cpu_only_model_is_noted():
    ps = [{"name": "coder:latest", "size_vram": 0}]
    note = busy_note("coder", ps, [_req("coder:latest", "prefill", 95.0), _req("coder:latest", "decode", 300.0)])
    assert note is not None and "1 other request on coder has been reading its prompt for up to 95 s" in note
    two = busy_note("coder:latest", ps, [_req("coder:latest", "prefill", 40.0), _req("coder:latest", "prefill", 70.0)])
    assert two is not None and "2 other requests" in two and "up to 70 s" in two


def test_nothing_is_noted_otherwise():
    ps = [{"name": "coder:latest", "size_vram": 0}]
    assert busy_note("coder", ps, []) is None
    assert busy_note("coder", ps, [_req("coder:latest", "prefill", LONG_READ_S - 1)]) is None   # a short prompt
    assert busy_note("coder", ps, [_req("coder:latest", "decode", 500.0)]) is None               # writing
    assert busy_note("coder", ps, [_req("coder:latest", "prefill", 500.0, state="done")]) is None
    queued = {"model": "coder:latest", "state": "running", "ttft": None, "phases": [["answer", 500.0]]}
    assert busy_note("coder", ps, [queued]) is None                                              # no slot yet
    assert busy_note("coder", ps, [_req("other:latest", "prefill", 500.0)]) is None              # another model
    gpu = [{"name": "coder:latest", "size_vram": 1 << 30}]
    assert busy_note("coder", gpu, [_req("coder:latest", "prefill", 500.0)]) is None             # a GPU reads fast
    assert busy_note("coder", [], [_req("coder:latest", "prefill", 500.0)]) is None              # not loaded

"""app.ggml.child_json: the one helper that runs `python -m X` in a child and reads the JSON line it prints
(device probe, dry run, verify). Real child processes of stdlib modules stand in for the probes."""
import pytest

from app.ggml.child_json import ChildError, run_json_child


def test_reads_the_json_line_the_child_prints():
    assert run_json_child("json.tool", "--compact", what="echo", timeout=60, stdin='{"a": [1, 2]}') == {"a": [1, 2]}


def test_a_child_that_dies_is_named_with_its_exit_and_stderr_tail():
    with pytest.raises(ChildError) as e:
        run_json_child("json.tool", what="the echo probe", timeout=60, stdin="not json")
    msg = str(e.value)
    assert msg.startswith("the echo probe failed (exit 1)") and "Expecting value" in msg, msg


def test_a_child_that_hangs_is_stopped_at_the_timeout():
    with pytest.raises(ChildError, match="the sleeper did not finish in 0.5 s"):
        run_json_child("timeit", "-n1", "-r1", "import time; time.sleep(30)", what="the sleeper", timeout=0.5)

"""The runner step's pure parts without a model: the scheduler's prefill grants, the output thread's port to the
loop, and a request's state split by writing thread (admission's record is copied, never shared, by the loop).
The step as a whole runs with a real runner in tests/integration/engine/ (test_runner, test_speculative, ...)."""
from __future__ import annotations

import numpy as np

from app.engine import protocol as P
from app.engine.runner.output.output_port import EmbedJob, LoopInbox
from app.engine.runner.sequence import Seq
from app.engine.runner.step.step_scheduler import prefill_grants


def _prefilling(rid: str, n_prompt: int, todo: int = 0) -> Seq:
    seq = Seq(P.GenerateRequest(id=rid))
    seq.prompt, seq.todo = np.arange(n_prompt, dtype=np.int32), todo
    return seq


def test_prefill_grants_share_the_batch_and_hand_out_leftovers_in_order():
    a, b, c = _prefilling("a", 1500), _prefilling("b", 10), _prefilling("c", 300, todo=100)
    g = prefill_grants([a, b, c], 512)
    assert g["b"] == 10                                  # a short prompt is done in one step
    assert sum(g.values()) == 512                        # no batch row left unused while prompts wait
    assert g["a"] == 170 + (512 - 170 - 10 - 170)        # equal shares, then the leftovers in list order
    assert g["c"] == 170
    assert prefill_grants([_prefilling("x", 3)], 512) == {"x": 3}


def test_prefill_grants_never_exceed_the_budget_even_with_more_sequences_than_rows():
    seqs = [_prefilling(str(i), 50) for i in range(8)]
    g = prefill_grants(seqs, 5)
    assert sum(g.values()) == 5 and all(v in (0, 1) for v in g.values())


def test_the_port_is_all_the_output_thread_changes_in_the_loop():
    inbox = LoopInbox()
    seq = Seq(P.GenerateRequest(id="r1"))
    inbox.seqs["r1"] = seq
    assert not inbox.event.is_set()
    inbox.ready(seq)
    assert list(inbox.ready_q) == [seq] and inbox.event.is_set()
    inbox.event.clear()
    job = EmbedJob(P.EmbedRequest(id="e1", inputs=["x"]), [[1]], 1)
    inbox.enqueue(job)
    assert list(inbox.embed_jobs) == [job] and inbox.event.is_set()
    inbox.event.clear()
    inbox.wake()
    assert inbox.event.is_set()
    inbox.forget("r1")
    inbox.forget("r1")                                   # done twice (a failing output path): harmless
    assert inbox.seqs == {}


def test_the_loop_takes_copies_of_what_it_changes_from_the_admission_record():
    seq = Seq(P.GenerateRequest(id="r2"))
    seq.adm.prompt = np.asarray([5, 6, 7], dtype=np.int32)
    seq.adm.checkpoint_at = [2]
    seq.adm.sampler = sampler = object()
    seq.take_admitted()
    assert seq.prompt is seq.adm.prompt and seq.sampler is sampler
    seq.checkpoint_at.clear()                            # the loop's own list (placement clears it on a shift)
    assert seq.adm.checkpoint_at == [2]
    seq.sampler = None                                   # released: admission's record is untouched
    assert seq.adm.sampler is sampler


def test_the_error_a_client_sees_prefers_the_output_thread_then_the_loop_then_admission():
    seq = Seq(P.GenerateRequest(id="r3"))
    assert seq.error_message is None
    seq.adm.error = "admission"
    assert seq.error_message == "admission"
    seq.error = "decode"
    assert seq.error_message == "decode"
    seq.out.error = "output"
    assert seq.error_message == "output"

"""The context thread's loop, vLLM v1's cycle: the loop itself (`step_loop`), the slot table between steps
(`slots`), the scheduler that decides (`step_scheduler`, with `context_shift`), the executor that runs the
plan (`step_executor`), the update that applies it (`step_update`), the step budget that sizes prompt
chunks from measured step costs (`step_budget`), async batch preparation
(`step_prepare`) and the step clock (`step_clock`). Their typed hand-offs (`runner/step_plan.py`), the batch
(`runner/batch.py`) and the abort flag (`runner/decode_abort.py`) sit above, shared with the other rooms.
docs/architecture.md, "Runner".
Covered by tests/unit/engine/runner/step/test_step_cycle.py.
"""

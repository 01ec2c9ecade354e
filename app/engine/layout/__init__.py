"""The Layout contract between the planner (service side) and the runner (child process).

The planner emits a `Layout` (types.py); the runner loads exactly that Layout through the llama.cpp parameter
structs built from it (llama_params.py), and both sides apply the same context rules (context_rules.py). Nothing
here plans: the runner imports this package, never app.engine.planner (tests/unit/test_architecture.py).
"""

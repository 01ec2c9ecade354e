"""Where the repository and the tests' data live, for tests in any folder (tests/unit/..., tests/integration/...,
tests/gui/) and for the helpers beside this file: one place instead of `Path(__file__).parents[N]` counted per
folder depth."""
from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent          # tests/support: the shared helpers (on pytest's pythonpath)
TESTS = SUPPORT.parent
ROOT = TESTS.parent                                 # the repository root (what `python -m app` runs from)
FIXTURES = SUPPORT / "fixtures"
TEMPLATES = FIXTURES / "templates"                 # real chat templates, copied from the models' tokenizer configs
SIM_DEVICES = SUPPORT / "sim_devices"              # simulated device inventories (`--devices FILE`)

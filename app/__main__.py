"""Covered by tests/integration/cli/test_cli_models.py (`python -m app` as a user runs it)."""
from app.cli import main

raise SystemExit(main())

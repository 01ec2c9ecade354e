"""What the CLI's in-process commands (plan, devices, list, show, import, cp, rm) take from the service's
configuration, read once by app/service/config.py like the service reads it: the simulated inventory
(STRATA_DEVICES) and which other apps' folders the store scans (STRATA_EXTERNAL_MODELS over the settings file).
Covered by tests/integration/cli/test_cli_devices_plan.py (`--devices`, STRATA_DEVICES) and test_cli_models.py."""
from __future__ import annotations

from app.service.config import ConfigError, ServiceConfig
from app.service.store.model_store import ModelStore


def config() -> ServiceConfig:
    """The service's configuration; a malformed one ends the command with the config's message (exit 1)."""
    try:
        return ServiceConfig.from_env()
    except ConfigError as e:
        raise SystemExit(f"strata: {e}") from None


def store() -> ModelStore:
    """The model store as the service opens it."""
    return ModelStore(discover_external=config().external_sources)

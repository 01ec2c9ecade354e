"""`strata` command line. Each concern registers its own sub-commands from its own module, so the
areas (models, plan/devices, serve/run/ps, gui) stay independent; modules are imported lazily by name."""
from __future__ import annotations

import argparse
import importlib
import sys

# module -> it defines `register(subparsers)`; each sub-command sets `func(args) -> int`.
COMMAND_MODULES = [
    "app.cli.models",    # list, show, import, cp, rm
    "app.cli.pull",      # pull, push
    "app.cli.layout",    # plan, devices
    "app.cli.server",    # serve, run, ps
    "app.cli.desktop",   # gui
    "app.cli.worker",    # worker (llama.cpp RPC server for another machine's Strata)
]


def build_parser() -> argparse.ArgumentParser:
    from app import __version__

    parser = argparse.ArgumentParser(prog="strata", description="Run GGUF language models on your own machine.")
    parser.add_argument("--version", action="version", version=f"strata {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:  # that area has not been built yet
                continue
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""`strata` command line. Each concern registers its own sub-commands from its own module, so the areas
(models, plan/devices, serve/run/ps, gui) stay independent."""
from __future__ import annotations

import argparse
import sys

from app import __version__
from app.cli import desktop, launch, layout, models, pull, server, worker

# each defines `register(subparsers)`; each sub-command sets `func(args) -> int`.
COMMAND_MODULES = (
    models,     # list, show, import, cp, rm
    pull,       # pull, push
    layout,     # plan, devices
    server,     # serve, run, ps, stop
    desktop,    # gui
    worker,     # worker (llama.cpp RPC server for another machine's Strata)
    launch,     # launch (a coding agent on this server's model)
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="strata", description="Run GGUF language models on your own machine.")
    parser.add_argument("--version", action="version", version=f"strata {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in COMMAND_MODULES:
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

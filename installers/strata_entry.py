"""Entry point of the frozen (PyInstaller) Strata bundle: `<bundle>/strata [COMMAND ...]`.

Besides the normal command line (`app.cli.main`) the executable has to stand in for the Python interpreter,
because the app starts children with `sys.executable`, which in a bundle is this program:
  - multiprocessing 'spawn' children (the model runner): `freeze_support()` diverts them, first thing;
  - `sys.executable -m app.discovery.ggml_probe` / `-m app.engine.planner.dryrun` / `-m app.engine.planner.verify`: `-m` runs
    that module from the bundle like `python -m` would.
`--selftest` checks the bundle for real (installers/strata_selftest.py) and exits 0 when everything worked.
"""
from __future__ import annotations

import multiprocessing
import os
import sys


def _utf8_locale() -> None:
    # A bundle started with LANG unset (a bare service unit, `env -i`) warns about the C locale and Python
    # would fall back to ASCII for file names; C.UTF-8 exists on every glibc system.
    if not os.environ.get("LC_ALL") and os.environ.get("LANG", "C") in ("", "C", "POSIX"):
        os.environ["LANG"] = "C.UTF-8"


def _run_module(argv: list[str]) -> int:
    """`strata -m MODULE ARGS...`: what `python -m MODULE ARGS...` does, for the app's own child processes."""
    import runpy

    if len(argv) < 2:
        print("strata: -m needs a module name", file=sys.stderr)
        return 2
    sys.argv = [argv[1], *argv[2:]]
    try:
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


def main(argv: list[str] | None = None) -> int:
    multiprocessing.freeze_support()   # a spawned runner child never gets past this line
    _utf8_locale()
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["-m"]:
        return _run_module(argv)
    if argv[:1] == ["--selftest"]:
        from strata_selftest import selftest  # installers/strata_selftest.py, bundled beside this script

        return selftest(argv[1:])
    from app.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())

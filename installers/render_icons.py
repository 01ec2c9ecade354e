"""Render resources/strata.svg to the PNG sizes desktops look for (freedesktop hicolor theme layout):
resources/icons/hicolor/<N>x<N>/apps/strata.png. The PNGs are committed; run this again after editing the SVG:

    QT_QPA_PLATFORM=offscreen .venv/bin/python installers/render_icons.py
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SVG = ROOT / "resources" / "strata.svg"
ICONS = ROOT / "resources" / "icons" / "hicolor"
SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
ICON_NAME = "strata"       # Icon= in resources/strata.desktop


def icon_paths() -> dict[int, Path]:
    return {n: ICONS / f"{n}x{n}" / "apps" / f"{ICON_NAME}.png" for n in SIZES}


def render(svg: Path = SVG, sizes=SIZES) -> list[Path]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    _app = QGuiApplication.instance() or QGuiApplication(["render_icons"])  # noqa: F841 - fonts/plugins need it
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"cannot read {svg} as SVG")
    written = []
    for n, out in icon_paths().items():
        if n not in sizes:
            continue
        img = QImage(n, n, QImage.Format_ARGB32)
        img.fill(Qt.transparent)
        p = QPainter(img)
        p.setRenderHint(QPainter.Antialiasing)
        renderer.render(p)
        p.end()
        out.parent.mkdir(parents=True, exist_ok=True)
        if not img.save(str(out), "PNG"):
            raise SystemExit(f"cannot write {out}")
        written.append(out)
    return written


def missing() -> list[int]:
    return [n for n, p in icon_paths().items() if not p.is_file()]


if __name__ == "__main__":
    for path in render():
        print(path.relative_to(ROOT))
    sys.exit(0)

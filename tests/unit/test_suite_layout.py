"""The test suite mirrors the code (docs/architecture.md, "Tests"), checked on the source like the import rules:
- test files live in tests/unit/, tests/integration/ or tests/gui/ (their folder is their marker), helpers in
  tests/support/, and no two test files share a name (pytest imports them by base name);
- every app module is imported by some test, or its docstring names the test that covers it ("Covered by
  tests/..."), and the paths such a line names exist, so a moved test cannot leave a stale pointer behind."""
from __future__ import annotations

import ast
import re
from collections import Counter

from repo_paths import ROOT, TESTS

KINDS = ("unit", "integration", "gui")
NOT_RUN_BY_TESTS = {"app.gui.screenshots"}      # `make screenshots` runs it; its docstring says so


def test_every_test_file_is_in_a_kind_folder_and_its_name_is_unique():
    files = sorted(TESTS.rglob("test_*.py"))
    misplaced = [str(f.relative_to(TESTS)) for f in files if f.relative_to(TESTS).parts[0] not in KINDS]
    assert not misplaced, f"test files outside tests/unit, tests/integration, tests/gui: {misplaced}"
    dup = [name for name, n in Counter(f.name for f in files).items() if n > 1]
    assert not dup, f"test file names used twice (pytest imports them by base name): {dup}"


def _modules() -> dict[str, object]:
    mods = {}
    for p in (ROOT / "app").rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = p
    return mods


def _imported_by_tests() -> set[str]:
    names = set()
    for p in TESTS.rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(n, ast.Import):
                names.update(a.name for a in n.names)
            elif isinstance(n, ast.ImportFrom) and n.module:
                names.add(n.module)
                names.update(f"{n.module}.{a.name}" for a in n.names)
    return names


def test_every_module_has_a_test():
    imported = _imported_by_tests()
    missing, stale = [], []
    for name, path in sorted(_modules().items()):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        covered = [doc[m.end():] for m in re.finditer(r"[Cc]overed by\b", doc)]
        for after in covered:                  # the first test path named after "covered by" must exist
            first = re.search(r"tests/[\w/]+(?:\.py)?", after)
            if first is None or not (ROOT / first.group(0)).exists():
                stale.append(f"{name}: covered by {after[:80]!r}")
        if name not in imported and not covered and name not in NOT_RUN_BY_TESTS:
            missing.append(name)
    assert not missing, ("modules no test imports and whose docstring names no covering test: add a test, or a "
                         f"line 'Covered by tests/...' to the docstring: {missing}")
    assert not stale, f"'Covered by' lines naming a test path that does not exist: {stale}"

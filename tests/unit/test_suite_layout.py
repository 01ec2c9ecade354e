"""The test suite mirrors the code (docs/architecture.md, "Tests"), checked on the source like the import rules:
- test files live in tests/unit/, tests/integration/ or tests/gui/ (their folder is their marker), helpers in
  tests/support/, and no two test files share a name (pytest imports them by base name);
- a unit test imports no Qt, not even through the app module or helper it tests (Qt is tests/gui/'s);
- every app module is imported by some test, or its docstring names the test that covers it ("Covered by
  tests/..."), and the paths such a line names exist, so a moved test cannot leave a stale pointer behind;
- every path the docs, the README and the code's docstrings and comments name (`runner/step/step_clock.HostPhases`,
  `docs/prompt-cache.md`, `tests/support/gguf_factory.FAMILIES`) resolves to a file or folder of the repository, and a
  `module.name` suffix to a name that module defines, so a moved module cannot leave a stale pointer either."""
from __future__ import annotations

import ast
import fnmatch
import io
import re
import tokenize
from collections import Counter
from pathlib import Path

from repo_paths import ROOT, SUPPORT, TESTS

KINDS = ("unit", "integration", "gui")


def test_every_test_file_is_in_a_kind_folder_and_its_name_is_unique():
    files = sorted(TESTS.rglob("test_*.py"))
    misplaced = [str(f.relative_to(TESTS)) for f in files if f.relative_to(TESTS).parts[0] not in KINDS]
    assert not misplaced, f"test files outside tests/unit, tests/integration, tests/gui: {misplaced}"
    dup = [name for name, n in Counter(f.name for f in files).items() if n > 1]
    assert not dup, f"test file names used twice (pytest imports them by base name): {dup}"


QT = ("PySide6", "pytestqt", "pyqtgraph")


def _imports(path: Path, inside_functions: bool = True) -> set[str]:
    """Every module `path` names in an import (those inside functions too, or only what importing it runs), relative
    ones resolved, with the packages above each (importing a module runs their __init__)."""
    names = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for n in (ast.walk(tree) if inside_functions else _module_level(tree)):
        if isinstance(n, ast.Import):
            names.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                pkg = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-n.level])
                base = f"{pkg}.{base}" if base else pkg
            names.add(base)
            names.update(f"{base}.{a.name}" for a in n.names)
    return names | {".".join(name.split(".")[:i]) for name in names for i in range(1, name.count(".") + 1)}


def _module_level(tree: ast.Module):
    """The statements run when the module is imported: not those inside functions (late imports)."""
    todo = list(tree.body)
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(n))


def qt_importers(files: dict[str, Path]) -> set[str]:
    """The modules of `files` (name -> path) that import Qt themselves or through another of `files`: a test file
    by any of its imports, a module by what importing it runs."""
    deps = {name: _imports(path, inside_functions=name.startswith("test:")) for name, path in files.items()}
    reach = {name for name, ds in deps.items() if any(d.split(".")[0] in QT for d in ds)}
    grew = True
    while grew:
        grew = False
        for name, ds in deps.items():
            if name not in reach and ds & reach:
                reach.add(name)
                grew = True
    return reach


def test_no_unit_test_imports_qt():
    files = {name: Path(str(p)) for name, p in _modules().items()}
    files.update({p.stem: p for p in SUPPORT.glob("*.py")})
    tests = {f"test:{p.relative_to(TESTS)}": p for p in (TESTS / "unit").rglob("*.py")}
    reach = qt_importers({**files, **tests})
    bad = sorted(name[5:] for name in tests if name in reach)
    assert not bad, f"unit tests that import Qt (directly or through what they import): move them to tests/gui/ or " \
                    f"what they test to a plain module: {bad}"
    seen = qt_importers({"test:a": TESTS / "gui" / "test_gui_memory.py", **files})     # imports memory_view late
    assert {"test:a", "app.gui.memory.memory_view"} <= seen and "app.gui.memory.memory_data" not in seen


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
        if name not in imported and not covered:
            missing.append(name)
    assert not missing, ("modules no test imports and whose docstring names no covering test: add a test, or a "
                         f"line 'Covered by tests/...' to the docstring: {missing}")
    assert not stale, f"'Covered by' lines naming a test path that does not exist: {stale}"


# Path-like words that are not this repository's paths: other projects' files (llama.cpp, Ollama), wire names
# joined by slashes, a model name, a pattern. Each is an exact word as written.
NOT_OUR_PATHS = {
    "ggml/llama.cpp", "ggml/src/ggml-cpu/repack.cpp", "ggml/src/ggml-rpc",          # llama.cpp's tree
    "tests/test-json-schema-to-grammar.cpp", "tests/test-grammar-integration.cpp",  # llama.cpp's tests
    "docs/api.md", "ollama/ollama",                                                # Ollama's repository
    "ollama/openai/anthropic", "service/runner/GUI", "prompt/cached/completion",   # words joined by slashes
    "strata/coder",                                                                # a model name
    "resources/icons/hicolor/NxN/apps/strata.png",                                 # a pattern (N = size)
    "dialects/__init__",                                                           # "the dialects/__init__ rule"
    "tools/tool_choice/think",                                                     # request fields
    "models/sha256-",                                                              # the store's blob names
}
# llama.cpp's and Ollama's sources (their common/, tools/, server/ share names with folders of ours): this repository
# has no file of these kinds, so such a path is theirs.
FOREIGN_SUFFIXES = (".cpp", ".h", ".c", ".cu", ".go")
_SKIP_DIRS = {".git", ".venv", "__pycache__", "node_modules"}
_REF = re.compile(r"(?<![\w./@:-])((?:[A-Za-z_][\w-]*/)+[\w*-]+(?:\.[\w*-]+)*)")


def _repo_paths() -> tuple[list[str], list[str]]:
    files, dirs = [], []
    for p in ROOT.rglob("*"):
        rel = p.relative_to(ROOT)
        if _SKIP_DIRS & set(rel.parts):
            continue
        (dirs if p.is_dir() else files).append(rel.as_posix())
    return files, dirs


def _prose(path: Path) -> str:
    """A doc's text; a module's docstrings and comments (code strings are data, not pointers)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        return text
    tree = ast.parse(text)
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docs = [ast.get_docstring(n) or "" for n in ast.walk(tree) if isinstance(n, kinds)]
    comments = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    return "\n".join(docs + comments)


def _defines(module: str, names: list[str]) -> bool:
    """The module defines the first name (anywhere: a method or class attribute counts) and so on down."""
    defined = set()
    for n in ast.walk(ast.parse((ROOT / module).read_text(encoding="utf-8"))):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                defined.update(e.id for e in ast.walk(t) if isinstance(e, ast.Name))
    return all(name in defined for name in names)


def _resolves(ref: str, files: list[str], dirs: list[str]) -> bool:
    def found(suffix: str) -> list[str]:
        if "*" in suffix:
            return [p for p in files + dirs if fnmatch.fnmatch(p, suffix) or fnmatch.fnmatch(p, "*/" + suffix)]
        return [p for p in files + dirs if p == suffix or p.endswith("/" + suffix)]
    if found(ref) or found(ref + ".py"):
        return True
    head, _, last = ref.rpartition("/")
    bits = last.split(".")
    for k in range(len(bits) - 1, 0, -1):           # module.name.name: the longest module prefix that exists
        for module in found(f"{head}/{'.'.join(bits[:k])}.py"):
            if _defines(module, bits[k:]):
                return True
    return False


def test_every_path_the_docs_and_docstrings_name_exists():
    files, dirs = _repo_paths()
    roots = {"app", "tests", "bench", "docs", "installers", "resources", "tools"}
    roots |= {Path(d).name for d in dirs if d.startswith("app/")}
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    sources += [ROOT / f for f in files if f.endswith(".py") and f.split("/")[0] in ("app", "tests", "bench", "tools")]
    stale = []
    for src in sources:
        for m in _REF.finditer(_prose(src)):
            ref = m.group(1).rstrip(".")
            if ref.split("/")[0] in roots and ref not in NOT_OUR_PATHS and not ref.endswith(FOREIGN_SUFFIXES) \
                    and not _resolves(ref, files, dirs):
                stale.append(f"{src.relative_to(ROOT)}: {ref}")
    assert not stale, f"paths named in docs, docstrings or comments that do not exist: {stale}"


def test_the_path_check_sees_a_stale_pointer():
    files, dirs = _repo_paths()
    assert _resolves("runner/step/step_clock.HostPhases", files, dirs)
    assert _resolves("docs/prompt-cache.md", files, dirs)
    assert not _resolves("runner/step_clock.HostPhases", files, dirs)          # the module moved to runner/step/
    assert not _resolves("runner/step/step_clock.NoSuchName", files, dirs)
    assert not _resolves("docs/no-such-page.md", files, dirs)

"""The import rules of docs/architecture.md ("Layers and folders"), checked on the source so they stay true.

- Layers: ggml < discovery < engine < service < gui < cli; a module imports its own layer and those below.
- app/engine/runner/ is the runner child's code: outside it only the runner's parent side (`engine/client.py`,
  which hands the process entry to multiprocessing) may name it.
- The runner and the Layout contract (app/engine/layout/) import no planner code: the runner loads a Layout, it
  does not plan one.
- The GUI imports only its API client and plain data modules (no service, no engine code that runs anything).
- No import cycle between modules (late imports inside functions included).
- The service's rooms (docs/architecture.md, "The service's rooms"): http/, store/, generation/ and scheduling/
  import only what SERVICE_ROOMS lists; no two rooms import each other; a dialect imports no other dialect; no
  room imports the composition root.
- The desktop app's rooms (docs/architecture.md, "The desktop app's rooms"): chat/, memory/, server/ and models/
  import common/ and themselves, never each other; common/ imports no room; only the top of app/gui/ (the desktop
  that builds the windows, the tray, the settings dialog) imports rooms.
- The runner's rooms (docs/architecture.md, "Runner"): its shared top imports no room, no room imports step/
  (the loop composes them), no two rooms import each other; the step scheduler imports nothing that drafts.
Each import is read with `ast`, so nothing is imported to check it.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from repo_paths import ROOT

APP = ROOT / "app"

LAYERS = {"app.ggml": 0, "app.discovery": 1, "app.engine": 2, "app.service": 3, "app.gui": 4, "app.cli": 5}
SHARED = {"app", "app.paths", "app.settings", "app.format", "app.api_client", "app.__main__"}
# ^ plain modules below every layer (paths, the settings file, formatters; the API client speaks only HTTP), and
#   the entry point (__main__)
# What the GUI may import outside app.gui: its API client and plain data modules (dataclasses, constants).
GUI_ALLOWED_PREFIXES = ("app.gui", "app.paths", "app.settings", "app.engine.layout.types", "app.discovery.inventory",
                        "app.api_client", "app.format")
RUNNER = "app.engine.runner"
RUNNER_PARENTS = {"app.engine.client"}
SERVICE = "app.service"
# What each room of app/service may import from the rest of app/service (its own folder always).
SERVICE_ROOMS = {
    "http": ("config", "appkeys"),
    "store": ("http.errors",),
    "generation": ("http",),
    "scheduling": ("http", "config", "collaborators", "generation.options", "generation.keep_alive",
                   "generation.host", "store.records"),
}
# ^ generation and scheduling meet one way: the scheduler takes a request's options and keep_alive (generation's
#   values) and implements the door generation names (generation/host.py: ModelHost); the pipeline is handed that
#   host and imports nothing of scheduling/ (nor reaches past the door: test_nothing_reaches_past_the_model_host).
ROOMS = ("http", "store", "generation", "scheduling", "dialects")
SERVICE_ROOT = {"app.service.app", "app.service.server"}       # the composition root that builds the app
DIALECTS = "app.service.dialects"
DIALECT_EXCEPTIONS = {("responses", "openai.parse")}   # OpenAI's Responses API reuses its response_format shape
PLANNER = "app.engine.planner"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in APP.rglob("*.py")}


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """Every app module `path` imports, at module level or inside functions."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "app")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "app":
                continue
            for a in node.names:               # `from app.engine import protocol` names a module
                sub = f"{mod}.{a.name}"
                found.add(sub if sub in known else mod)
    return {m for m in found if m in known}


def layer_of(mod: str) -> int | None:
    for prefix, layer in LAYERS.items():
        if mod == prefix or mod.startswith(prefix + "."):
            return layer
    return None


def graph() -> dict[str, set[str]]:
    mods = all_modules()
    known = set(mods)
    return {name: imports_of(path, name, known) for name, path in mods.items()}


def test_every_module_has_a_layer():
    unknown = [m for m in all_modules() if m not in SHARED and layer_of(m) is None]
    assert not unknown, f"modules outside every layer (add their package to LAYERS in this test and to " \
                        f"docs/architecture.md): {unknown}"


def test_imports_follow_the_layers():
    bad = []
    for mod, deps in graph().items():
        if mod in SHARED:
            if mod not in ("app", "app.__main__"):      # a shared plain module stands on shared modules only
                bad += [f"{mod} -> {dep}" for dep in deps if dep not in SHARED]
            continue
        for dep in deps:
            if dep in SHARED - {"app.__main__"}:
                continue
            if dep == "app.__main__" or (layer_of(dep) or 0) > (layer_of(mod) or 0):
                bad.append(f"{mod} -> {dep}")
    assert not bad, "imports that run up the layers (ggml < discovery < engine < service < gui < cli):\n" + \
        "\n".join(sorted(bad))


def test_runner_code_is_only_imported_by_the_runner():
    bad = [f"{mod} -> {dep}" for mod, deps in graph().items() for dep in deps
           if (dep == RUNNER or dep.startswith(RUNNER + ".")) and not mod.startswith(RUNNER)
           and mod not in RUNNER_PARENTS]
    assert not bad, "runner-child modules imported outside the runner:\n" + "\n".join(sorted(bad))


def test_the_runner_and_the_layout_contract_import_no_planner():
    """What the runner needs of a Layout (its types, the llama.cpp param structs, the shared context rules) lives
    in app/engine/layout/; planning stays in the service process."""
    bad = [f"{mod} -> {dep}" for mod, deps in graph().items()
           if mod.startswith((RUNNER, "app.engine.layout")) for dep in deps
           if dep == PLANNER or dep.startswith(PLANNER + ".")]
    assert not bad, "runner or layout modules importing the planner:\n" + "\n".join(sorted(bad))


def test_the_runner_reads_no_chat_facts_and_the_chat_package_no_llama():
    """The family and template choice are read once, in the parent (engine/client.py passes them at load and the
    service's plan names the family per request): no runner module reads them from the GGUF. engine/chat/ is
    imported by both processes, so it imports no llama.cpp and no runner code."""
    readers = [p for p in (APP / "engine" / "runner").rglob("*.py") if "read_chat_facts" in p.read_text()]
    assert not readers, readers
    bad = [f"{mod} -> {dep}" for mod, deps in graph().items() if mod.startswith("app.engine.chat")
           for dep in deps if dep.startswith((RUNNER, "app.ggml"))]
    bad += [str(p) for p in (APP / "engine" / "chat").rglob("*.py") if "llama_cpp" in p.read_text()]
    assert not bad, bad


def test_gui_imports_only_its_client_and_plain_data():
    bad = [f"{mod} -> {dep}" for mod, deps in graph().items() if mod.startswith("app.gui.")
           for dep in deps if not dep.startswith(GUI_ALLOWED_PREFIXES)]
    assert not bad, "the GUI reaching past its API client:\n" + "\n".join(sorted(bad))


def test_no_import_cycles():
    g = graph()
    cycles, state, stack = [], {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(g.get(m, ())):
            if d == m or d == "app" or (m.startswith(d + ".") and d in g):
                continue          # a package's own __init__ is not a cycle with its submodules
            if state.get(d) == 1:
                cycles.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def _under(mod: str, prefixes) -> bool:
    return any(mod == f"{SERVICE}.{p}" or mod.startswith(f"{SERVICE}.{p}.") for p in prefixes)


def _dialect_of(mod: str) -> str | None:
    """`openai` for app.service.dialects.openai.parse; None for dialects/__init__ and dialects/base.py."""
    parts = mod.split(".")
    return parts[3] if mod.startswith(DIALECTS + ".") and len(parts) > 4 else None


def service_room_violations(g: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in g.items():
        for dep in (d for d in deps if mod.startswith(SERVICE + ".") and d.startswith(SERVICE + ".")):
            if dep in SERVICE_ROOT and mod not in SERVICE_ROOT:
                bad.append(f"{mod} -> {dep} (the composition root)")
            for room, allowed in SERVICE_ROOMS.items():
                if _under(mod, (room,)) and not _under(dep, (room,) + allowed):
                    bad.append(f"{mod} -> {dep} ({room}/ may import only {', '.join(allowed)})")
            own, other = _dialect_of(mod), _dialect_of(dep)
            if own and other and own != other and (own, dep.removeprefix(DIALECTS + ".")) not in DIALECT_EXCEPTIONS:
                bad.append(f"{mod} -> {dep} (another dialect)")
    return sorted(bad)


def test_service_rooms_import_one_way():
    bad = service_room_violations(graph())
    assert not bad, "imports across the service's rooms that docs/architecture.md rules out:\n" + "\n".join(bad)


def room_pairs_both_ways(g: dict[str, set[str]]) -> list[str]:
    """Pairs of rooms that import each other (any module of one, any of the other)."""
    def room(mod: str) -> str | None:
        return next((r for r in ROOMS if _under(mod, (r,))), None)
    edges = {(room(m), room(d)) for m, deps in g.items() for d in deps}
    return sorted(f"{a} <-> {b}" for a, b in edges if a and b and a < b and (b, a) in edges)


def test_no_two_rooms_import_each_other():
    both = room_pairs_both_ways(graph())
    assert not both, "rooms that import each other (one must only be handed the other's objects):\n" + \
        "\n".join(both)
    assert room_pairs_both_ways({"app.service.generation.request": {"app.service.scheduling.keep_alive"},
                                 "app.service.scheduling.scheduler": {"app.service.generation.options"}}) \
        == ["generation <-> scheduling"]


def test_the_room_rules_see_violations():
    g = {"app.service.http.errors": {"app.service.generation.request"},
         "app.service.store.names": {"app.service.scheduling.scheduler", "app.service.http.errors"},
         "app.service.generation.pipeline": {"app.service.app", "app.service.scheduling.scheduler"},
         "app.service.dialects.anthropic.parse": {"app.service.dialects.openai.parse", "app.service.dialects.base"},
         "app.service.dialects.responses.parse": {"app.service.dialects.openai.parse"}}
    assert service_room_violations(g) == sorted([
        "app.service.http.errors -> app.service.generation.request (http/ may import only config, appkeys)",
        "app.service.store.names -> app.service.scheduling.scheduler (store/ may import only http.errors)",
        "app.service.generation.pipeline -> app.service.app (the composition root)",
        "app.service.generation.pipeline -> app.service.app (generation/ may import only http)",
        "app.service.generation.pipeline -> app.service.scheduling.scheduler (generation/ may import only http)",
        "app.service.dialects.anthropic.parse -> app.service.dialects.openai.parse (another dialect)"])


def test_the_checker_sees_violations(tmp_path):
    """The checks above would fail on a violation: the parser finds relative, aliased and late imports."""
    src = tmp_path / "mod.py"
    src.write_text("from app.service import store\nimport app.gui.tray\n"
                   "def f():\n    from ..engine.runner.step import step_loop\n")
    known = {"app.service.store", "app.gui.tray", "app.engine.runner.step.step_loop", "app.engine.runner"}
    name = "app.discovery.mod"
    # pretend the file lives in app/discovery/
    found = imports_of(src, name, known)
    assert found == {"app.service.store", "app.gui.tray", "app.engine.runner.step.step_loop"}
    assert layer_of("app.service.store") > layer_of(name)


# ---- the model host's door ----------------------------------------------------------------------------------------
# Generation and the routes reach the model scheduler through its typed door only (generation/host.py: ModelHost;
# scheduling/door.py: ServiceHost, which types appkeys.SCHEDULER): outside scheduling/ nothing reads the scheduler's
# loader or its table of models, so mypy sees every use and a request's path to its model is one door.
SCHEDULING = "app.service.scheduling"
BEHIND_THE_DOOR = {"loader", "models"}
HOST_NAME = re.compile(r"sched|host", re.IGNORECASE)     # scheduler, self._scheduler, host, model_host, ...
HOST_GETTERS = {"context", "_ctx"}      # the dialects' `scheduler, store, metrics = context(request)`


def _names_the_host(node: ast.AST, aliases: set[str]) -> bool:
    """Whether `node` denotes the scheduler: a name or attribute whose name says so, `app[keys.SCHEDULER]`, or a
    name bound to one of those."""
    if isinstance(node, ast.Name):
        return bool(HOST_NAME.search(node.id)) or node.id in aliases
    if isinstance(node, ast.Attribute):
        return bool(HOST_NAME.search(node.attr))
    if isinstance(node, ast.Subscript):
        return "SCHEDULER" in ast.unparse(node.slice)
    return False


def _host_aliases(tree: ast.AST) -> set[str]:
    """Names bound anywhere in the module to the scheduler (`s = request.app[keys.SCHEDULER]`, `h = s`,
    `s, store = app[keys.SCHEDULER], app[keys.STORE]`, `s, _, _ = context(request)`), to a fixed point."""
    aliases: set[str] = set()
    while True:
        before = len(aliases)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = node.value
                if value is None:
                    continue
                for t in targets:
                    if isinstance(t, ast.Name) and _names_the_host(value, aliases):
                        aliases.add(t.id)
                    elif isinstance(t, ast.Tuple) and t.elts and isinstance(t.elts[0], ast.Name):
                        if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr",
                                                                                             None)) in HOST_GETTERS:
                            aliases.add(t.elts[0].id)
                        elif isinstance(value, ast.Tuple) and len(value.elts) == len(t.elts):
                            aliases.update(e.id for e, v in zip(t.elts, value.elts)
                                           if isinstance(e, ast.Name) and _names_the_host(v, aliases))
        if len(aliases) == before:
            return aliases


def reaches_past_the_host(source: str) -> list[str]:
    """Each place `source` reads the scheduler's loader or models: `scheduler.loader.resolve(...)`,
    `self._scheduler.models`, `app[keys.SCHEDULER].loader`, through an alias, or `getattr(scheduler, "loader")`."""
    tree = ast.parse(source)
    aliases = _host_aliases(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in BEHIND_THE_DOOR and _names_the_host(node.value, aliases):
            found.append((node.lineno, ast.unparse(node)))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and node.args[1].value in BEHIND_THE_DOOR and _names_the_host(node.args[0], aliases)):
            found.append((node.lineno, ast.unparse(node)))
    return [f"{line}: {text}" for line, text in sorted(found)]


def test_nothing_reaches_past_the_model_host():
    bad = [f"{mod}:{where}" for mod, path in sorted(all_modules().items())
           if not (mod == SCHEDULING or mod.startswith(SCHEDULING + "."))
           for where in reaches_past_the_host(path.read_text())]
    assert not bad, "the scheduler's loader or models read outside scheduling/ (ask its door: generation/host.py, " \
                    "scheduling/door.py):\n" + "\n".join(bad)


def test_the_door_check_sees_every_way_past_it():
    src = """
async def route(request):
    scheduler, _, _ = context(request)
    record = await scheduler.loader.resolve("a")
    s = request.app[keys.SCHEDULER]
    if "a" in s.models:
        loader = request.app[keys.SCHEDULER].loader
    h = s
    h.models.get("a")
    getattr(s, "loader")
    first, store = request.app[keys.SCHEDULER], request.app[keys.STORE]
    first.models.clear()

class Generation:
    def start(self):
        self._scheduler.loader.model_info("x")
        return self.host.models

def card(host):
    return host.models
"""
    found = [w.split(":")[0] for w in reaches_past_the_host(src)]
    assert found == ["4", "6", "7", "9", "10", "12", "16", "17", "20"], reaches_past_the_host(src)
    fine = """
async def route(request):
    scheduler, store, _ = context(request)
    await scheduler.resolve("a")
    self.models = ModelListModel(self)
    store.models
    spec.loader.exec_module(mod)
    loop.scheduler.slots
"""
    assert reaches_past_the_host(fine) == []


# ---- the runner's rooms -------------------------------------------------------------------------------------------
# app/engine/runner/ is split by job (docs/architecture.md, "Layers and folders" and "Runner"). Its top holds the
# process entry (`main`, which builds everything) and what every room shares (the per-request state, the step's
# typed records, the batch, the abort flag, the heartbeat, test hooks), which imports no room. `step/` (the
# context thread's loop) composes the other rooms, and no room imports it back; no two rooms import each other.
RUNNER_ROOMS = ("step", "speculation", "cache", "sampling", "output", "prompt", "embedding")
RUNNER_ROOT = {"app.engine.runner.main"}
SCHEDULE_PHASE = "app.engine.runner.step.step_scheduler"


def runner_room_of(mod: str) -> str | None:
    """The runner room `mod` is in; "" for the runner's top (its shared modules); None outside the runner."""
    if not mod.startswith(RUNNER + "."):
        return None
    first = mod[len(RUNNER) + 1:].split(".")[0]
    return first if first in RUNNER_ROOMS else ""


def runner_room_violations(g: dict[str, set[str]]) -> list[str]:
    bad, edges = [], set()
    for mod, deps in g.items():
        own = runner_room_of(mod)
        if own is None or mod in RUNNER_ROOT:
            continue
        for dep in deps:
            other = runner_room_of(dep)
            if not other or other == own:
                continue
            if own == "":
                bad.append(f"{mod} -> {dep} (the runner's shared modules import no room)")
            elif other == "step":
                bad.append(f"{mod} -> {dep} (only the process entry builds on the loop)")
            edges.add((own, other))
    bad += [f"{a} <-> {b} (runner rooms that import each other)" for a, b in sorted(edges) if a < b and (b, a) in edges]
    return sorted(bad)


def test_runner_rooms_import_one_way():
    bad = runner_room_violations(graph())
    assert not bad, "imports across the runner's rooms that docs/architecture.md rules out:\n" + "\n".join(bad)
    assert sorted(p.name for p in (APP / "engine" / "runner").iterdir() if p.is_dir() and p.name != "__pycache__") \
        == sorted(RUNNER_ROOMS)


def test_the_runner_room_rules_see_violations():
    g = {"app.engine.runner.sequence": {"app.engine.runner.cache.stores"},
         "app.engine.runner.speculation.drafting": {"app.engine.runner.step.step_clock"},
         "app.engine.runner.cache.prompt_cache": {"app.engine.runner.output.text"},
         "app.engine.runner.output.text": {"app.engine.runner.cache.stores"},
         "app.engine.runner.main": {"app.engine.runner.step.step_loop"}}
    assert runner_room_violations(g) == sorted([
        "app.engine.runner.sequence -> app.engine.runner.cache.stores "
        "(the runner's shared modules import no room)",
        "app.engine.runner.speculation.drafting -> app.engine.runner.step.step_clock (only the process entry builds on "
        "the loop)",
        "cache <-> output (runner rooms that import each other)"])


def test_the_schedule_phase_runs_no_model():
    """The step scheduler decides: it imports no llama.cpp (KV edits, a context shift included, run between steps
    in the slot table) and nothing that drafts (drafting, a draft model's decodes included, runs in the execute
    phase after sampling: tests/unit/engine/runner/step/test_step_cycle.py checks it at run time)."""
    deps = graph()[SCHEDULE_PHASE]
    assert not [d for d in deps if runner_room_of(d) in ("speculation", "embedding", "prompt", "output")]
    src = (APP / "engine" / "runner" / "step" / "step_scheduler.py").read_text()
    assert "llama_cpp" not in src and "llama_decode(" not in src


# ---- the desktop app's rooms -------------------------------------------------------------------------------------
# app/gui/ is split by window (docs/architecture.md, "The desktop app's rooms"): each room holds a window with its
# widgets and the plain data behind them; common/ holds what several rooms share (the bridge, the service state,
# the theme, the shared actions, the item models' base). Imports run one way: the top of app/gui/ (desktop.py
# composes the windows; the tray and the settings dialog) -> rooms -> common/. No room imports another: what two
# windows both need moves to common/, and a window that opens another asks the desktop to.
GUI = "app.gui"
GUI_ROOMS = ("chat", "memory", "server", "models")
GUI_COMMON = "common"


def gui_room_of(mod: str) -> str | None:
    """The room of a GUI module: a room's name, "common", "" for the top of app/gui/; None outside the GUI."""
    if mod != GUI and not mod.startswith(GUI + "."):
        return None
    first = mod[len(GUI) + 1:].split(".")[0] if mod != GUI else ""
    return first if first in GUI_ROOMS + (GUI_COMMON,) else ""


def gui_room_violations(g: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in g.items():
        own = gui_room_of(mod)
        if not own:
            continue
        for dep in deps:
            other = gui_room_of(dep)
            if other is None or other == own:
                continue
            if other == "":
                bad.append(f"{mod} -> {dep} (only the top of app/gui/ composes; nothing imports it back)")
            elif own == GUI_COMMON:
                bad.append(f"{mod} -> {dep} (common/ imports no room)")
            elif other != GUI_COMMON:
                bad.append(f"{mod} -> {dep} (a room imports only common/ and itself)")
    return sorted(bad)


def test_gui_rooms_import_one_way():
    bad = gui_room_violations(graph())
    assert not bad, "imports across the desktop app's rooms that docs/architecture.md rules out:\n" + "\n".join(bad)
    assert sorted(p.name for p in (APP / "gui").iterdir() if p.is_dir() and p.name != "__pycache__") \
        == sorted(GUI_ROOMS + (GUI_COMMON,))


def test_the_gui_room_rules_see_violations():
    g = {"app.gui.memory.memory_window": {"app.gui.models.model_data", "app.gui.common.state",
                                          "app.gui.memory.memory_view"},
         "app.gui.common.state": {"app.gui.chat.history", "app.gui.common.bridge"},
         "app.gui.chat.chat_window": {"app.gui.desktop"},
         "app.gui.desktop": {"app.gui.chat.chat_window", "app.gui.server.server_window", "app.gui.tray"},
         "app.gui.settings_dialog": {"app.gui.chat.mcp_tools"}}
    assert gui_room_violations(g) == sorted([
        "app.gui.memory.memory_window -> app.gui.models.model_data (a room imports only common/ and itself)",
        "app.gui.common.state -> app.gui.chat.history (common/ imports no room)",
        "app.gui.chat.chat_window -> app.gui.desktop (only the top of app/gui/ composes; nothing imports it back)"])

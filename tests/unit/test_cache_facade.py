"""The prompt cache has one door (docs/architecture.md, "Runner"): outside app/engine/runner/cache/ the runner only
calls `PromptCache`'s public methods (app/engine/runner/cache/prompt_cache.py) and reads none of its attributes
(the kept slots, the host-RAM store, the checkpoints, the disk saver, its llama memory handle, ...), so what the
cache keeps and how can change behind it. Checked on the source with `ast`, like the import rules
(test_architecture.py): a name or attribute that holds the facade anywhere in app/ (assigned `PromptCache(...)`, or
a parameter annotated with it, or an attribute assigned from one of those) names it in every module, and every
attribute read on it must be one of the facade's calls.
"""
from __future__ import annotations

import ast

from repo_paths import ROOT

APP = ROOT / "app"
CACHE = "app.engine.runner.cache"
FACADE = "PromptCache"
FACADE_FILE = APP / "engine" / "runner" / "cache" / "prompt_cache.py"
# The calls the runner makes; a new one is a change of the door, made here on purpose.
CALLS = ["after_prefill", "borrow", "checkpoint_stops", "checkpoints_enabled", "decoded", "forget_all", "idle",
         "place", "release", "save_all_to_disk", "serve_waiting", "shares_cells", "shifted", "state", "stats"]


def facade_calls(source: str, cls: str = FACADE) -> set[str]:
    """The public methods of class `cls` in `source` (properties and attributes are its parts, not calls)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {f.name for f in node.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")
                    and not any(isinstance(d, ast.Name) and d.id == "property" for d in f.decorator_list)}
    raise AssertionError(f"no class {cls}")


def _names_cls(annotation, cls: str) -> bool:
    return annotation is not None and any(
        (isinstance(n, ast.Name) and n.id == cls) or (isinstance(n, ast.Attribute) and n.attr == cls)
        or (isinstance(n, ast.Constant) and isinstance(n.value, str) and cls in n.value)
        for n in ast.walk(annotation))


def _target_name(t) -> str | None:
    return t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else None


def facade_names(trees: dict[str, ast.AST], cls: str = FACADE) -> set[str]:
    """Every identifier bound to a `cls` object in the modules: annotated parameters and variables, targets of
    `cls(...)`, and (until nothing changes) targets assigned from an identifier already found."""
    names: set[str] = set()
    for tree in trees.values():
        for n in ast.walk(tree):
            if isinstance(n, ast.arg) and _names_cls(n.annotation, cls):
                names.add(n.arg)
            elif isinstance(n, ast.AnnAssign) and _names_cls(n.annotation, cls) and _target_name(n.target):
                names.add(_target_name(n.target))
    while True:
        before = len(names)
        for tree in trees.values():
            for n in ast.walk(tree):
                if not isinstance(n, ast.Assign):
                    continue
                pairs = [(t, n.value) for t in n.targets]
                pairs += [(a, b) for t in n.targets if isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple)
                          for a, b in zip(t.elts, n.value.elts)]
                for t, v in pairs:
                    made = isinstance(v, ast.Call) and _target_name(v.func) == cls
                    if (made or _target_name(v) in names) and _target_name(t):
                        names.add(_target_name(t))
        if len(names) == before:
            return names


def facade_reads(sources: dict[str, str], calls: set[str], cls: str = FACADE, inside: str = CACHE) -> list[str]:
    """'module:line .attr' for every attribute read on the facade, outside the `inside` package, that is not one
    of its `calls`."""
    trees = {mod: ast.parse(src) for mod, src in sources.items()}
    names = facade_names(trees, cls)
    bad = []
    for mod, tree in trees.items():
        if mod == inside or mod.startswith(inside + "."):
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and _target_name(n.value) in names and n.attr not in calls:
                bad.append(f"{mod}:{n.lineno} .{n.attr}")
    return sorted(bad)


def app_sources() -> dict[str, str]:
    out = {}
    for p in APP.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p.read_text(encoding="utf-8")
    return out


def test_the_facade_has_the_calls_the_runner_makes():
    assert sorted(facade_calls(FACADE_FILE.read_text(encoding="utf-8"))) == CALLS


def test_no_module_outside_the_cache_reads_the_facades_parts():
    bad = facade_reads(app_sources(), set(CALLS))
    assert not bad, "reads of the prompt cache's parts outside app/engine/runner/cache/ (ask the facade):\n" + \
        "\n".join(bad)


def test_the_facade_rule_sees_reads_of_its_parts():
    """Reads as the runner made them before the facade (the slot table reading the host store and the checkpoints,
    the update clearing the pending copies, the context shift touching the shared slots, the idle loop reading the
    slots due on disk), through an annotated parameter, an attribute set from a constructor or one set from a
    parameter, and a plain parameter of the same name; calls and the cache's own modules pass."""
    sources = {
        "app.engine.runner.step.slots": (
            "class Slots:\n"
            "    def __init__(self, prompt_cache: PromptCache, inbox):\n"
            "        self.cache, self.inbox = prompt_cache, inbox\n"
            "    def report(self):\n"
            "        host, cps = self.cache.host, self.cache.checkpoints\n"
            "        self.cache.place(None, [])\n"),
        "app.engine.runner.step.step_loop": (
            "class Loop:\n"
            "    def __init__(self, ctx):\n"
            "        self.prompt_cache = PromptCache(ctx)\n"
            "    def idle(self):\n"
            "        return self.prompt_cache.disk_due or self.prompt_cache.idle(1.0)\n"),
        "app.engine.runner.step.step_update": "def update(u):\n    u.cache.pending_copy.clear()\n",
        "app.engine.runner.step.context_shift": (
            "def shift(seq, prompt_cache):\n    prompt_cache.slots.shared.discard(seq.slot)\n"),
        "app.engine.runner.cache.prompt_cache": "class PromptCache:\n    def place(self):\n        self.slots.keep()\n",
    }
    assert facade_reads(sources, {"place", "idle"}) == [
        "app.engine.runner.step.context_shift:2 .slots",
        "app.engine.runner.step.slots:5 .checkpoints",
        "app.engine.runner.step.slots:5 .host",
        "app.engine.runner.step.step_loop:5 .disk_due",
        "app.engine.runner.step.step_update:2 .pending_copy"]
    assert facade_calls("class PromptCache:\n    def place(self): ...\n    def _take(self): ...\n"
                        "    @property\n    def disk_due(self): ...\n") == {"place"}

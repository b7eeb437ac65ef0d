"""The repository's import structure, read from the source with ``ast`` (nothing is imported):
every import of the repo's own modules, those inside functions and ``importlib.import_module``
calls included, must keep the layers apart (``accelrl`` below ``recipes`` below ``slurm``;
``benchmarks`` and ``reference`` beside them, imported by none of the three) and form no
cycle. ``import a.b.c`` counts as importing ``a.b.c`` only, not its packages ``a`` and
``a.b``."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("accelrl", "recipes", "slurm", "reference", "benchmarks")

FORBIDDEN = {
    "accelrl": {"recipes", "slurm", "benchmarks", "reference"},
    "recipes": {"benchmarks", "reference"},
    "slurm": {"benchmarks", "reference"},
}
"""Package -> the packages it must not import."""

DYNAMIC = {
    "accelrl.envs.classic": "--env.game module:Id-v0 imports the user's module",
    "accelrl.launch.plan": "the recipe module a study or a launch names",
    "accelrl.launch.job": "the recipe module a submitted job runs",
    "benchmarks.train_throughput": "the recipe each row measures",
}
"""Modules allowed an ``importlib.import_module`` of a name known only at run time."""


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    at_import: bool
    """Run when ``source`` is imported (module level, not under ``if TYPE_CHECKING``)."""


def module_files() -> dict[str, Path]:
    """Every module of the five packages by dotted name (a package by its ``__init__``)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _absolute(name: str, level: int, module: str, path: Path) -> str:
    """``from ..x import`` as an absolute name, relative to ``module``."""
    if level == 0:
        return name
    base = _package_of(module, path).split(".")
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _is_import_module(call: ast.Call) -> bool:
    f = call.func
    return (isinstance(f, ast.Attribute) and f.attr == "import_module") or (
        isinstance(f, ast.Name) and f.id in ("import_module", "__import__")
    )


def _constant_strings(tree: ast.Module) -> dict[str, set[str]]:
    """Module-level names bound to expressions that hold string constants (e.g. a dict of
    module names), with those strings."""
    bound: dict[str, set[str]] = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Name):
                strings = {
                    n.value
                    for n in ast.walk(node.value)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                }
                bound.setdefault(target.id, set()).update(strings)
    return bound


def _walk(node: ast.AST, at_import: bool = True) -> Iterator[tuple[ast.AST, bool]]:
    """Every node with whether it runs when the module is imported."""
    yield node, at_import
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        at_import = False
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        for child in node.body:
            yield from _walk(child, False)
        for child in node.orelse:
            yield from _walk(child, at_import)
        return
    for child in ast.iter_child_nodes(node):
        yield from _walk(child, at_import)


def scan(modules: dict[str, Path]) -> tuple[list[Import], list[str]]:
    """Imports of the repo's own modules, and the dynamic imports (``module:line``) whose
    name this cannot read."""

    def resolve(names: list[str]) -> list[str]:
        # the longest repo module each name starts with ("accelrl.x.Name" -> "accelrl.x")
        out = []
        for name in names:
            parts = name.split(".")
            for end in range(len(parts), 0, -1):
                if ".".join(parts[:end]) in modules:
                    out.append(".".join(parts[:end]))
                    break
        return out

    imports: list[Import] = []
    dynamic: list[str] = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        constants = _constant_strings(tree)
        for node, at_import in _walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = resolve([alias.name for alias in node.names])
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node.module or "", node.level, module, path)
                # a name that is a submodule imports the submodule; any other, the module
                targets = resolve([f"{base}.{alias.name}" for alias in node.names])
            elif isinstance(node, ast.Call) and _is_import_module(node) and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    targets = resolve([arg.value])
                else:
                    names = [n.id for n in ast.walk(arg) if isinstance(n, ast.Name)]
                    named = [s for n in names for s in sorted(constants.get(n, ()))]
                    targets = [s for s in named if s in modules]
                    if not targets:
                        dynamic.append(f"{module}:{node.lineno}")
            for target in dict.fromkeys(targets):
                if target != module:
                    imports.append(Import(module, target, node.lineno, at_import))
    return imports, dynamic


@functools.cache
def repo_imports() -> tuple[list[Import], list[str]]:
    return scan(module_files())


def cycles(imports: list[Import]) -> list[str]:
    """Each group of modules that import one another (a strongly connected component), as
    ``cycle: a -> b -> a``: the shortest cycle through its first module, then the others."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        graph.setdefault(imp.source, set()).add(imp.target)
        graph.setdefault(imp.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    found = []
    for group in groups:
        members = set(group)
        start = group[0]
        paths = {start: [start]}
        queue = [start]
        chain = None
        while queue and chain is None:
            v = queue.pop(0)
            for w in sorted(graph[v] & members):
                if w == start:
                    chain = paths[v] + [start]
                    break
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    queue.append(w)
        assert chain is not None
        others = sorted(members - set(chain))
        with_others = f" (with {', '.join(others)})" if others else ""
        found.append("cycle: " + " -> ".join(chain) + with_others)
    return found


def layer_violations(imports: list[Import]) -> list[str]:
    return sorted(
        {
            f"{imp.source} imports {imp.target}"
            for imp in imports
            if imp.target.split(".")[0] in FORBIDDEN.get(imp.source.split(".")[0], ())
        }
    )


def test_imports_keep_the_layers_apart_and_form_no_cycle():
    imports, dynamic = repo_imports()
    found = set(layer_violations(imports)) | set(cycles(imports))
    assert not found, "import violations:\n" + "\n".join(sorted(found))
    unlisted = [d for d in dynamic if d.split(":")[0] not in DYNAMIC]
    assert not unlisted, (
        f"import_module of a name read at run time: {unlisted}; name the module literally, "
        "or add it to DYNAMIC with the reason"
    )


def test_the_scan_reads_every_kind_of_import_and_names_a_cycle(tmp_path):
    sources = {
        "__init__": "",
        "a": "from . import b\n",  # a submodule by name, relative
        "b": "def f():\n    from .c import X\n",  # inside a function; a name of c
        "c": (
            "import importlib\n"
            "NAMES = {'x': 'pkg.a'}\n"
            "def g(k):\n"
            "    importlib.import_module(NAMES[k])\n"  # a module-level table of names
            "    importlib.import_module('pkg.d')\n"
            "    importlib.import_module(k)\n"  # read at run time
        ),
        "d": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a.b\n",
    }
    (tmp_path / "pkg").mkdir()
    modules = {}
    for name, text in sources.items():
        (tmp_path / "pkg" / f"{name}.py").write_text(text)
        modules["pkg" if name == "__init__" else f"pkg.{name}"] = tmp_path / "pkg" / f"{name}.py"
    imports, dynamic = scan(modules)
    assert {(i.source, i.target, i.at_import) for i in imports} == {
        ("pkg.a", "pkg.b", True),
        ("pkg.b", "pkg.c", False),
        ("pkg.c", "pkg.a", False),
        ("pkg.c", "pkg.d", False),
        ("pkg.d", "pkg.a", False),
    }
    assert dynamic == ["pkg.c:6"]
    assert cycles(imports) == ["cycle: pkg.a -> pkg.b -> pkg.c -> pkg.a (with pkg.d)"]
    assert layer_violations([Import("accelrl.x", "slurm.launch", 1, False)]) == [
        "accelrl.x imports slurm.launch"
    ]


def test_importing_a_learner_loads_no_env_backend():
    """The learners import ``ConfigError`` from ``accelrl.errors``, not ``accelrl.validate``,
    which imports every env backend."""
    imports, _ = repo_imports()
    at_import: dict[str, set[str]] = {}
    for imp in imports:
        if imp.at_import:
            at_import.setdefault(imp.source, set()).add(imp.target)
    for learner in ("accelrl.algos.ppo", "accelrl.algos.a2c", "accelrl.algos.dqn"):
        seen, todo = set(), [learner]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            parts = name.split(".")
            todo += [".".join(parts[:end]) for end in range(1, len(parts))]  # its packages
            todo += sorted(at_import.get(name, ()))
        loaded = sorted(m for m in seen if m.startswith("accelrl.envs") or m == "accelrl.validate")
        assert not loaded, f"importing {learner} imports {loaded}"

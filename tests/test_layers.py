"""The project's import graph, read from the source with ``ast``: layers only import down,
and nothing imports in a cycle.

Every import counts: at module level, inside functions (lazy), under ``if TYPE_CHECKING``;
relative imports are resolved. A string handed to ``importlib.import_module`` is not an
import edge (the registry's entry points are data). The rules:

* **Layers, one way down.** Each top-level package has a rank; a module may import its own
  package's rank or lower ones only: ``schemas`` (imports nothing of ours) → ``llm``
  (``schemas`` only) → ``sandboxes`` → ``pipelines`` → ``collectors`` → ``formats`` → ``training`` →
  ``simulate`` → ``serve`` → the CLI (``trajforge.py``).
* **No module cycles**, anywhere in the project.
* **No package cycles**, each package and subpackage a node (``pipelines.release``,
  ``collectors.web``). A package and its own subpackages are not compared with each other:
  the parent holds both what its subpackages share (``collectors.actions``) and what gathers
  them (``collectors.registry``), so both directions are the design; the module rule above
  still catches a real cycle between them.

On failure the message lists each offending import with its file and line.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Rank of each top-level package (the CLI module included); an import may go to an equal or
#: lower rank only. llm sits just above schemas so that schemas imports nothing of ours.
LAYERS: dict[str, float] = {
    "schemas": 0,
    "llm": 0.5,
    "sandboxes": 1,
    "pipelines": 2,
    "collectors": 3,
    "formats": 3.5,
    "training": 4,
    "simulate": 5,
    "serve": 5.5,
    "trajforge": 6,
}


@dataclass(frozen=True)
class Edge:
    importer: str  # module name
    imported: str  # module name (the longest project module the import names)
    where: str  # file:line of the import statement

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} ({self.where})"


@dataclass(frozen=True)
class Module:
    path: Path
    is_package: bool  # an __init__.py

    def package(self, name: str) -> str:
        """The package a module belongs to: itself for an __init__, else its parent (a
        top-level module such as the CLI is its own node)."""
        return name if self.is_package else (name.rpartition(".")[0] or name)


def project_modules(root: Path, tops: list[str]) -> dict[str, Module]:
    """Every module of the named top-level packages (or top-level ``NAME.py`` modules)."""
    modules: dict[str, Module] = {}
    for top in tops:
        if (root / f"{top}.py").is_file():
            modules[top] = Module(root / f"{top}.py", False)
            continue
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            modules[".".join(parts[:-1] if is_package else parts)] = Module(path, is_package)
    return modules


def import_edges(root: Path, tops: list[str]) -> tuple[dict[str, Module], list[Edge]]:
    """The project's modules and every import between two of them."""
    modules = project_modules(root, tops)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges = []
    for name, module in modules.items():
        here = name.split(".") if module.is_package else name.split(".")[:-1]
        rel = module.path.relative_to(root)
        for node in ast.walk(ast.parse(module.path.read_text(), str(module.path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # from . import x, from ..a import b
                    source = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # `from pkg import sub` imports the submodule when there is one, else pkg itself
                targets = [f"{source}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                imported = resolve(target)
                if imported and imported != name:
                    edges.append(Edge(name, imported, f"{rel}:{node.lineno}"))
    return modules, edges


def upward(edges: list[Edge], layers: dict[str, float]) -> list[Edge]:
    """Imports from a lower layer into a higher one."""

    def rank(module: str) -> float:
        return layers[module.split(".")[0]]

    return [e for e in edges if rank(e.imported) > rank(e.importer)]


def cycles(nodes_edges: list[tuple[str, str, Edge]]) -> list[list[Edge]]:
    """The strongly connected components with more than one node (Tarjan), each as the
    edges between its members: every import that takes part in a cycle."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b, _ in nodes_edges:
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(list(graph)):
        if v not in index:
            visit(v)
    return [sorted({e for a, b, e in nodes_edges if a in c and b in c}, key=str) for c in components]


def module_cycles(edges: list[Edge]) -> list[list[Edge]]:
    return cycles([(e.importer, e.imported, e) for e in edges])


def package_cycles(modules: dict[str, Module], edges: list[Edge]) -> list[list[Edge]]:
    def related(p: str, q: str) -> bool:  # one is the other or inside it
        return p == q or p.startswith(q + ".") or q.startswith(p + ".")

    pairs = []
    for e in edges:
        p, q = modules[e.importer].package(e.importer), modules[e.imported].package(e.imported)
        if not related(p, q):
            pairs.append((p, q, e))
    return cycles(pairs)


def report(title: str, groups: list[list[Edge]]) -> str:
    return title + "\n" + "\n".join("  cycle:\n" + "\n".join(f"    {e}" for e in g) for g in groups)


# the project


def _project() -> tuple[dict[str, Module], list[Edge]]:
    return import_edges(ROOT, list(LAYERS))


def test_layers_import_only_downward():
    _modules, edges = _project()
    bad = upward(edges, LAYERS)
    assert not bad, "imports into a higher layer:\n" + "\n".join(f"  {e}" for e in bad)


def test_no_module_cycles():
    _modules, edges = _project()
    found = module_cycles(edges)
    assert not found, report("modules that import each other:", found)


def test_no_package_cycles():
    modules, edges = _project()
    found = package_cycles(modules, edges)
    assert not found, report("packages that import each other:", found)


def test_every_project_package_has_a_layer():
    tops = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "benchmarks", "examples", "scripts", "deploy"}
    assert tops <= set(LAYERS), f"packages without a layer: {sorted(tops - set(LAYERS))}"


# the checker itself, on a planted tree: it must see what it is meant to refuse


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


PLANTED = {
    "low/__init__.py": "",
    "low/a.py": "from low import b\n",  # a -> b -> a: a module cycle
    "low/b.py": "def f():\n    from .a import f  # lazy, relative\n",
    "low/c.py": "import importlib\nimportlib.import_module('high.x')  # a string: not an edge\n",
    "low/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from high.x import X\n",  # upward
    "low/sub/__init__.py": "from low.a import f\n",  # a child using its parent: allowed
    "low/other/__init__.py": "from low.sub import g\n",  # other -> sub
    "low/sub/g.py": "",
    "low/sub/k.py": "from ..other import h\n",  # sub -> other: a package cycle, not a module one
    "low/other/h.py": "",
    "high/__init__.py": "",
    "high/x.py": "import low.c\n",
    "cli.py": "import high.x\n",
}
PLANTED_LAYERS = {"low": 0, "high": 1, "cli": 2}


def test_checker_finds_a_planted_upward_import(tmp_path):
    _write(tmp_path, PLANTED)
    _modules, edges = import_edges(tmp_path, list(PLANTED_LAYERS))
    assert [(e.importer, e.imported) for e in upward(edges, PLANTED_LAYERS)] == [("low.d", "high.x")]
    assert {(e.importer, e.imported) for e in edges} >= {("high.x", "low.c"), ("cli", "high.x")}


def test_checker_finds_planted_cycles(tmp_path):
    _write(tmp_path, PLANTED)
    modules, edges = import_edges(tmp_path, list(PLANTED_LAYERS))
    found = module_cycles(edges)
    assert [[(e.importer, e.imported) for e in g] for g in found] == [[("low.a", "low.b"), ("low.b", "low.a")]]
    assert "low/b.py:2" in report("", found)
    packages = [[(e.importer, e.imported) for e in g] for g in package_cycles(modules, edges)]
    assert sorted(packages) == [
        [("high.x", "low.c"), ("low.d", "high.x")],  # the upward import closes a loop too
        [("low.other", "low.sub.g"), ("low.sub.k", "low.other.h")],
    ]

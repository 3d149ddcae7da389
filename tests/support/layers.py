"""The layer order of psgd's modules, written once, and the AST checker that keeps it
(tests/unit/api/test_layers.py).

A module may import its own layer and the layers below it, never one above;
servers and workers share a layer and do not import each other. Every import
counts, also one inside a function: deferring an import hides an upward
dependency, it does not remove it. Files directly in psgd/ (the lazy public
API, psgd/__init__.py) sit above every layer.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable, Optional

from support.source_tree import parsed, text

ROOT = Path(__file__).resolve().parents[2]

# Bottom to top; one entry may hold peers that must not import each other.
LAYERS: list[tuple[str, ...]] = [
    ("config",),
    ("runtime",),   # safe files, events, role context: below everything that writes a run's files
    ("core",),
    ("tasks",),
    ("wire",),
    ("servers", "workers"),
    ("sim",),
    ("orchestrate",),
    ("bench",),
    ("cli",),
]
TOP = "psgd"  # psgd/__init__.py
RANK = {name: level for level, names in enumerate(LAYERS) for name in names} | {TOP: len(LAYERS)}


def module_name(path: Path, root: Path = ROOT) -> str:
    """psgd.x.y for psgd/x/y.py; servers/ and workers/ install as psgd.servers, psgd.workers."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[0] in ("servers", "workers"):
        parts.insert(0, "psgd")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> Optional[str]:
    """The layer of a psgd module name, None outside psgd."""
    parts = module.split(".")
    if parts[0] != "psgd":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in RANK else TOP  # `from psgd import launch`: the top


def imported_modules(source: str, module: str, is_package: bool) -> Iterable[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`, at any depth."""
    for node in ast.walk(parsed(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + is_package]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # `from pkg import submodule` depends on the submodule
                yield node.lineno, f"{target}.{alias.name}"


def upward_imports(source: str, module: str, is_package: bool = False) -> list[str]:
    """Each import in `source` (the text of `module`) that reaches a layer it may not."""
    here = layer_of(module)
    wrong = []
    for line, target in imported_modules(source, module, is_package):
        there = layer_of(target)
        if here is None or there is None or there == here:
            continue
        if RANK[there] >= RANK[here]:  # above, or a peer of the same level
            wrong.append(f"{module}:{line} imports {target} ({here} may not import {there})")
    return wrong


def sources(root: Path = ROOT) -> list[Path]:
    return sorted(p for folder in ("psgd", "servers", "workers") for p in (root / folder).rglob("*.py"))


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the psgd modules it imports (a name imported from a package counts
    as the package unless it is a submodule)."""
    files = {module_name(p, root): p for p in sources(root)}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        edges = set()
        for _, target in imported_modules(text(path), module, path.name == "__init__.py"):
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != module:
                edges.add(target)
        graph[module] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph` (strongly connected parts of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graph is a few hundred modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found

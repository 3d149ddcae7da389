"""The library's source files, each read and parsed once per test process: the
static contract tests (layers, the zmq boundary, event names, error codes, mode
strings, hand lists) all walk the same few hundred files, and parsing them is
most of their time. The trees are shared: a test reads them, never changes them."""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ("psgd", "servers", "workers")


@lru_cache(maxsize=None)
def library_files(root: Path = ROOT) -> tuple[Path, ...]:
    return tuple(sorted(p for folder in LIBRARY for p in (root / folder).rglob("*.py")))


@lru_cache(maxsize=None)
def text(path: Path) -> str:
    return path.read_text()


@lru_cache(maxsize=None)
def parsed(source: str) -> ast.Module:
    return ast.parse(source)


def tree(path: Path) -> ast.Module:
    return parsed(text(path))

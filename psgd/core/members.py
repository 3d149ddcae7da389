"""Registries with one module per member: import every module of a package once
and refuse one that adds no member, so a new codec, update rule or local method
is one new file that is found without being listed anywhere."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Iterable

__all__ = ["import_members"]


def import_members(package: str, not_members: Iterable[str], members: Callable[[], Iterable[type]]) -> None:
    """Import each module of `package` except `not_members` and those starting with
    "_"; raise TypeError naming a module that defines none of `members()`."""
    skip = set(not_members)
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if info.name in skip or info.name.startswith("_"):
            continue
        name = f"{package}.{info.name}"
        importlib.import_module(name)
        if not any(m.__module__ == name for m in members()):
            raise TypeError(f"{name} registers no member (every module there is one member)")

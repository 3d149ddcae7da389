"""Registries with one module per member: import every module of a package once
and refuse one that adds no member, so a new codec, update rule or local method
is one new file that is found without being listed anywhere."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Iterable, Mapping

__all__ = ["import_members", "check_words"]


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


def check_words(key: str, words: Iterable[str], members: Mapping[str, type], kind: str, declared_in: str) -> None:
    """Raise TypeError unless the config's `words` for `key` and the words that `members`
    (word -> member class) answer to are the same set: a word with no member, or a member
    no word selects (its word belongs in `declared_in`), is named."""
    words = set(words)
    no_member = sorted(words - set(members))
    if no_member:
        raise TypeError(f"{key} values with no {kind}: {', '.join(no_member)}")
    unselectable = sorted(cls.__name__ for word, cls in members.items() if word not in words)
    if unselectable:
        raise TypeError(f"{kind}s that {key} cannot select (add their word to {declared_in}): "
                        f"{', '.join(unselectable)}")

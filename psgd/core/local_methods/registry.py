"""Every local-update method, found by importing each member module of this
package once (psgd.core.members), and checked: every `local.method` word has
exactly one method and every method a word, or the import fails naming it."""
from __future__ import annotations

import typing

from psgd.config import Config
from psgd.config.local_updates import LocalMethodWord
from psgd.core.local_methods.base import LOCAL_METHODS, LocalMethod
from psgd.core.members import check_words, import_members

__all__ = ["LOCAL_METHODS", "check_local_methods", "method_for"]


def check_local_methods(methods: dict[str, type[LocalMethod]], words: tuple[str, ...]) -> None:
    check_words("local.method", words, methods, "local method", "LocalMethodWord in psgd/config/local_updates.py")


def method_for(cfg: Config) -> LocalMethod:
    """The method `local.method` names (local updates on): a new object, whose per-worker
    state (if any) is the caller's."""
    if cfg.local.method is None:
        raise ValueError("local updates are off (local.steps 0): no local method")
    return LOCAL_METHODS[cfg.local.method](cfg)


import_members("psgd.core.local_methods", ("base", "registry", "optimizers", "pace"), LOCAL_METHODS.values)
check_local_methods(LOCAL_METHODS, typing.get_args(LocalMethodWord))

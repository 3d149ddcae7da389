"""Every update rule, found by importing each member module of this package once
(psgd.core.members), and checked against the config's `optimizer.name` values:
a rule the config cannot name, or a name with no rule, fails at import.

The config is the lowest layer and cannot import core, so it spells the names
users may write (`OptimizerConfig.name`); the server's rule, the worker's inner
torch optimizer and the mapping from a user's torch optimizer come from here."""
from __future__ import annotations

import typing

from psgd.config import OptimizerConfig
from psgd.core.members import check_words, import_members
from psgd.core.rules.base import RULES, Rule

__all__ = ["RULES", "rule_named", "check_rules"]


def check_rules(rules: dict[str, type[Rule]], names: tuple[str, ...]) -> None:
    """Raise unless the config's names and the rules' names are the same set."""
    check_words("optimizer.name", names, rules, "update rule", "psgd.config.schema.OptimizerConfig.name")


def rule_named(name: str) -> type[Rule]:
    try:
        return RULES[name]
    except KeyError:
        raise ValueError(f"optimizer.name {name!r} has no update rule (known: {', '.join(sorted(RULES))})") from None


import_members("psgd.core.rules", ("base", "registry", "updater"), RULES.values)
check_rules(RULES, typing.get_args(typing.get_type_hints(OptimizerConfig)["name"]))

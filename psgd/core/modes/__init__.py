"""The consistency modes: one file per mode, each one ModeRule class (base.py has
the contract). Every module here is imported, so a new file is a new mode;
importing this package fails while a parameter-server `Mode` has no class."""
from __future__ import annotations

import importlib
import pkgutil

from psgd.config.modes import Mode
from psgd.core.modes.base import RULES, Counted, ModeRule, PushAction, Update, rule_class, uncovered

__all__ = ["ModeRule", "PushAction", "Counted", "Update", "RULES", "rule_class", "uncovered"]

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

if uncovered(Mode):
    raise ImportError(f"consistency modes without a rule class in psgd/core/modes/: {', '.join(uncovered(Mode))}")

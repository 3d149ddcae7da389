"""The consistency modes: one module per mode, each one ModeBehaviour class (base.py has
the contract). Every module here is imported (psgd.core.members), so a new file is
a new mode; importing this package fails while a parameter-server `Mode` has no class."""
from __future__ import annotations

from psgd.config.modes import Mode
from psgd.core.members import import_members
from psgd.core.modes.base import BEHAVIOURS, Counted, ModeBehaviour, PushAction, Update, behaviour_class, uncovered

__all__ = ["ModeBehaviour", "PushAction", "Counted", "Update", "BEHAVIOURS", "behaviour_class", "uncovered"]

import_members(__name__, ["base", "bsp_rounds", "policy", "quorum"], BEHAVIOURS.values)
if uncovered(Mode):
    raise ImportError(f"consistency modes without a rule class in psgd/core/modes/: {', '.join(uncovered(Mode))}")

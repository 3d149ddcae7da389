"""Every local-update method, found by importing each member module of this
package once (psgd.core.members), and checked: exactly one method selects each
valid combination of the `local:` flags, or the import fails naming the combination."""
from __future__ import annotations

import itertools

from psgd.config.local_updates import LocalConfig
from psgd.core.local_methods.base import LOCAL_METHODS, LocalMethod
from psgd.core.members import import_members

__all__ = ["LOCAL_METHODS", "check_local_methods", "method_for"]


def _settings() -> list[LocalConfig]:
    """One `local:` section per combination of the flags that choose a method."""
    out = []
    for momentum, nesterov, delayed, dynamic, fragments in itertools.product(
            (0.0, 0.9), (False, True), (False, True), (False, True), (0, 2)):
        if (momentum == 0 and (nesterov or delayed)) or (dynamic and fragments):
            continue  # LocalConfig refuses these
        out.append(LocalConfig(steps=4, outer_momentum=momentum, outer_nesterov=nesterov,
                               delayed_nesterov=delayed, dynamic=dynamic, fragments=fragments))
    return out


def check_local_methods(methods: dict[str, type[LocalMethod]]) -> None:
    for local in _settings():
        chosen = [m.__name__ for m in methods.values() if m.selects(local)]
        if len(chosen) != 1:
            raise TypeError(f"{len(chosen)} local methods ({', '.join(chosen) or 'none'}) select {local}: "
                            "exactly one must")


def method_for(local: LocalConfig, workers: int) -> LocalMethod:
    """The method a `local:` section (steps > 0) selects, for `workers` workers."""
    return next(m for m in LOCAL_METHODS.values() if m.selects(local))(local, workers)


import_members("psgd.core.local_methods", ("base", "registry"), LOCAL_METHODS.values)
check_local_methods(LOCAL_METHODS)

"""A local method built from a `local:` section alone (the tests of one method's hooks)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Optional

from psgd.config import WireConfig
from psgd.config.local_updates import LocalConfig
from psgd.core.local_methods import LocalMethod, method_for


def method_of(local: LocalConfig, workers: int, wire: Optional[WireConfig] = None) -> LocalMethod:
    """`local.method`'s object for `workers` workers: what method_for(cfg) builds from a
    run's config with these sections, without the run's other cross-checks."""
    return method_for(SimpleNamespace(local=local, cluster=SimpleNamespace(workers=workers), wire=wire or WireConfig()))

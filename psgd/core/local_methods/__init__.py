"""Local-update methods: one module per method (local SGD / GEO-SGD, DiLoCo,
async DiLoCo with Delayed Nesterov, DyLU, eager DiLoCo, streaming DiLoCo, SparseLoCo), each one
class with its `local.method` word and its hooks (psgd.core.local_methods.base.LocalMethod) in one
table checked at import. A new method is a new module here and its word in LocalMethodWord."""
from psgd.core.local_methods.base import LOCAL_METHODS, Codecs, LocalMethod, Schedule, local_method
from psgd.core.local_methods.registry import method_for

__all__ = ["LOCAL_METHODS", "Codecs", "LocalMethod", "Schedule", "local_method", "method_for"]

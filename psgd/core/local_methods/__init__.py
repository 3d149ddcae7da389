"""Local-update methods: one module per method (local SGD / GEO-SGD, DiLoCo,
async DiLoCo with Delayed Nesterov, DyLU, streaming DiLoCo), each one class with its hooks
(psgd.core.local_methods.base.LocalMethod) in one table checked at import. A new
method is a new module here."""
from psgd.core.local_methods.base import LOCAL_METHODS, LocalMethod, local_method
from psgd.core.local_methods.registry import method_for

__all__ = ["LOCAL_METHODS", "LocalMethod", "local_method", "method_for"]

"""Orchestration: the role table, the local launcher, cluster runs, discovery, collect, summary.

`psgd.launch(cfg, model=..., dataset=...)` is the public entry point
(launch/api.py). Python binds the attribute `psgd.launch` to this package as
soon as any module in it is imported, so the package itself is callable and
forwards to that function: `psgd.launch(...)` works whatever was imported first.
"""
import sys
import types


class _CallablePackage(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from psgd.launch.api import launch
        return launch(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage

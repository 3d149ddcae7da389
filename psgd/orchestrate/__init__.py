"""Orchestration: the role table, the local launcher, cluster runs, discovery, collect, summary.

The public entry point `psgd.launch(cfg, model=..., dataset=...)` is `psgd.orchestrate.api.launch`.
The package is not named `launch` so that importing it never shadows that function.
"""

"""Orchestration: the role table, the launchers (launchers/: one module per `--on` name, each
keeping the run() -> LaunchResult contract), the one launch recipe (job.py), cluster runs,
discovery, collect, summary.

The public entry point `psgd.launch(cfg, model=..., dataset=...)` is `psgd.orchestrate.api.launch`.
The package is not named `launch` so that importing it never shadows that function.
"""

"""The line every convergence report states about its target's metric: how
finely it resolves (psgd.core.target.metric_resolution) on this config's
held-out split."""
from __future__ import annotations

from typing import Optional

from psgd.config import Config
from psgd.core.target import metric_resolution, run_target

__all__ = ["held_out_examples", "target_resolution_line"]


def held_out_examples(cfg: Config) -> int:
    from psgd.tasks import load_task
    task = load_task(cfg, None, splits=("test",))
    if task.test_set is not None:
        return len(task.test_set)
    return 0 if task.y_test is None else int(task.y_test.shape[0])


def target_resolution_line(cfg: Config, examples: Optional[int] = None) -> str:
    """One sentence; `examples` when the caller knows the held-out size (else the split is built here)."""
    target = run_target(cfg.train)
    if target is None:
        return "Target resolution: the config sets no target."
    metric, value, _ = target
    n = held_out_examples(cfg) if examples is None else examples
    if n < 1:
        return "Target resolution: the task has no held-out split."
    return metric_resolution(metric, n, value).text()

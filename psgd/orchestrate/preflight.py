"""Pre-flight: build the user's task once in the launching process, before any spawn.

Imports the model and dataset, checks the dataset contract, builds the
parameter layout and runs one forward/backward pass on one training batch.
Every mistake in the user's code (a typo in an import path, numpy arrays,
mismatched lengths, float labels for a classifier, a forward that raises)
then fails here, within seconds, with the user's own file and line, instead
of in a child process that supervision would restart.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psgd.config import Config
from psgd.runtime.user_errors import StartupError, user_code

__all__ = ["Preflight", "preflight", "StartupError", "write_task_cache"]


@dataclass(frozen=True)
class Preflight:
    seconds: float          # how long the check took
    train_examples: int
    test_examples: int
    parameters: int         # trainable parameters of the model
    first_loss: float       # loss of the initial model on the first batch
    task: Any = field(default=None, repr=False, compare=False)  # the built Task, for write_task_cache


def preflight(cfg: Config) -> Preflight:
    """Raises StartupError with a message naming the problem (and the user's frame)."""
    import torch  # here: the launcher imports this module before it needs torch

    from psgd.core.sharding import layout_for_module
    from psgd.tasks import build_model, load_task

    t0 = time.perf_counter()
    torch.set_num_threads(cfg.run.threads)  # before any tensor code: children may be forked from here
    with user_code(f"dataset {cfg.task.dataset!r}"):
        task = load_task(cfg)
    with user_code(f"model {cfg.task.model!r}"):
        model = build_model(cfg, task)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise StartupError(f"model {cfg.task.model!r} has no trainable parameters")
    if cfg.consistency.mode.on_servers:
        with user_code(f"the parameter layout of model {cfg.task.model!r}"):
            layout_for_module(model, cfg.cluster.num_servers)
    from psgd.tasks.loaders import eval_batches
    train = task.train_data()
    n = min(cfg.task.batch_size, len(train))
    with user_code(f"reading a batch of {n} training examples"):
        x, y = next(eval_batches(train, n, limit=n))
    with user_code(f"one forward/backward of model {cfg.task.model!r} on a batch of {n} training examples"):
        loss = task.loss(model(task.inputs(x)), task.targets(y))
        if loss.dim() != 0:
            raise ValueError(f"the loss must be a scalar, got shape {tuple(loss.shape)}")
        loss.backward()
    value = float(loss.detach())
    if not math.isfinite(value):
        raise StartupError(f"model {cfg.task.model!r}: the loss of the initial model on the first batch is {value}")
    with torch.no_grad():
        model.zero_grad(set_to_none=True)
    return Preflight(round(time.perf_counter() - t0, 3), len(train), len(task.test_data()),
                     sum(p.numel() for p in params), value, task)


def write_task_cache(run_dir: Path, checked: Preflight) -> None:
    """Keep the task pre-flight built in the run directory: the children read
    their split from it instead of importing and calling the dataset again."""
    from psgd.tasks.cache import save_task_cache
    t = checked.task
    if t.lazy:
        return  # a Dataset read on access stays where it is: each child opens it itself
    save_task_cache(run_dir, (t.x_train, t.y_train), (t.x_test, t.y_test), t.shape)

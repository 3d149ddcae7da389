"""`optimizer.lr_scaling: linear` (Goyal et al. 2017): a synchronous update
(bsp, all-reduce) averages the gradients of W - b workers, i.e. one step on a
batch (W - b) times larger, so its learning rate is multiplied by W - b. An
SSP/ASP update applies one worker's gradient and keeps the configured rate.
With plain SGD, BSP at lr x W is then exactly single-process SGD with lr x W
on the W x B batch, and every mode moves the parameters by the same amount
per example processed.
"""
from __future__ import annotations

import dataclasses

__all__ = ["lr_factor", "scaled_optimizer"]


def lr_factor(cfg) -> int:
    """What the configured learning rate is multiplied by in this run."""
    if getattr(cfg.optimizer, "lr_scaling", "none") != "linear":
        return 1
    if cfg.consistency.mode.synchronous:
        return cfg.cluster.workers - cfg.consistency.backup_workers
    return 1


def scaled_optimizer(cfg):
    """cfg.optimizer with the scaled learning rate (the same object if unscaled)."""
    k = lr_factor(cfg)
    return cfg.optimizer if k == 1 else dataclasses.replace(cfg.optimizer, lr=cfg.optimizer.lr * k)

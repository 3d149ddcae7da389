"""What a run's checkpoints are shaped by, recorded at its start (state_shape.json,
beside config.yaml: a Ray run's checkpoints may stay on other nodes) and checked
before a `--resume` starts anything: a changed key would load state made for
something else (KeyError 'exp_avg', a layout mismatch, another quorum)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from psgd.config import Config

__all__ = ["STATE_SHAPE_FILE", "ResumeRefused", "state_shape", "check_resumable", "check_fresh"]

STATE_SHAPE_FILE = "state_shape.json"
# What a launched run leaves in its directory: a new run there would continue its
# checkpoints (its shards resume from them) and add to its records.
RUN_FILES = ("checkpoints", "metrics.jsonl", "summary.json", STATE_SHAPE_FILE)


class ResumeRefused(RuntimeError):
    """The run's config no longer matches the state its checkpoints hold."""


def state_shape(cfg: Config) -> dict[str, Any]:
    """The state-shaping keys of `cfg`, as JSON values (what a later --resume must still match)."""
    import torch

    from psgd.core.local_methods.optimizers import server_optimizer
    from psgd.core.rules.updater import ShardUpdater
    shape = {"task.model": cfg.task.model, "task.dataset": cfg.task.dataset,
             # the layout (a model's width) and what its outputs mean follow from these
             "task.model_args": cfg.task.model_args, "task.dataset_args": cfg.task.dataset_args,
             "task.objective": cfg.task.objective,
             "cluster.servers": cfg.cluster.num_servers, "cluster.workers": cfg.cluster.workers,
             "consistency.mode": cfg.consistency.mode.value,
             # the update rule's state tensors: what optimizer.name/momentum (or local.*) decide
             "optimizer state": sorted(ShardUpdater(server_optimizer(cfg), torch.zeros(1)).state)}
    return json.loads(json.dumps(shape, default=str))  # compared with what was read back from JSON


def check_resumable(cfg: Config, run_dir: Path) -> None:
    """Raise ResumeRefused, in one line naming the keys, when `cfg` no longer matches the
    state the checkpoints of `run_dir` hold. Runs started before the record was kept,
    and keys a run's record predates, are not checked."""
    path = Path(run_dir) / STATE_SHAPE_FILE
    try:
        then = json.loads(path.read_text())
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:
        raise ResumeRefused(f"cannot read {path}: {exc}") from None
    now = state_shape(cfg)
    changed = [diff for key in now if key in then for diff in _differences(key, then[key], now[key])]
    if changed:
        raise ResumeRefused(f"cannot resume {run_dir}: the checkpoints were made with another configuration ("
                            + "; ".join(changed) + "): restore those keys in its config.yaml, or start a new run")


def check_fresh(run_dir: Path) -> None:
    """Raise ResumeRefused when a new run is started in the directory of an earlier one:
    only `--resume` continues a run."""
    run_dir = Path(run_dir)
    found = [name for name in RUN_FILES if (run_dir / name).exists() or (run_dir / name).is_symlink()]
    if found:
        raise ResumeRefused(f"{run_dir} already holds a run ({', '.join(found)}): continue it with "
                            f"`psgd launch --resume {run_dir}`, or give a new --out")


def _differences(key: str, then: Any, now: Any) -> list[str]:
    """`key was X, is Y`, per argument for the *_args dicts (so the line names the width, not the dict)."""
    if then == now:
        return []
    if isinstance(then, dict) and isinstance(now, dict):
        unset = "unset"
        return [f"{key}.{k} was {then.get(k, unset)!r}, is {now.get(k, unset)!r}"
                for k in sorted({*then, *now}) if then.get(k, unset) != now.get(k, unset)]
    return [f"{key} was {then!r}, is {now!r}"]

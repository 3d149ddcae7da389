"""`psgd.launch`: a whole local job from Python (a script or a notebook).

    summary = psgd.launch("job.yaml", model=MyNet(), dataset=make_data)
    print(summary.final_test_accuracy, summary.run_dir)

`model` is an nn.Module (its current parameters are the starting point) or a
callable returning one; `dataset` is a callable returning (train, test) or
the (train, test) pair itself. Both travel to the child processes as files in
the run directory (see psgd.tasks.objects), so classes and functions defined
in `__main__` or a notebook work. The task is checked in this process first
(psgd.orchestrate.preflight), so a mistake raises here, before anything starts.
"""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from psgd.config import ConfigLike, load_config

__all__ = ["launch", "Summary", "LaunchError"]


class LaunchError(RuntimeError):
    """The job started but did not finish cleanly; `run_dir` holds its logs."""

    def __init__(self, reason: str, run_dir: Path, summary: Optional["Summary"] = None):
        super().__init__(f"{reason} (logs in {Path(run_dir) / 'logs'})")
        self.reason, self.run_dir, self.summary = reason, Path(run_dir), summary


class Summary(Mapping[str, Any]):
    """The figures of summary.json, readable as attributes or keys, plus `run_dir`."""

    def __init__(self, figures: Mapping[str, Any], run_dir: Path):
        self._figures = dict(figures)
        self.run_dir = Path(run_dir)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_figures"][name]
        except KeyError:
            raise AttributeError(f"summary has no figure {name!r}") from None

    def __getitem__(self, key: str) -> Any:
        return self._figures[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._figures)

    def __len__(self) -> int:
        return len(self._figures)

    def __repr__(self) -> str:
        keys = ("mode", "final_test_accuracy", "wall_time_s", "total_updates")
        return "Summary(" + ", ".join(f"{k}={self._figures.get(k)!r}" for k in keys) + f", run_dir='{self.run_dir}')"


def launch(cfg: ConfigLike, model: Any = None, dataset: Any = None, *, overrides: Sequence[str] = (),
           out: Optional[str] = None, on_progress: Optional[Callable] = None) -> Summary:
    """Run the job of `cfg` on this machine (servers, workers, evaluator) and wait
    for it. Raises ConfigError or StartupError before anything starts, and
    LaunchError when a process fails for good."""
    from psgd.orchestrate.launcher import Launcher, make_run_dir
    from psgd.orchestrate.preflight import preflight, write_task_cache
    from psgd.runtime.run_lock import RunDirLock, RunDirRefused
    from psgd.tasks.objects import save_object

    config = load_config(cfg, overrides)
    # The caller's process (a notebook, a script with threads and its own torch
    # settings) is no safe thing to fork: its children start fresh instead.
    config = dataclasses.replace(config, run=dataclasses.replace(config.run, start_method="exec"))
    fresh = out is None or not Path(out).exists()
    run_dir = make_run_dir(config, out)
    try:
        lock = RunDirLock(run_dir).acquire()  # before anything is written into the directory
    except RunDirRefused as exc:
        raise LaunchError(str(exc), run_dir) from None
    try:
        task = {}
        if model is not None:
            task["model"] = save_object(model, run_dir / "objects" / "model.pkl")
        if dataset is not None:
            task["dataset"] = save_object(dataset, run_dir / "objects" / "dataset.pkl")
        if task:
            config = dataclasses.replace(config, task=dataclasses.replace(config.task, **task))
        checked = preflight(config)  # reads the objects back, as every child will
    except BaseException:
        lock.release()
        if fresh:
            shutil.rmtree(run_dir, ignore_errors=True)  # nothing ran: leave nothing behind
        raise
    try:
        write_task_cache(run_dir, checked)
        result = Launcher(config, run_dir, on_progress=on_progress, lock=lock).run()
    finally:
        lock.release()
    summary = Summary(result.summary or {}, run_dir)
    if result.code != 0:
        raise LaunchError(result.reason, run_dir, summary)
    return summary

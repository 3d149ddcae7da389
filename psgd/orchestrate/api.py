"""`psgd.launch`: a whole job from Python (a script or a notebook), on the
launcher the config's `cluster.launcher` names (local by default, ray, sim).

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
    """Run the job of `cfg` on the launcher its `cluster.launcher` names (local,
    ray, sim: psgd.orchestrate.launchers) and wait for it. Raises ConfigError,
    LauncherUnavailable or StartupError before anything starts, and LaunchError
    when the run directory cannot be used or a process fails for good."""
    from psgd.orchestrate.job import RunDirUnusable, prepare_job  # on first call: `import psgd` stays light

    config = load_config(cfg, overrides)
    # The caller's process (a notebook, a script with threads and its own torch
    # settings) is no safe thing to fork: its children start fresh instead.
    config = dataclasses.replace(config, run=dataclasses.replace(config.run, start_method="exec"))
    try:
        job = prepare_job(config, out=out, objects={"model": model, "dataset": dataset})
    except RunDirUnusable as exc:
        raise LaunchError(str(exc), exc.run_dir or Path(out or config.run.out_dir)) from None
    result = job.run(on_progress=on_progress)
    summary = Summary(result.summary or {}, job.run_dir)
    if result.code != 0:
        raise LaunchError(result.reason, job.run_dir, summary)
    return summary

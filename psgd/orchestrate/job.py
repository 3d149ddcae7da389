"""The one launch recipe, for `psgd launch` (cli) and `psgd.launch` (api.py).

    job = prepare_job(cfg, out=..., objects={"model": ...})   # nothing runs yet
    result = job.run(on_progress=..., child_main=...)          # -> LaunchResult

prepare_job picks the launcher (launchers/), takes the run directory's lock
before writing into it, checks a resumed run still matches its checkpoints,
saves the caller's model and dataset objects, checks the task here
(preflight) and caches it for the children. Anything that refuses the job is
raised before a process starts, and a run directory this call created is
removed again, so a refused job leaves nothing behind.
"""
from __future__ import annotations

import dataclasses
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from psgd.config import Config, ConfigError, load_config
from psgd.config.task_sources import check_task_sources
from psgd.orchestrate.launchers import LaunchFailed, LaunchResult, launcher_for
from psgd.orchestrate.preflight import preflight, write_task_cache
from psgd.orchestrate.records.resume_check import ResumeRefused, check_fresh, check_resumable
from psgd.orchestrate.roles import CONFIG_FILE
from psgd.runtime.run_lock import RunDirLock, RunDirRefused
from psgd.runtime.safe_io import describe_os_error

__all__ = ["PreparedJob", "RunDirUnusable", "make_run_dir", "prepare_job", "resume_config"]


class RunDirUnusable(RuntimeError):
    """The run directory cannot be made, locked or resumed; nothing was started."""

    def __init__(self, reason: str, run_dir: Optional[Path]):
        super().__init__(reason)
        self.run_dir = run_dir


def resume_config(run_dir: Path) -> Config:
    """The resolved config of a run to resume. Raises LaunchFailed."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise LaunchFailed(f"{run_dir} is not a psgd run directory (no {CONFIG_FILE})")
    return load_config(path)


def make_run_dir(cfg: Config, out: Optional[str]) -> Path:
    """`out`, or a fresh RUN.OUT_DIR/NAME-STAMP[-k]; made if missing."""
    if out:
        path = Path(out)
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = Path(cfg.run.out_dir) / f"{cfg.run.name}-{stamp}"
        k = 1
        while path.exists():
            path = Path(cfg.run.out_dir) / f"{cfg.run.name}-{stamp}-{k}"
            k += 1
    path.mkdir(mode=0o755, parents=True, exist_ok=True)  # never group-writable: see run_lock.check_ownership
    return path


@dataclass
class PreparedJob:
    """A checked job holding its run directory's lock: `run` starts it, once."""
    cfg: Config
    run_dir: Path
    launcher: type
    lock: RunDirLock
    resume: bool

    def run(self, on_progress: Optional[Callable] = None,
            child_main: Optional[Callable[[list[str]], int]] = None) -> LaunchResult:
        try:
            launcher = self.launcher(self.cfg, self.run_dir, on_progress=on_progress, resume=self.resume,
                                     child_main=child_main, lock=self.lock)
            return launcher.run()
        finally:
            self.lock.release()


def prepare_job(cfg: Config, *, out: Optional[str] = None, resume: Optional[Path] = None,
                objects: Optional[Mapping[str, Any]] = None) -> PreparedJob:
    """`resume`: the run directory of a stopped run (cfg is its own config.yaml);
    otherwise `out` or a fresh directory under run.out_dir. `objects`: task keys
    ("model", "dataset") given as Python objects, saved into the run directory.
    Raises ConfigError, LauncherUnavailable, StartupError (the user's model or
    data) or RunDirUnusable, each before anything starts."""
    # First, before torch or a launcher is imported: a model or dataset that cannot be found fails in a second.
    check_task_sources(cfg, given=[key for key, obj in (objects or {}).items() if obj is not None])
    launcher = launcher_for(cfg)
    refuse = getattr(launcher, "check", None)  # optional: values this launcher refuses (ConfigError), checked first
    if refuse is not None:
        refuse(cfg)
    if resume is not None and not launcher.resumable:
        raise ConfigError("cluster.launcher", f"a {cfg.cluster.launcher} run cannot be resumed: launch it again")
    fresh = resume is None and (out is None or not Path(out).exists())
    run_dir: Optional[Path] = None
    lock: Optional[RunDirLock] = None
    try:
        try:
            run_dir = Path(resume) if resume is not None else make_run_dir(cfg, out)
            lock = RunDirLock(run_dir).acquire()  # before anything is written into the directory
            if resume is not None:
                check_resumable(cfg, run_dir)
            else:
                check_fresh(run_dir)  # only a resume continues an earlier run's checkpoints
            cfg = _with_objects(cfg, run_dir, objects or {})
        except OSError as exc:
            raise RunDirUnusable(str(describe_os_error(exc, run_dir or out)), run_dir) from None
        except (RunDirRefused, LaunchFailed, ResumeRefused) as exc:
            raise RunDirUnusable(str(exc), run_dir) from None
        checked = preflight(cfg)  # reads the objects back, as every child will
        try:
            write_task_cache(run_dir, checked)
        except OSError as exc:
            raise RunDirUnusable(str(describe_os_error(exc, run_dir)), run_dir) from None
    except BaseException:
        if lock is not None:
            lock.release()
        if fresh and run_dir is not None:
            shutil.rmtree(run_dir, ignore_errors=True)  # nothing ran: leave nothing behind
        raise
    return PreparedJob(cfg, run_dir, launcher, lock, resume is not None)


def _with_objects(cfg: Config, run_dir: Path, objects: Mapping[str, Any]) -> Config:
    from psgd.tasks.objects import save_object  # here: psgd.tasks imports torch, which a refused job never needs
    task = {key: save_object(obj, run_dir / "objects" / f"{key}.pkl") for key, obj in objects.items()
            if obj is not None}
    return dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, **task)) if task else cfg

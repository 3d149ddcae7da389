"""`psgd run CONFIG` (or `python -m psgd.cli run CONFIG`): one process of a job
started by a cluster launcher (`srun`, `torchrun`, a Kubeflow PyTorchJob, torchx).

When the launcher names the role (PSGD_ROLE and PSGD_ROLE_INDEX, as the torchx
component does), the process takes it, and its place in the store barrier
follows from the config. Otherwise it takes its role from its rank: ranks 0..S-1 are server
shards, the next W ranks are workers, and, when `eval.enabled`, the last rank
is the evaluator (so the world size must be S + W + 1, or S + W without an
evaluator). Servers bind an address of their own host and publish it through
the launcher's TCPStore; every rank waits for all of them, then for a start
barrier that fixes one training clock. The role itself runs in this process,
from the role table (roles.py). The job ends in order: workers finish or hit
`train.max_time_s`, the evaluator measures once more and saves model.pt, then
the servers stop; rank 0 (server 0, which also hosts the store unless
torchrun's agent does) leaves last and writes metrics.jsonl and summary.json
from the events it can see (all of them on a shared filesystem).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from psgd.config import Config, ConfigError, dump_config, load_config, modes, override_config
from psgd.orchestrate.cluster.discovery import (
    EVAL_DONE,
    EXITED,
    FAILED,
    TARGET_REACHED,
    WORKERS_DONE,
    JobStore,
    open_store,
)
from psgd.orchestrate.records.collect import collect
from psgd.orchestrate.roles import role_lock, run_role
from psgd.orchestrate.states import RunStatus
from psgd.runtime.cluster_env import ClusterEnv, detect, reachable_address, with_config
from psgd.runtime.event_names import Event
from psgd.runtime.events import EventLog, read_events
from psgd.runtime.files import atomic_write
from psgd.runtime.ports import free_ports
from psgd.runtime.role import START_FILE

__all__ = ["Role", "assign_role", "run_job"]

STORE_TIMEOUT_S = 300.0   # how long a rank waits for the others to reach the store
POLL_S = 0.2              # how often a rank checks the job's counters
FINISH_WAIT_S = 60.0      # how long rank 0 waits for the others to leave


@dataclass(frozen=True)
class Role:
    role: str   # server | worker | evaluator
    index: int  # shard, worker rank, or 0


def assign_role(rank: int, world_size: int, cfg: Config) -> Role:
    """First S ranks servers, the next W workers, the last the evaluator (if enabled).
    Raises ConfigError when the launcher's world size does not match the config."""
    if not cfg.consistency.mode.on_servers:
        raise ConfigError("consistency.mode", "psgd run starts parameter-server jobs; for allreduce run "
                          "torchrun/srun on the all-reduce worker module directly")
    if cfg.cluster.worker_range is not None:
        raise ConfigError("cluster.workers", "psgd run takes its processes from SLURM or torchrun, which start a "
                          "fixed number of tasks: give an int (a range runs with psgd launch, locally or on Ray)")
    servers, workers, evaluators = cfg.cluster.num_servers, cfg.cluster.workers, int(cfg.eval.enabled)
    need = servers + workers + evaluators
    if world_size != need:
        parts = f"{servers} servers + {workers} workers" + (" + 1 evaluator" if evaluators else "")
        raise ConfigError("cluster.workers", f"the launcher started {world_size} processes but this config "
                          f"needs {need} ({parts}): start {need} tasks or change cluster.workers")
    if not 0 <= rank < world_size:
        raise ConfigError("cluster", f"rank {rank} outside world size {world_size}")
    if rank < servers:
        return Role("server", rank)
    if rank < servers + workers:
        return Role("worker", rank - servers)
    return Role("evaluator", 0)


def run_job(config: str, overrides: list[str], run_dir: Optional[str] = None,
            launch: Optional[ClusterEnv] = None) -> int:
    """Run this process's role to the end; returns its exit code. Blocks.
    Raises ClusterEnvError/ConfigError (ValueErrors) for a bad environment or
    config, RoleFailed when a launcher (or this rank's role, twice) holds the run
    directory, and RuntimeError when the store cannot be reached."""
    launch = launch or detect()
    cfg = load_config(config, overrides)
    if launch.role is not None:  # the launcher named the role (torchx component): no rank arithmetic
        if not cfg.consistency.mode.on_servers:
            raise ConfigError("consistency.mode", "psgd run starts parameter-server jobs")
        launch = with_config(launch, cfg.cluster.num_servers, cfg.cluster.workers, cfg.eval.enabled)
        role = Role(launch.role, launch.role_index)
    else:
        role = assign_role(launch.rank, launch.world_size, cfg)
    out = Path(run_dir) if run_dir else Path(cfg.run.out_dir) / f"{cfg.run.name}-{launch.job_id}"
    lock = role_lock(out, role.role, role.index)  # before anything is written into the directory
    try:
        return _run_locked(cfg, launch, role, out, lock.held)
    finally:
        lock.release()


def _run_locked(cfg: Config, launch: ClusterEnv, role: Role, out: Path, locked: bool) -> int:
    (out / "events").mkdir(parents=True, exist_ok=True)
    events = out / "events" / f"{role.role}-{role.index}.jsonl"
    events.unlink(missing_ok=True)  # a reused run directory must not look ready already
    (out / "events" / f"run-{launch.rank}.jsonl").unlink(missing_ok=True)
    # Every rank clears a stale start signal before it can count as ready; the
    # new one is written only after the barrier, i.e. after every rank got here.
    (out / START_FILE).unlink(missing_ok=True)
    job = open_store(launch, STORE_TIMEOUT_S)
    if role.role == modes.Role.SERVER:
        job.publish_server(role.index, _server_address(cfg, role.index, launch))
    resolved = override_config(cfg, ["cluster.servers=" + json.dumps(job.server_addresses(cfg.cluster.num_servers))])
    _record_role(out, launch, role, resolved, locked)
    if launch.rank == 0:
        atomic_write(out / "config.yaml", dump_config(resolved))
    finished = threading.Event()
    watcher = threading.Thread(target=_watch, name="psgd-run-watch", daemon=True,
                               args=(job, role, launch, resolved, events, finished, signal.getsignal(signal.SIGTERM)))
    watcher.start()
    code = 1
    try:
        code = run_role(role.role, role.index, resolved, out, supervised=True)
    finally:
        finished.set()
        watcher.join()
        _leave(job, role, launch, resolved, out, code)
    return code


def _record_role(out: Path, launch: ClusterEnv, role: Role, cfg: Config, locked: bool) -> None:
    """One `role` event per rank (events/run-<rank>.jsonl): which launcher rank
    became which role, where, which servers it found in the store, and whether it
    holds its run-directory lock (False: the filesystem has no flock)."""
    log = EventLog(out / "events" / f"run-{launch.rank}.jsonl", "run", launch.rank)
    log.emit(Event.ROLE, launcher=launch.launcher, rank=launch.rank, world_size=launch.world_size,
             role_name=role.role, role_index=role.index, host=socket.gethostname(), pid=os.getpid(),
             servers=list(cfg.cluster.servers), run_dir_locked=locked)
    log.close()


def _server_address(cfg: Config, shard: int, launch: ClusterEnv) -> str:
    """The configured address if the config lists them, else this host's
    reachable address and a port free on it now."""
    if isinstance(cfg.cluster.servers, list):
        return cfg.cluster.servers[shard]
    host = reachable_address(launch)
    return f"{host}:{free_ports(host, 1)[0]}"


def _watch(job: JobStore, role: Role, launch: ClusterEnv, cfg: Config, events: Path,
           finished: threading.Event, default_handler) -> None:
    """Start the common clock once every rank's role is ready, then ask our own
    role to stop (SIGTERM, which every role turns into its stop event) once the
    job has moved past it or another rank failed."""
    try:
        failed = False
        while not finished.wait(POLL_S) and not _has_event(events, Event.READY) and not failed:
            failed = job.is_set(FAILED)  # e.g. a server could not bind: registering would never end
        if finished.is_set():
            return
        t0 = None if failed else job.start_barrier(launch.world_size)
        if t0 is not None:
            # Every rank writes the same t0, also into a shared directory: the roles wait for it.
            atomic_write(events.parent.parent / START_FILE, json.dumps({"t0": t0}))
        while t0 is not None and not finished.wait(POLL_S) and not _job_past(job, role, cfg, t0, events):
            pass
    except RuntimeError:
        pass  # the store's host is gone: the job cannot end in order any more
    if finished.is_set():
        return
    # Before the role installs its handler, SIGTERM would kill us outright.
    while signal.getsignal(signal.SIGTERM) is default_handler and not finished.wait(POLL_S):
        pass
    if not finished.is_set():
        os.kill(os.getpid(), signal.SIGTERM)


def _has_event(events: Path, name: Event) -> bool:
    """Whether the role has logged event `name`."""
    return any(e.get("event") == name for e in read_events(events))


def _job_past(job: JobStore, role: Role, cfg: Config, t0: float, events: Path) -> bool:
    """True once this role has nothing left to do in the job."""
    if job.is_set(FAILED):
        return True
    if role.role == modes.Role.WORKER:
        return time.time() - t0 > cfg.train.max_time_s or job.is_set(TARGET_REACHED)
    if (role.role == modes.Role.EVALUATOR and cfg.train.stop_at_target and not job.is_set(TARGET_REACHED)
            and _has_event(events, Event.TARGET_REACHED)):
        job.mark(TARGET_REACHED)  # train.stop_at_target: the workers stop, then we measure once more
    workers_done = job.count(WORKERS_DONE) >= cfg.cluster.workers
    if role.role == modes.Role.EVALUATOR:
        return workers_done
    return workers_done and (not cfg.eval.enabled or job.is_set(EVAL_DONE))


def _leave(job: JobStore, role: Role, launch: ClusterEnv, cfg: Config, out: Path, code: int) -> None:
    if code != 0:
        job.mark(FAILED, f"{role.role} {role.index} exited with code {code}")
    if role.role == modes.Role.WORKER:
        job.count(WORKERS_DONE, 1)
    elif role.role == modes.Role.EVALUATOR:
        job.mark(EVAL_DONE, str(code))
    if launch.rank != 0:
        job.count(EXITED, 1)
        return
    # Rank 0 may host the store: stay until every other rank has left it.
    deadline = time.monotonic() + FINISH_WAIT_S
    while job.count(EXITED) < launch.world_size - 1 and time.monotonic() < deadline:
        time.sleep(POLL_S)
    collect(out, cfg, status=RunStatus.FAILED if code != 0 or job.is_set(FAILED) else RunStatus.OK)


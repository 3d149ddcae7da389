"""The supervisor of one run: start every process of it and see the job through.

`psgd launch` runs it with the processes on this machine (LocalProcesses: the local
launcher, launchers/local.py); the Ray launcher hands it Ray actors instead
(ray/launcher.py). Servers, workers and the evaluator are started from the role table
(roles.py) on the run's resolved config.yaml. Each child writes its own events file; the
launcher merges them into metrics.jsonl as they arrive, reports progress
through a callback, starts the common training clock once every child is
ready, and stops everything in order: workers finish (or are stopped at
max_time_s), the evaluator takes its final measurement and saves model.pt,
then the servers stop (stopping.py). A server, worker or evaluator that crashes is
restarted (bounded retries with backoff, see psgd/core/restarts.py); once its retries
are spent the run fails with the crash's cause. `resume=True` continues a
stopped run in its own directory: shards reload their checkpoints, workers
continue from the shards' clocks and the training clock continues.
"""
from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Callable, Optional

from psgd.config import Config, dump_config
from psgd.config.modes import Role
from psgd.core.restarts import PendingRestart, RestartBudget, after_training
from psgd.orchestrate.elastic_launch import ElasticMembership
from psgd.orchestrate.launchers import LaunchFailed, LaunchResult
from psgd.orchestrate.processes import LocalProcesses, ProcessHost, RoleProcess
from psgd.orchestrate.progress import Progress
from psgd.orchestrate.records.resume_check import STATE_SHAPE_FILE, state_shape
from psgd.orchestrate.records.summary import summarize
from psgd.orchestrate.records.summary_file import reserve_summary, write_summary
from psgd.orchestrate.roles import CONFIG_FILE
from psgd.orchestrate.run_log import SUMMARY_FILE, RunLog
from psgd.orchestrate.states import ChildState, RunStatus
from psgd.orchestrate.stopping import (
    STOP_WORKERS_GRACE_S,
    TIME_LIMIT_EXIT_CODE,
    ProcessesKilled,
    kill_frozen,
    kill_stuck_workers,
    stop_in_order,
)
from psgd.runtime.event_names import Event
from psgd.runtime.files import atomic_write
from psgd.runtime.lifeline import PROCESSES_FILE
from psgd.runtime.role import EXIT_NO_RETRY, START_FILE
from psgd.runtime.run_lock import RunDirLock, RunDirRefused
from psgd.runtime.safe_io import WriteFailed, describe_os_error
from psgd.runtime.token import new_run_token

__all__ = ["Supervisor"]

READY_TIMEOUT_S = 180.0


class Supervisor:
    """Runs one training job. `run` blocks until it ends and never raises for a
    child's failure: the result carries the exit code and a one-line reason."""
    resumable = True  # --resume continues a stopped run from the servers' checkpoints

    def __init__(self, cfg: Config, run_dir: Path,
                 on_progress: Optional[Callable[[Progress], None]] = None, resume: bool = False,
                 child_main: Optional[Callable[[list[str]], int]] = None, lock: Optional[RunDirLock] = None,
                 processes: Optional[ProcessHost] = None):
        """`lock`: the run directory's lock, already held by the caller (else run() takes it).
        `processes`: where the roles run (default: children on this machine; `child_main`
        is the `psgd` entry forked children run, run.start_method: fork)."""
        self.cfg = cfg
        self.lock = lock
        self.run_dir = Path(run_dir)
        self.processes: ProcessHost = processes or LocalProcesses(self.run_dir, child_main)
        self.children: list[RoleProcess] = []
        self.on_progress = on_progress or (lambda p: None)
        # metrics.jsonl, its exports and the progress
        self.log = RunLog(self.run_dir, cfg.cluster.workers * cfg.train.steps_per_worker, self.on_progress)
        self.progress = self.log.progress
        self._signal: Optional[int] = None
        self._t0: Optional[float] = None
        self._training_time: Optional[float] = None
        self.resume = resume
        self.budget = RestartBudget(cfg.supervision)
        self._pending: list[PendingRestart] = []
        self._workers_stopping = False  # asked to stop (time limit or target): no worker comes back
        # cluster.workers: {min, max} (None: a fixed count)
        self.elastic = ElasticMembership.of(cfg, self.run_dir, self.processes, self._launcher_event)

    @property
    def events(self) -> list[dict]:
        """Every event of the run so far (a resumed run's earlier ones first)."""
        return self.log.events

    # ---- public -----------------------------------------------------------
    def run(self) -> LaunchResult:
        """Never raises for a child's failure or a filesystem error: a full disk or a
        read-only run directory ends the run with a one-line reason naming the file.
        The run directory is this launcher's alone while it runs (psgd.runtime.run_lock)."""
        try:
            if self.lock is not None:  # the caller took it before writing into the directory
                return self._run()
            lock = RunDirLock(self.run_dir)
            try:
                lock.acquire()
            except (RunDirRefused, OSError) as exc:
                return LaunchResult(1, f"{exc}; nothing was started", self.run_dir, refused=True)
            try:
                return self._run()
            finally:
                lock.release()
        finally:
            self.processes.close()

    def _run(self) -> LaunchResult:
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        code, reason, status = 0, "ok", RunStatus.OK
        if self.resume:
            try:
                self.log.load_previous(self.cfg)
            except LaunchFailed as exc:
                return LaunchResult(1, str(exc), self.run_dir)
        try:
            self.log.open(self.resume)
            reserve_summary(self.run_dir / SUMMARY_FILE)
            self.cfg = self.processes.resolve(self.cfg, self.resume)
            atomic_write(self.run_dir / CONFIG_FILE, dump_config(self.cfg))  # what every child reads
            shape = self.run_dir / STATE_SHAPE_FILE
            if not shape.exists():  # what a later --resume must still match
                atomic_write(shape, json.dumps(state_shape(self.cfg)))
            self.log.start_export(self.cfg)  # metrics.csv (+ TensorBoard)
            new_run_token(self.run_dir)  # SHUTDOWN, live control and rank takeovers need it
            (self.run_dir / START_FILE).unlink(missing_ok=True)  # children wait for this run's start
        except (OSError, WriteFailed, LaunchFailed) as exc:
            err = exc if isinstance(exc, (WriteFailed, LaunchFailed)) else describe_os_error(exc, self.run_dir)
            self.log.close()
            return LaunchResult(1, f"{err}; nothing was started", self.run_dir)
        try:
            self._start_all()
            self._wait_ready()
            self._t0 = self.log.export.t0 = time.time() - self.log.prior_time
            atomic_write(self.run_dir / START_FILE, json.dumps({"t0": self._t0}))
            self.progress.started = True
            self.on_progress(self.progress)
            self._supervise()
        except ProcessesKilled as exc:
            code, reason, status = TIME_LIMIT_EXIT_CODE, str(exc), RunStatus.TIME_LIMIT
        except LaunchFailed as exc:
            code, reason, status = 1, str(exc), RunStatus.FAILED
        except (OSError, WriteFailed) as exc:  # the launcher's own files (processes.json, start.json)
            err = exc if isinstance(exc, WriteFailed) else describe_os_error(exc, self.run_dir)
            code, reason, status = 1, str(err), RunStatus.FAILED
        except _Stopped:
            code = 128 + (self._signal or signal.SIGTERM)
            reason, status = f"stopped by signal {signal.Signals(self._signal).name}", RunStatus.INTERRUPTED
        finally:
            try:
                stuck = self._shutdown(interrupted=status is RunStatus.INTERRUPTED)
            finally:
                for s, h in old.items():
                    signal.signal(s, h)
        if stuck and status is RunStatus.OK:  # a frozen evaluator: no final evaluation, no model.pt
            code, status = TIME_LIMIT_EXIT_CODE, RunStatus.TIME_LIMIT
            reason = (f"stopping the run: {', '.join(c.name for c in stuck)} did not stop when asked "
                      f"and {'was' if len(stuck) == 1 else 'were'} killed")
        wall = self._training_time or ((time.time() - self._t0) if self._t0 else self.log.prior_time)
        summary = summarize(self.cfg, self.events, wall, status=status, restarts=self.budget.total)
        summary["failure"] = reason if status in (RunStatus.FAILED, RunStatus.TIME_LIMIT) else None
        unwritten = write_summary(self.run_dir / SUMMARY_FILE, summary)
        if unwritten:
            reason += f"; summary.json not written: {unwritten}"
        self.log.close()
        (self.run_dir / PROCESSES_FILE).unlink(missing_ok=True)
        for tmp in self.run_dir.glob("*.tmp"):  # a write cut short by a full disk
            tmp.unlink(missing_ok=True)
        return LaunchResult(code, reason, self.run_dir, summary)

    # ---- phases -----------------------------------------------------------
    def _start_all(self) -> None:
        mode = self.cfg.consistency.mode
        addresses = list(self.cfg.cluster.servers) if mode.on_servers else []
        # cluster.replicas: R more processes per shard on its address (index i + S*j); the first to
        # bind serves, the others back it up (servers/standby.py), and each restarts as any server does.
        for j in range(1 + self.cfg.cluster.replicas):
            for i, addr in enumerate(addresses):
                self._spawn("server", i + len(addresses) * j, address=addr)
        worker_role = "worker" if mode.on_servers else "allreduce"
        for r in range(self.cfg.cluster.starting_workers):
            self._spawn(worker_role, r)
        if self.cfg.eval.enabled:
            self._spawn("evaluator", 0)
        self._write_processes()

    def _spawn(self, role: str, index: int, address: Optional[str] = None) -> None:
        self.children.append(self.processes.start(self.cfg, role, index, address))

    def _write_processes(self) -> None:
        entries = [self.processes.describe(c) for c in self.children]
        atomic_write(self.run_dir / PROCESSES_FILE, json.dumps(entries, indent=2))

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while self._pending or not all(c.state.ready for c in self.children):
            self._poll(started=False)
            if time.monotonic() > deadline:
                late = ", ".join(c.name for c in self.children if not c.state.ready)
                raise LaunchFailed(f"not ready after {READY_TIMEOUT_S:.0f}s: {late}")
            time.sleep(0.05)

    def _supervise(self) -> None:
        self.processes.training_started(self._t0)
        max_time = self.cfg.train.max_time_s
        stop_by = None  # once the workers were asked to stop: when they must be gone
        while True:
            self._poll(started=True)
            workers = [c for c in self.children if c.role in (Role.WORKER, Role.ALLREDUCE)]
            if all(c.state is ChildState.DONE for c in workers) and not any(p.role == Role.WORKER for p in self._pending):
                break
            elapsed = time.time() - self._t0
            target_hit = self.cfg.train.stop_at_target and any(
                e.get("event") == Event.TARGET_REACHED for e in self.events[-50:])
            if stop_by is None and (elapsed > max_time or target_hit):
                stop_by = time.monotonic() + STOP_WORKERS_GRACE_S
                why = f"train.max_time_s={max_time:g} reached" if elapsed > max_time else "the target was reached"
                self._workers_stopping = True
                self._pending = [p for p in self._pending if p.role != Role.WORKER]
                for c in workers:
                    c.terminate()
            elif stop_by is not None and time.monotonic() > stop_by:
                self._pending = [p for p in self._pending if p.role != Role.WORKER]  # no restarts after the limit
                kill_stuck_workers(self.processes, [c for c in workers if c.state is not ChildState.DONE], why)
            if self.elastic is not None and stop_by is None:
                self._scale()
            time.sleep(0.1)
        # Training ends with the last worker's last step, not when its process has exited.
        done = [e["t"] for e in self.events if e.get("event") == Event.DONE and e.get("role") in (Role.WORKER, Role.ALLREDUCE)]
        self._training_time = max(done) if done else time.time() - self._t0

    def _poll(self, started: bool) -> None:
        if self._signal is not None:
            raise _Stopped()
        if self.log.error is not None:
            raise LaunchFailed(f"{self.log.error}; metrics.jsonl ends there")
        self.processes.refresh(self.children)
        t = time.time() - self._t0 if self._t0 else 0.0
        for loss in self.processes.losses(self.children, self.budget, t):
            self._record(None, loss.event)
            if loss.fatal is not None:
                raise LaunchFailed(loss.fatal)
        kill_frozen(self.processes, [c for c in self.children if c.state is ChildState.READY],
                    self.cfg.cluster.timeout_s)
        for c in self.children:
            for e in c.read_events():
                self._record(c, e)
            code = c.poll()
            if code is None or c.state is ChildState.DONE:
                continue
            for e in c.read_events():
                self._record(c, e)
            if code == 0 and c.role in (Role.WORKER, Role.ALLREDUCE) and started:
                c.state = c.state.to(ChildState.DONE)
                continue
            self._crashed(c, code)
        self._respawn_due()

    def _crashed(self, c: RoleProcess, code: int) -> None:
        """Book a restart of a crashed child, or fail once its retries are spent
        (elastic workers: let it go while at least min others run)."""
        cause = f"{c.name} exited with code {code}: {c.cause()}"
        if self.elastic is not None and self._t0 is not None and self.elastic.lets_go(c, self.children, self._pending):
            self.children.remove(c)
            self._write_processes()
            return
        if code == EXIT_NO_RETRY:  # a bad config, user code or a damaged checkpoint: it would fail the same way
            raise LaunchFailed(cause + " (not restarted: it would fail the same way again)")
        now = time.monotonic()
        if c.role == Role.WORKER and (self._workers_stopping or after_training(
                c.role, now + self.budget.delay_s(c.role, c.index, now), self._training_ends(now))):
            self.children.remove(c)  # training is over by the time it would be back: not restarted
            return
        pending = self.budget.schedule(c.role, c.index, now, c.address)
        if pending is None:
            used = self.budget.used(c.role, c.index)
            raise LaunchFailed(cause + (f" (after {used} restart{'s' * (used != 1)})" if used else ""))
        self.children.remove(c)
        self._pending.append(pending)
        self._record(c, {"t": round(time.time() - self._t0, 4) if self._t0 else 0.0, "role": "launcher",
                         "index": 0, "event": Event.RESTART, "process": c.role, "process_index": c.index,
                         "attempt": self.budget.used(c.role, c.index), "cause": cause})

    def _training_ends(self, now: float) -> Optional[float]:
        """When train.max_time_s is reached, on time.monotonic()'s clock (None before the start)."""
        if self._t0 is None:
            return None
        return now + self.cfg.train.max_time_s - (time.time() - self._t0)

    def _respawn_due(self) -> None:
        now = time.monotonic()
        due = [p for p in self._pending if p.due <= now]
        for p in due:
            self._pending.remove(p)
            self._spawn(p.role, p.index, address=p.address)
        if due:
            self._write_processes()

    def _record(self, child: Optional[RoleProcess], e: dict) -> None:
        """`child`: whose event it is (None: the launcher's own)."""
        if child is not None and e.get("event") == Event.READY:
            child.state = child.state.to(ChildState.READY)
        self.log.record(e)
        if self.elastic is not None and child is not None and child.role == Role.WORKER and self._t0 is not None:
            self.elastic.follow(child, e)

    def _launcher_event(self, fields: dict) -> None:
        self._record(None, {"t": round(time.time() - self._t0, 4), "role": "launcher", "index": 0, **fields})

    def _scale(self) -> None:
        """Start or stop workers toward the elastic target."""
        start = self.elastic.scale(self.children, self._pending)
        for rank in start:
            self.children = [c for c in self.children if not (c.role == Role.WORKER and c.index == rank)]
            self._spawn(Role.WORKER, rank)
        if start:
            self._write_processes()

    def _shutdown(self, interrupted: bool = False) -> list[RoleProcess]:
        """Every process stopped in order (stopping.stop_in_order); returns those killed."""
        return stop_in_order(self.processes, self.children, interrupted, self._record)

    def _on_signal(self, signum, frame) -> None:
        self._signal = signum


class _Stopped(Exception):
    pass

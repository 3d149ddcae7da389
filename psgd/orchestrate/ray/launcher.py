"""`psgd launch CONFIG --on ray`: the same job as the local launcher, with every
role in a Ray actor (RoleHost) that requests the role's resources from the
config (`ray.server`, `ray.worker`, `ray.evaluator`: num_cpus, num_gpus).

Server actors reserve a port on their own node and hand their "host:port"
back through Ray; the workers and the evaluator are then started with those
addresses. Everything else is the local launcher's: the run directory and its
files, the common training clock, the progress callback, the order in which
the job stops, Ctrl-C, and the bounded restarts of a crashed role (the actor
restarts its process in place, so a server keeps its node and port; Ray's own
actor restart would move it to another node under workers that know only the
old address).

Where each role goes is `ray.<role>.resources` and `.scheduling` (ray/placement.py).
A lost node (or a role's actor that died) is reported in one event naming the
node, the roles and why (ray/nodes.py); its workers and evaluator are restarted in
new actors on live nodes with room for them, within the restart budget. A lost
server, a spent budget or no room left fails the run with that line, leaving
the servers' checkpoints for `--resume`.
"""
from __future__ import annotations

import json
import math
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import ray
from ray.exceptions import ActorUnavailableError, RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from psgd.config import Config, dump_config, override_config
from psgd.config.modes import Role
from psgd.core.restarts import RestartBudget
from psgd.orchestrate.launchers import LaunchFailed
from psgd.orchestrate.processes import LossReport
from psgd.orchestrate.ray.actor import TOKEN_FILE, RoleHost
from psgd.orchestrate.ray.nodes import LOST_EXIT, NodeLoss, alive_nodes, cannot_restart, loss_event
from psgd.orchestrate.ray.placement import check_resources, role_request, role_requests, room_for, spread_nodes
from psgd.orchestrate.roles import child_command
from psgd.orchestrate.states import ChildState
from psgd.orchestrate.supervisor import Supervisor
from psgd.runtime.event_names import Event
from psgd.runtime.files import atomic_write

__all__ = ["RayLauncher", "RayProcesses", "RayRoleProcess"]

CALL_TIMEOUT_S = 60.0      # one round of actor calls; longer means the cluster is not answering
ROOM_EVERY_S = 1.0         # how often elastic workers look at the nodes' room again
PLACEMENT_TIMEOUT_S = 180.0  # every actor placed and answering


class RayRoleProcess:
    """One role's process in a Ray actor (RoleHost): status and events come in
    through RayProcesses.refresh, one round of actor calls for every role."""

    def __init__(self, role: str, index: int, actor, pid: int, info: dict, address: Optional[str] = None):
        self.role, self.index, self.actor, self.pid, self.info = role, index, actor, pid, info
        self.address = address
        self.state = ChildState.STARTING
        self.code: Optional[int] = None
        self.cause_line = "no output"
        self.pending: list[dict] = []
        self.lost: Optional[str] = None  # why its actor is gone (Ray's words), once it is
        self.reported = False            # its loss is in an event, and its actor replaced

    @property
    def node_ip(self) -> str:
        return self.info["node_ip"]

    @property
    def name(self) -> str:
        return f"{self.role} {self.index} (pid {self.pid} on {self.node_ip})"

    def poll(self) -> Optional[int]:
        return self.code

    def read_events(self) -> list[dict]:
        events, self.pending = self.pending, []
        return events

    def cause(self) -> str:
        return self.cause_line

    def terminate(self) -> None:
        self.actor.send_signal.remote(int(signal.SIGTERM))  # fire and forget: the next refresh sees the exit


class RayProcesses:
    """Every role in a Ray actor. `address` as in ray.init: None/"" joins
    RAY_ADDRESS if set, else starts a local instance sized to fit the job;
    "auto" or a cluster address joins that cluster.

    Elastic workers (cluster.workers: {min, max}) follow the nodes: the run grows to the
    worker actors the live nodes have room for (`worker_room`), a worker that joins gets
    an actor of its own, one that leaves gives its actor back (`release`), and one lost
    with its node is not restarted while min others remain (the launcher decides)."""
    FILLS_ROOM = True

    def __init__(self, cfg: Config, run_dir: Path, address: Optional[str] = None):
        self.cfg, self.run_dir = cfg, run_dir
        self.address = address if address is not None else cfg.ray.address
        self._hosts: dict[tuple[str, int], "ray.actor.ActorHandle"] = {}
        self._infos: dict[tuple[str, int], dict] = {}
        self._requests = role_requests(cfg)
        self._token = ""
        self._room: tuple[float, Optional[int]] = (-ROOM_EVERY_S, None)  # (when, worker_room) last looked at
        self._t0: Optional[float] = None  # the training clock's start, once it has started

    # ---- start -------------------------------------------------------------
    def resolve(self, cfg: Config, resume: bool) -> Config:
        """Place every role's actor, then fill in the servers' addresses they reserved."""
        if not cfg.consistency.mode.on_servers:
            raise LaunchFailed("--on ray runs the parameter-server modes (bsp, ssp, asp); "
                               "run the allreduce baseline with the local launcher")
        self.cfg = cfg
        self._connect()
        self._place()
        self.cfg = override_config(cfg, ["cluster.servers=" + json.dumps(self._server_addresses(resume))])
        return self.cfg

    def _connect(self) -> None:
        requests = self._requests
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        kw = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            if address:
                ray.init(address=address, **kw)
            else:
                # Like the local launcher, a one-machine job may hold more processes than cores:
                # give the local instance enough logical CPUs for every role's request.
                cpus = max(os.cpu_count() or 1, math.ceil(sum(r.num_cpus for r in requests.values())))
                ray.init(num_cpus=cpus, **kw)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise LaunchFailed(f"cannot reach Ray{f' at {address}' if address else ''}: {exc}") from None
        check_resources(requests, ray.cluster_resources())

    def _place(self) -> None:
        self._token = secrets.token_hex(16)
        atomic_write(self.run_dir / TOKEN_FILE, self._token)  # an actor that reads it shares our run directory
        targets = spread_nodes(self._requests, alive_nodes())
        for key in self._requests:
            self._new_host(key, targets.get(key))
        keys = list(self._hosts)
        infos = self._get([self._hosts[k].info.remote() for k in keys], PLACEMENT_TIMEOUT_S,
                          "placing the roles' actors")
        self._infos = dict(zip(keys, infos))

    def _new_host(self, key: tuple[str, int], node_id: Optional[str] = None) -> None:
        """An actor for (role, index), placed by Ray where the role's request allows;
        on `node_id` if it has room there (spread_nodes' pick; soft: else Ray's choice)."""
        options = self._requests[key].options()
        if node_id is not None:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=True)
        self._hosts[key] = RoleHost.options(**options).remote(str(self.run_dir.resolve()), self._token)
        self._infos.pop(key, None)

    def _server_addresses(self, resume: bool) -> list[str]:
        """Configured addresses, else each server actor's node with a port free there.
        On one node the servers bind cluster.host (loopback by default); across
        nodes, their node's address, which the other nodes reach."""
        servers = self.cfg.cluster.servers
        if isinstance(servers, list) and not resume:
            return list(servers)
        keys = [("server", i) for i in range(self.cfg.cluster.num_servers)]
        # Elastic workers may join from a node added later: they reach the servers at their node's address.
        one_node = len({info["node_id"] for info in self._infos.values()}) == 1 \
            and self.cfg.cluster.worker_range is None
        hosts = [self.cfg.cluster.host if one_node else self._infos[k]["node_ip"] for k in keys]
        # A resumed run's servers may be placed on other nodes than the addresses it recorded.
        kept = list(servers) if isinstance(servers, list) else [""] * len(keys)
        todo = [i for i, h in enumerate(hosts) if kept[i].rsplit(":", 1)[0] != h]
        fresh = self._get([self._hosts[keys[i]].reserve_address.remote(hosts[i]) for i in todo],
                          CALL_TIMEOUT_S, "reserving server ports")
        for i, address in zip(todo, fresh):
            kept[i] = address
        return kept

    def start(self, cfg: Config, role: str, index: int, address: Optional[str]) -> RayRoleProcess:
        if (role, index) not in self._hosts:  # an elastic worker joining, or one let go and now replaced
            self._requests[(role, index)] = role_request(cfg, role)
            self._new_host((role, index))
        if (role, index) not in self._infos:  # a new actor, replacing one lost with its node
            self._infos[(role, index)] = self._get([self._hosts[(role, index)].info.remote()], PLACEMENT_TIMEOUT_S,
                                                   f"placing {role} {index} again")[0]
        host, info = self._hosts[(role, index)], self._infos[(role, index)]
        if self._t0 is not None:  # a role started after the start signal (a new actor) needs it too
            self._get([host.write_start.remote(self._t0)], CALL_TIMEOUT_S, f"sending {role} {index} the start")
        args = child_command(role, index, Path(info["workdir"]))[1:]  # the actor's node has its own python
        threads = str(cfg.run.threads)
        env = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        pid = self._get([host.start.remote(args, env, role, index, dump_config(cfg))], CALL_TIMEOUT_S,
                        f"starting {role} {index}")[0]
        return RayRoleProcess(role, index, host, pid, info, address=address)

    def describe(self, proc: RayRoleProcess) -> dict:
        return {"role": proc.role, "index": proc.index, "pid": proc.pid, "node": proc.node_ip,
                **({"address": proc.address} if proc.address else {})}

    def training_started(self, t0: float) -> None:
        # Roles in a directory of their own wait for the start signal there.
        self._t0 = t0
        self._get([h.write_start.remote(t0) for h in self._hosts.values()], CALL_TIMEOUT_S,
                  "sending the start signal")

    # ---- elastic workers -----------------------------------------------------
    def worker_room(self, cfg: Config) -> Optional[int]:
        """Worker actors the live nodes hold now: this job's live ones plus the room left
        (None: a fixed worker count, or a worker request of no resources)."""
        if cfg.cluster.worker_range is None or not ray.is_initialized():
            return None
        when, room = self._room
        if time.monotonic() - when < ROOM_EVERY_S:
            return room
        nodes = alive_nodes()
        alive = {n.node_id for n in nodes}
        in_use: dict[str, dict[str, float]] = {}
        workers = 0
        for key, info in self._infos.items():
            if key not in self._hosts or info["node_id"] not in alive:
                continue
            workers += key[0] == Role.WORKER
            used = in_use.setdefault(info["node_id"], {})
            for unit, amount in self._requests[key].amounts().items():
                used[unit] = used.get(unit, 0.0) + amount
        extra = room_for(role_request(cfg, Role.WORKER), nodes, in_use)
        room = None if extra is None else workers + extra
        self._room = (time.monotonic(), room)
        return room

    def release(self, proc: RayRoleProcess) -> None:
        """An elastic worker left the run: its actor (and what it reserved) goes."""
        key = (proc.role, proc.index)
        if self._hosts.get(key) is proc.actor:
            self._forget(key)
            try:
                ray.kill(proc.actor)
            except RayError:
                pass  # gone already, with its node
        self._room = (-ROOM_EVERY_S, None)  # look again

    def _forget(self, key: tuple[str, int]) -> None:
        for table in (self._hosts, self._infos, self._requests):
            table.pop(key, None)

    # ---- supervise ---------------------------------------------------------
    def refresh(self, procs: list[RayRoleProcess]) -> None:
        """One round of calls: every role's new events and exit status. A role
        whose actor is gone counts as exited (LOST_EXIT), so nothing waits on it."""
        if not ray.is_initialized():
            return  # Ray could not be reached: nothing was started
        procs = list(procs)
        results = self._answers([p.actor.poll.remote() for p in procs], CALL_TIMEOUT_S, "polling the roles")
        for p, result in zip(procs, results):
            if isinstance(result, _Gone):
                if p.code is None:
                    p.lost, p.code = result.cause, LOST_EXIT
                continue
            if result is None:
                continue  # not answering this round (its node may be on its way out)
            events, code, cause = result
            for e in events:
                if e.get("event") == Event.READY:
                    e.setdefault("node", p.node_ip)  # where each role ran, in metrics.jsonl
            p.pending.extend(events)
            p.code = code
            if code is not None:
                p.cause_line = cause
            if events and not p.info["shared"]:  # keep events/ complete in the launcher's run directory
                path = self.run_dir / "events" / f"{p.role}-{p.index}.jsonl"
                path.parent.mkdir(exist_ok=True)
                with open(path, "a") as f:
                    f.write("".join(json.dumps(e) + "\n" for e in events))

    def losses(self, procs: list[RayRoleProcess], budget: RestartBudget, t: float) -> list[LossReport]:
        """The roles lost since the last round, by node, with their actors replaced on
        live nodes; or the reason they cannot be (the run stops with it)."""
        lost = [p for p in procs if p.lost is not None and not p.reported]
        if not lost:
            return []
        alive = alive_nodes()
        gone_nodes = {p.info["node_id"] for p in lost if p.info["node_id"] not in {n.node_id for n in alive}}
        for p in procs:  # a dead node takes every role on it, answered or not this round
            if p.info["node_id"] in gone_nodes and p.code is None:
                p.lost, p.code = "its node left the Ray cluster", LOST_EXIT
                lost.append(p)
        reports = []
        elastic = self.cfg.cluster.worker_range is not None
        for node_id in sorted({p.info["node_id"] for p in lost}):
            # In the job's order (servers, workers, evaluator), not the order their actors' deaths were seen in.
            group = sorted((p for p in lost if p.info["node_id"] == node_id), key=procs.index)
            why = "its node left the Ray cluster" if node_id in gone_nodes else group[0].lost
            loss = NodeLoss(group[0].node_ip, [(p.role, p.index) for p in group], why)
            # Elastic workers are not restarted here: the launcher lets them go (or replaces one below min).
            let_go = [k for k in loss.roles if elastic and k[0] == Role.WORKER]
            moved = NodeLoss(loss.node_ip, [k for k in loss.roles if k not in let_go], why)
            keep = {k: self._infos[k]["node_id"] for k in self._hosts
                    if k in self._infos and self._infos[k]["node_id"] not in gone_nodes and k not in loss.roles}
            problem = cannot_restart(moved, self._requests, budget,
                                     [n for n in alive if n.node_id not in gone_nodes], keep) if moved.roles else None
            reports.append(LossReport(loss_event(loss, problem, t, let_go),
                                      None if problem is None else f"{loss.line()}; {problem}"))
            if problem is not None:
                return reports
            for p in group:
                p.reported, p.cause_line = True, f"lost: {why}"
                if (p.role, p.index) in let_go:
                    self._forget((p.role, p.index))  # a replacement below min gets a new actor in start()
                else:
                    self._new_host((p.role, p.index))
        self._room = (-ROOM_EVERY_S, None)
        return reports

    def _answers(self, refs: list, timeout: float, doing: str) -> list:
        """Each call's result; _Gone where its actor died, None where it is
        unavailable for now. Raises LaunchFailed when Ray does not answer at all."""
        _, late = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        if late:
            raise LaunchFailed(f"Ray did not answer within {timeout:.0f} s while {doing}")
        out = []
        for ref in refs:
            try:
                out.append(ray.get(ref))
            except ActorUnavailableError:
                out.append(None)
            except RayActorError as exc:
                out.append(_Gone(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__))
            except RayError as exc:
                raise LaunchFailed(f"a Ray call failed while {doing}: {str(exc).splitlines()[0]}") from None
        return out

    def _get(self, refs: list, timeout: float, doing: str) -> list:
        try:
            return ray.get(refs, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise LaunchFailed(f"Ray did not answer within {timeout:.0f} s while {doing}") from None
        except RayError as exc:
            raise LaunchFailed(f"a Ray actor failed while {doing}: {str(exc).splitlines()[0]}") from None

    # ---- stop --------------------------------------------------------------
    def silent(self, procs: list[RayRoleProcess], after_s: float) -> list:
        return []  # heartbeat files stay on each actor's node, out of sight here

    def stop(self, group: list[RayRoleProcess], grace_s: float) -> None:
        if not ray.is_initialized():
            return
        self.refresh(group)
        running = [p for p in group if p.code is None]
        for p in running:
            p.terminate()
        deadline = time.monotonic() + grace_s
        while running and time.monotonic() < deadline:
            time.sleep(0.1)
            self.refresh(running)
            running = [p for p in running if p.code is None]
        if running:
            self._get([p.actor.kill.remote() for p in running], CALL_TIMEOUT_S, "killing stragglers")

    def collect(self, procs: list[RayRoleProcess]) -> None:
        """model.pt, the logs, and the shards' replay records of roles that ran in a directory of their own."""
        if not ray.is_initialized():
            return
        for p in procs:
            if p.info["shared"] or p.lost is not None:
                continue  # in the run directory already, or gone with its node
            names = [f"logs/{p.role}-{p.index}.log"] + (["model.pt"] if p.role == Role.EVALUATOR else []) \
                + ([f"record/shard-{p.index}.msgpack"] if p.role == Role.SERVER else [])
            for name in names:
                try:
                    data = ray.get(p.actor.fetch.remote(name), timeout=CALL_TIMEOUT_S)
                except RayError:
                    continue
                if data is not None:
                    (self.run_dir / name).parent.mkdir(parents=True, exist_ok=True)
                    (self.run_dir / name).write_bytes(data)

    def close(self) -> None:
        (self.run_dir / TOKEN_FILE).unlink(missing_ok=True)
        if ray.is_initialized():
            ray.shutdown()  # our actors are not detached: they go with the driver


class RayLauncher(Supervisor):
    """The supervisor with its processes in Ray actors (RayProcesses); `address` as there."""

    def __init__(self, cfg: Config, run_dir: Path, *args, address: Optional[str] = None, **kw):
        super().__init__(cfg, run_dir, *args, processes=RayProcesses(cfg, Path(run_dir), address), **kw)


@dataclass
class _Gone:
    """A call whose actor died: its process and node-local files are gone."""
    cause: str

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

Where each role goes is `ray.<role>.resources` and `.scheduling` (ray_placement).
A lost node (or a role's actor that died) is reported in one event naming the
node, the roles and why (ray_nodes); its workers and evaluator are restarted in
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import ray
from ray.exceptions import ActorUnavailableError, RayActorError, RayError

from psgd.config import Config, dump_config, override_config
from psgd.config.modes import Role
from psgd.orchestrate.launcher import INTERRUPT_BUDGET_S, STOP_GRACE_S, Launcher, LaunchFailed
from psgd.orchestrate.ray_actor import TOKEN_FILE, RoleHost
from psgd.orchestrate.ray_nodes import LOST_EXIT, NodeLoss, alive_nodes, cannot_restart, loss_event
from psgd.orchestrate.ray_placement import check_resources, role_requests
from psgd.orchestrate.roles import child_command
from psgd.runtime.event_names import Event
from psgd.runtime.files import atomic_write

__all__ = ["RayLauncher"]

CALL_TIMEOUT_S = 60.0      # one round of actor calls; longer means the cluster is not answering
PLACEMENT_TIMEOUT_S = 180.0  # every actor placed and answering


@dataclass
class _RemoteProc:
    """The slice of subprocess.Popen the local launcher's supervision uses."""
    actor: "ray.actor.ActorHandle"
    pid: int
    node_ip: str
    code: Optional[int] = None

    def poll(self) -> Optional[int]:
        return self.code

    def send_signal(self, sig: int) -> None:
        self.actor.send_signal.remote(int(sig))  # fire and forget: the next poll sees the exit


@dataclass
class _RayChild:
    """The slice of spawn.Child the local launcher's supervision uses."""
    role: str
    index: int
    proc: _RemoteProc
    info: dict
    address: Optional[str] = None
    ready: bool = False
    done: bool = False
    cause_line: str = "no output"
    pending: list[dict] = field(default_factory=list)
    lost: Optional[str] = None  # why its actor is gone (Ray's words), once it is
    reported: bool = False      # its loss is in an event, and its actor replaced

    @property
    def events(self) -> "_RayChild":
        return self  # the launcher calls child.events.read()

    def read(self) -> list[dict]:
        events, self.pending = self.pending, []
        return events

    def cause(self) -> str:
        return self.cause_line

    @property
    def name(self) -> str:
        return f"{self.role} {self.index} (pid {self.proc.pid} on {self.proc.node_ip})"


class RayLauncher(Launcher):
    """Launcher whose processes live in Ray actors. `address` as in ray.init:
    None/"" joins RAY_ADDRESS if set, else starts a local instance sized to fit
    the job; "auto" or a cluster address joins that cluster."""

    def __init__(self, *args, address: Optional[str] = None, **kw):
        super().__init__(*args, **kw)
        self.address = address if address is not None else self.cfg.ray.address
        self._hosts: dict[tuple[str, int], "ray.actor.ActorHandle"] = {}
        self._infos: dict[tuple[str, int], dict] = {}
        self._placement_error: Optional[LaunchFailed] = None
        self._requests = role_requests(self.cfg)
        self._token = ""

    def run(self):
        try:
            return super().run()
        finally:
            (self.run_dir / TOKEN_FILE).unlink(missing_ok=True)
            if ray.is_initialized():
                ray.shutdown()  # our actors are not detached: they go with the driver

    # ---- start -------------------------------------------------------------
    def _resolve(self) -> Config:
        """Place every role's actor, then fill in the servers' addresses they
        reserved. A failure here is raised by _start_all, inside the run's
        error handling."""
        try:
            if not self.cfg.consistency.mode.on_servers:
                raise LaunchFailed("--on ray runs the parameter-server modes (bsp, ssp, asp); "
                                   "run the allreduce baseline with the local launcher")
            self._connect()
            self._place()
            return override_config(self.cfg, ["cluster.servers=" + json.dumps(self._server_addresses())])
        except LaunchFailed as exc:
            self._placement_error = exc
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
        for key in self._requests:
            self._new_host(key)
        keys = list(self._hosts)
        infos = self._get([self._hosts[k].info.remote() for k in keys], PLACEMENT_TIMEOUT_S,
                          "placing the roles' actors")
        self._infos = dict(zip(keys, infos))

    def _new_host(self, key: tuple[str, int]) -> None:
        """An actor for (role, index), placed by Ray where the role's request allows."""
        self._hosts[key] = RoleHost.options(**self._requests[key].options()).remote(
            str(self.run_dir.resolve()), self._token)
        self._infos.pop(key, None)

    def _start_all(self) -> None:
        if self._placement_error is not None:
            raise self._placement_error
        super()._start_all()

    def _server_addresses(self) -> list[str]:
        """Configured addresses, else each server actor's node with a port free there.
        On one node the servers bind cluster.host (loopback by default); across
        nodes, their node's address, which the other nodes reach."""
        servers = self.cfg.cluster.servers
        if isinstance(servers, list) and not self.resume:
            return list(servers)
        keys = [("server", i) for i in range(self.cfg.cluster.num_servers)]
        one_node = len({info["node_id"] for info in self._infos.values()}) == 1
        hosts = [self.cfg.cluster.host if one_node else self._infos[k]["node_ip"] for k in keys]
        # A resumed run's servers may be placed on other nodes than the addresses it recorded.
        kept = list(servers) if isinstance(servers, list) else [""] * len(keys)
        todo = [i for i, h in enumerate(hosts) if kept[i].rsplit(":", 1)[0] != h]
        fresh = self._get([self._hosts[keys[i]].reserve_address.remote(hosts[i]) for i in todo],
                          CALL_TIMEOUT_S, "reserving server ports")
        for i, address in zip(todo, fresh):
            kept[i] = address
        return kept

    def _spawn(self, role: str, index: int, address: Optional[str] = None) -> None:
        if (role, index) not in self._infos:  # a new actor, replacing one lost with its node
            self._infos[(role, index)] = self._get([self._hosts[(role, index)].info.remote()], PLACEMENT_TIMEOUT_S,
                                                   f"placing {role} {index} again")[0]
        host, info = self._hosts[(role, index)], self._infos[(role, index)]
        args = child_command(role, index, Path(info["workdir"]))[1:]  # the actor's node has its own python
        threads = str(self.cfg.run.threads)
        env = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        pid = self._get([host.start.remote(args, env, role, index, dump_config(self.cfg))], CALL_TIMEOUT_S,
                        f"starting {role} {index}")[0]
        self.children.append(_RayChild(role, index, _RemoteProc(host, pid, info["node_ip"]), info, address=address))

    def _write_processes(self) -> None:
        entries = [{"role": c.role, "index": c.index, "pid": c.proc.pid, "node": c.proc.node_ip,
                    **({"address": c.address} if c.address else {})} for c in self.children]
        atomic_write(self.run_dir / "processes.json", json.dumps(entries, indent=2))

    # ---- supervise ---------------------------------------------------------
    def _supervise(self) -> None:
        # Roles in a directory of their own wait for the start signal there.
        self._get([h.write_start.remote(self._t0) for h in self._hosts.values()], CALL_TIMEOUT_S,
                  "sending the start signal")
        super()._supervise()

    def _poll(self, started: bool) -> None:
        if self._signal is None:
            self._refresh()
            self._handle_lost()
        super()._poll(started)  # books the restarts of the lost roles, as of any crashed one

    def _refresh(self) -> None:
        """One round of calls: every child's new events and exit status. A child
        whose actor is gone counts as exited (LOST_EXIT), so nothing waits on it."""
        children = list(self.children)
        results = self._answers([c.proc.actor.poll.remote() for c in children], CALL_TIMEOUT_S, "polling the roles")
        for c, result in zip(children, results):
            if isinstance(result, _Gone):
                if c.proc.code is None:
                    c.lost, c.proc.code = result.cause, LOST_EXIT
                continue
            if result is None:
                continue  # not answering this round (its node may be on its way out)
            events, code, cause = result
            for e in events:
                if e.get("event") == Event.READY:
                    e.setdefault("node", c.proc.node_ip)  # where each role ran, in metrics.jsonl
            c.pending.extend(events)
            c.proc.code = code
            if code is not None:
                c.cause_line = cause
            if events and not c.info["shared"]:  # keep events/ complete in the launcher's run directory
                path = self.run_dir / "events" / f"{c.role}-{c.index}.jsonl"
                path.parent.mkdir(exist_ok=True)
                with open(path, "a") as f:
                    f.write("".join(json.dumps(e) + "\n" for e in events))

    def _handle_lost(self) -> None:
        """Report the roles lost since the last round, by node, and replace their
        actors on live nodes; or fail, naming what stops a restart."""
        lost = [c for c in self.children if c.lost is not None and not c.reported]
        if not lost:
            return
        alive = alive_nodes()
        gone_nodes = {c.info["node_id"] for c in lost if c.info["node_id"] not in {n.node_id for n in alive}}
        for c in self.children:  # a dead node takes every role on it, answered or not this round
            if c.info["node_id"] in gone_nodes and c.proc.code is None:
                c.lost, c.proc.code = "its node left the Ray cluster", LOST_EXIT
                lost.append(c)
        for node_id in sorted({c.info["node_id"] for c in lost}):
            group = [c for c in lost if c.info["node_id"] == node_id]
            why = "its node left the Ray cluster" if node_id in gone_nodes else group[0].lost
            loss = NodeLoss(group[0].proc.node_ip, [(c.role, c.index) for c in group], why)
            keep = {k: self._infos[k]["node_id"] for k in self._hosts
                    if k in self._infos and self._infos[k]["node_id"] not in gone_nodes and k not in loss.roles}
            problem = cannot_restart(loss, self._requests, self.budget,
                                     [n for n in alive if n.node_id not in gone_nodes], keep)
            self._record(group[0], loss_event(loss, problem, time.time() - self._t0 if self._t0 else 0.0))
            if problem is not None:
                raise LaunchFailed(f"{loss.line()}; {problem}")
            for c in group:
                c.reported, c.cause_line = True, f"lost: {why}"
                self._new_host((c.role, c.index))

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
    def _shutdown(self, interrupted: bool = False) -> None:
        """The local launcher's order (workers, evaluator, servers; everything
        within INTERRUPT_BUDGET_S when interrupted), through the actors."""
        if not ray.is_initialized():
            return  # Ray could not be reached: nothing was started
        if interrupted:
            stages = [(("worker", "evaluator"), 0.5 * INTERRUPT_BUDGET_S), (("server",), 0.3 * INTERRUPT_BUDGET_S)]
        else:
            stages = [(("worker",), STOP_GRACE_S), (("evaluator",), 3 * STOP_GRACE_S), (("server",), STOP_GRACE_S)]
        for roles, grace in stages:
            group = [c for c in self.children if c.role in roles]
            try:
                self._stop_group(group, grace)
            except LaunchFailed:
                pass  # the actor (or Ray) is gone, and its process with it
        try:
            self._refresh()
        except LaunchFailed:
            pass
        for c in self.children:
            for e in c.events.read():
                self._record(c, e)
        self._fetch_outputs()

    def _stop_group(self, group: list[_RayChild], grace: float) -> None:
        self._refresh()
        running = [c for c in group if c.proc.code is None]
        for c in running:
            c.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while running and time.monotonic() < deadline:
            time.sleep(0.1)
            self._refresh()
            running = [c for c in running if c.proc.code is None]
        if running:
            self._get([c.proc.actor.kill.remote() for c in running], CALL_TIMEOUT_S, "killing stragglers")

    def _fetch_outputs(self) -> None:
        """model.pt, the logs, and the shards' replay records of roles that ran in a directory of their own."""
        for c in self.children:
            if c.info["shared"]:
                continue
            if c.lost is not None:
                continue  # its files went with its node
            names = [f"logs/{c.role}-{c.index}.log"] + (["model.pt"] if c.role == Role.EVALUATOR else []) \
                + ([f"record/shard-{c.index}.msgpack"] if c.role == Role.SERVER else [])
            for name in names:
                try:
                    data = ray.get(c.proc.actor.fetch.remote(name), timeout=CALL_TIMEOUT_S)
                except RayError:
                    continue
                if data is not None:
                    (self.run_dir / name).parent.mkdir(parents=True, exist_ok=True)
                    (self.run_dir / name).write_bytes(data)


@dataclass
class _Gone:
    """A call whose actor died: its process and node-local files are gone."""
    cause: str

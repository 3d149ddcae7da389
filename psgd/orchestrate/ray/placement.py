"""Where the Ray launcher's actors go: each role's request (`ray.<role>`:
num_cpus, num_gpus, custom resources, scheduling), the check that the cluster
can hold the whole job at once, and which live nodes can still take a role
whose node was lost. Pure functions of the config and of what Ray reports
(no Ray calls here), so they are tested without a cluster."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence

from psgd.config import Config, RayScheduling
from psgd.orchestrate.launchers import LaunchFailed

__all__ = ["RoleRequest", "role_request", "role_requests", "check_resources", "nodes_that_fit", "room_for",
           "spread_nodes", "NodeView"]

# Ray's names for the units num_cpus and num_gpus ask for.
_BUILTIN = {"CPU": "num_cpus", "GPU": "num_gpus"}


@dataclass(frozen=True)
class RoleRequest:
    """What one process of `role` asks Ray for."""
    role: str
    num_cpus: float
    num_gpus: float
    resources: Mapping[str, float] = field(default_factory=dict)
    scheduling: RayScheduling = RayScheduling.SPREAD

    def amounts(self) -> dict[str, float]:
        """Every unit this request needs, by Ray's resource name."""
        return {"CPU": self.num_cpus, "GPU": self.num_gpus, **self.resources}

    def key(self, unit: str) -> str:
        """The config key that sets `unit` for this role."""
        if unit in _BUILTIN:
            return f"ray.{self.role}.{_BUILTIN[unit]}"
        return f"ray.{self.role}.resources.{unit}"

    def options(self) -> dict:
        """Keyword arguments for `ActorClass.options`."""
        return {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "resources": dict(self.resources),
                "scheduling_strategy": self.scheduling.name}  # Ray spells them SPREAD and DEFAULT


def role_request(cfg: Config, role: str) -> RoleRequest:
    """What one process of `role` asks for (`ray.<role>`)."""
    rc = getattr(cfg.ray, role)
    return RoleRequest(role, float(rc.num_cpus), float(rc.num_gpus), dict(rc.resources), rc.scheduling)


def role_requests(cfg: Config) -> dict[tuple[str, int], RoleRequest]:
    """(role, index) -> its request, for every process the job starts with (elastic
    workers: the range's min; the others ask when they join)."""
    out = {("server", i): role_request(cfg, "server") for i in range(cfg.cluster.num_servers)}
    out.update({("worker", r): role_request(cfg, "worker") for r in range(cfg.cluster.starting_workers)})
    if cfg.eval.enabled:
        out[("evaluator", 0)] = role_request(cfg, "evaluator")
    return out


def room_for(request: RoleRequest, nodes: Iterable[NodeView],
             in_use: Mapping[str, Mapping[str, float]]) -> Optional[int]:
    """How many more processes of `request` the nodes hold besides what this job's actors
    hold there (`in_use`: node id -> resource -> amount); None for a request of nothing."""
    asks = {u: a for u, a in request.amounts().items() if a > 0}
    if not asks:
        return None
    room = 0
    for node in nodes:
        used = in_use.get(node.node_id, {})
        room += min(int((float(node.total.get(u, 0.0)) - float(used.get(u, 0.0)) + 1e-9) // a)
                    for u, a in asks.items())
    return max(0, room)


def check_resources(requests: Mapping[tuple[str, int], RoleRequest], available: Mapping[str, float]) -> None:
    """Fail up front, naming the keys to change, when the cluster cannot hold the
    job at once (Ray would otherwise leave actors pending forever)."""
    units = ["CPU", "GPU"] + sorted({u for r in requests.values() for u in r.resources})
    for unit in units:
        asking = [r for r in requests.values() if r.amounts().get(unit, 0.0) > 0 or unit in _BUILTIN]
        need = sum(r.amounts().get(unit, 0.0) for r in asking)
        have = float(available.get(unit, 0.0))
        if need > have + 1e-9:
            one = {r.role: r for r in asking}  # one request per role names its key
            keys = ", ".join(f"{r.key(unit)}={r.amounts()[unit]:g}" for _, r in sorted(one.items()))
            raise LaunchFailed(f"the job asks Ray for {need:g} {unit} in all but the cluster has "
                               f"{have:g} {unit} ({keys}): lower them or add nodes")


@dataclass(frozen=True)
class NodeView:
    """A live node as the launcher sees it: its id, address and total resources."""
    node_id: str
    ip: str
    total: Mapping[str, float]


def nodes_that_fit(request: RoleRequest, nodes: Iterable[NodeView],
                   in_use: Mapping[str, Mapping[str, float]]) -> list[NodeView]:
    """The nodes with room for one more `request`, given what this job's live
    actors hold on each (`in_use`: node id -> resource -> amount)."""
    fit = []
    for node in nodes:
        used = in_use.get(node.node_id, {})
        if all(float(node.total.get(u, 0.0)) - float(used.get(u, 0.0)) >= amount - 1e-9
               for u, amount in request.amounts().items() if amount > 0):
            fit.append(node)
    return fit


def spread_nodes(requests: Mapping[tuple[str, int], RoleRequest],
                 nodes: Sequence[NodeView]) -> dict[tuple[str, int], str]:
    """(role, index) -> the node id a `spread` process goes to: each role's processes
    take the nodes that can hold them in turn (in address order), counting what this
    job's earlier picks hold, so two shards share a node only when no other can take
    one. Ray's own SPREAD is best effort: a late resource report from a loaded node
    can send a whole role to one node. A process no node can hold is left to Ray."""
    order = sorted(nodes, key=lambda n: (n.ip, n.node_id))
    in_use: dict[str, dict[str, float]] = {}
    turn: dict[str, int] = {}  # role -> where its next process starts looking
    picks = {}
    for key, req in requests.items():
        if req.scheduling is not RayScheduling.SPREAD:
            continue
        fit = {n.node_id for n in nodes_that_fit(req, order, in_use)}
        start = turn.get(req.role, 0)
        for k in range(len(order)):
            node = order[(start + k) % len(order)]
            if node.node_id in fit:
                picks[key] = node.node_id
                turn[req.role] = start + k + 1
                used = in_use.setdefault(node.node_id, {})
                for unit, amount in req.amounts().items():
                    used[unit] = used.get(unit, 0.0) + amount
                break
    return picks

"""What the Ray launcher knows and says about lost nodes: the live nodes,
the one line that names a lost node's roles and why, and whether those roles
can be restarted elsewhere (pure, apart from `alive_nodes`)."""
from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from psgd.config.modes import Role
from psgd.core.restarts import RestartBudget
from psgd.orchestrate.ray.placement import NodeView, RoleRequest, nodes_that_fit
from psgd.runtime.event_names import Event

__all__ = ["LOST_EXIT", "NodeLoss", "alive_nodes", "cannot_restart", "loss_event"]

LOST_EXIT = -signal.SIGKILL  # a role lost with its node: as if killed, as far as the restart policy goes


@dataclass(frozen=True)
class NodeLoss:
    """Roles whose actors were lost together, on the node at `node_ip`."""
    node_ip: str
    roles: Sequence[tuple[str, int]]
    cause: str

    def line(self) -> str:
        names = ", ".join(f"{role} {index}" for role, index in self.roles)
        return f"lost Ray node {self.node_ip} ({self.cause}): {names}"


def alive_nodes() -> list[NodeView]:
    """The nodes Ray counts as alive now, with their total resources."""
    import ray
    return [NodeView(n["NodeID"], n.get("NodeManagerAddress", "?"), dict(n.get("Resources", {})))
            for n in ray.nodes() if n.get("Alive")]


def cannot_restart(loss: NodeLoss, requests: Mapping[tuple[str, int], RoleRequest], budget: RestartBudget,
                   nodes: Sequence[NodeView], kept: Mapping[tuple[str, int], str]) -> Optional[str]:
    """None if every lost role can start again on a live node, else why not.
    `kept`: this job's other actors and the node each holds resources on."""
    servers = [f"server {i}" for role, i in loss.roles if role == Role.SERVER]
    if servers:
        return (f"{', '.join(servers)} cannot move to another node (the workers know its address); "
                "stopping with the checkpoints")
    max_restarts = budget.cfg.max_restarts
    for role, index in loss.roles:
        if budget.used(role, index) >= max_restarts:
            return (f"{role} {index} has no restart left (supervision.max_restarts={max_restarts}); "
                    "stopping with the checkpoints")
    in_use: dict[str, dict[str, float]] = {}
    for key, node_id in kept.items():
        used = in_use.setdefault(node_id, {})
        for unit, amount in requests[key].amounts().items():
            used[unit] = used.get(unit, 0.0) + amount
    for key in loss.roles:
        fit = nodes_that_fit(requests[key], nodes, in_use)
        if not fit:
            req = requests[key]
            asks = ", ".join(f"{req.key(u)}={a:g}" for u, a in req.amounts().items() if a > 0)
            return f"no live Ray node has room for {key[0]} {key[1]} ({asks}); stopping with the checkpoints"
        used = in_use.setdefault(fit[0].node_id, {})
        for unit, amount in requests[key].amounts().items():
            used[unit] = used.get(unit, 0.0) + amount
    return None


def loss_event(loss: NodeLoss, problem: Optional[str], t: float,
               let_go: Sequence[tuple[str, int]] = ()) -> dict:
    """The launcher's event for a loss: `line` is what the CLI shows. `let_go`: elastic
    workers among the roles, which the run goes on without instead of restarting them."""
    if problem is not None:
        line = f"{loss.line()}; {problem}"
    elif not let_go:
        line = loss.line() + "; restarting them on the other nodes"
    else:
        names = ", ".join(f"{role} {index}" for role, index in let_go)
        line = loss.line() + f"; the run goes on without {names} (cluster.workers is a range)"
        if len(let_go) < len(loss.roles):
            line += "; restarting the others on the other nodes"
    return {"t": round(t, 4), "role": "launcher", "index": 0, "event": Event.NODE_LOST, "node": loss.node_ip,
            "roles": [f"{role}-{index}" for role, index in loss.roles], "cause": loss.cause,
            "restarted": problem is None, "line": line}

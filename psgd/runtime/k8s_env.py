"""Kubernetes launchers' environments: Kubeflow's PyTorchJob and the psgd torchx
component. Read only through cluster_env.detect.

PyTorchJob (training-operator, without elastic policy) sets MASTER_ADDR (the
master pod's service), MASTER_PORT, WORLD_SIZE and RANK on every pod, and,
unlike torchrun, no LOCAL_RANK (torchrun also sets TORCHELASTIC_* variables).
The master replica is rank 0 and hosts the job's TCPStore, as under srun.

The torchx component (psgd.orchestrate.cluster.torchx_component) starts each role as its
own torchx role, so a process knows its role from its environment, never from
a rank: PSGD_ROLE (server | worker | evaluator) and PSGD_ROLE_INDEX (torchx's
replica id). The store's host is MASTER_ADDR, or the value of the variable
that PSGD_MASTER_ADDR_ENV names (torchx's `rank0_env`: the name of the
variable holding the first replica's host, which differs per scheduler).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from psgd.config.modes import Role

__all__ = ["RoleFromEnv", "role_from_env", "is_kubeflow", "store_host", "ROLE_NAMES",
           "ROLE_ENV", "INDEX_ENV", "ADDR_ENV_ENV", "JOB_ENV"]

ROLE_ENV = "PSGD_ROLE"
INDEX_ENV = "PSGD_ROLE_INDEX"
ADDR_ENV_ENV = "PSGD_MASTER_ADDR_ENV"
JOB_ENV = "PSGD_JOB_ID"
ROLE_NAMES = ("server", "worker", "evaluator")
KUBEFLOW_VARS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


class EnvError(ValueError):
    """The environment names a role or a store badly."""


@dataclass(frozen=True)
class RoleFromEnv:
    role: str        # server | worker | evaluator
    index: int       # shard, worker rank, or 0
    job_id: str      # namespaces the job's store keys


def is_kubeflow(env: Mapping[str, str]) -> bool:
    """A PyTorchJob pod: its four variables, and none that torchrun sets."""
    return (all(env.get(k) for k in KUBEFLOW_VARS) and "LOCAL_RANK" not in env
            and not any(k.startswith("TORCHELASTIC_") for k in env))


def kubeflow_job_id(env: Mapping[str, str]) -> str:
    """The master's service name is unique per PyTorchJob (`<job>-master-0`)."""
    return f"kubeflow.{env['MASTER_ADDR']}"


def store_host(env: Mapping[str, str]) -> Optional[str]:
    """MASTER_ADDR, else the variable PSGD_MASTER_ADDR_ENV names; None if neither."""
    if env.get("MASTER_ADDR"):
        return env["MASTER_ADDR"]
    name = env.get(ADDR_ENV_ENV)
    if name:
        if not env.get(name):
            raise EnvError(f"{ADDR_ENV_ENV} names {name}, which is not set")
        return env[name]
    return None


def role_from_env(env: Mapping[str, str]) -> Optional[RoleFromEnv]:
    """The role PSGD_ROLE gives this process, or None when it is not set."""
    role = env.get(ROLE_ENV)
    if not role:
        return None
    role = role.strip().lower().rstrip("s")  # torchx role names are plural: servers, workers
    if role not in ROLE_NAMES:
        raise EnvError(f"{ROLE_ENV} must be one of {', '.join(ROLE_NAMES)}, got {env[ROLE_ENV]!r}")
    raw = env.get(INDEX_ENV, "0")
    if not raw.isdigit():
        raise EnvError(f"{INDEX_ENV} must be an integer >= 0, got {raw!r}")
    if role == Role.EVALUATOR and int(raw) != 0:
        raise EnvError(f"there is one evaluator: {INDEX_ENV} must be 0, got {raw}")
    return RoleFromEnv(role, int(raw), env.get(JOB_ENV) or env.get("TORCHX_JOB_ID") or "none")


def role_rank(role: str, index: int, servers: int, workers: int) -> int:
    """The role's place in the job's store barrier: servers, then workers, then the evaluator."""
    return {"server": index, "worker": servers + index, "evaluator": servers + workers}[role]

"""Launch details from a cluster launcher's environment: the only module that
reads environment variables.

torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (and, when its
agent already hosts a TCPStore there, TORCHELASTIC_USE_AGENT_STORE=True).
SLURM's srun sets SLURM_PROCID, SLURM_NTASKS and SLURM_JOB_NODELIST; the
store's host is MASTER_ADDR when the batch script exports it, else the first
node of the job, and its port MASTER_PORT, else one derived from the job id so
that concurrent jobs on a node do not collide. PSGD_HOST overrides the address
this process advertises (for nodes with several networks).
"""
from __future__ import annotations

import dataclasses
import os
import re
import socket
from dataclasses import dataclass
from typing import Mapping, Optional

from psgd.runtime.k8s_env import (
    ADDR_ENV_ENV,
    INDEX_ENV,
    ROLE_ENV,
    EnvError,
    is_kubeflow,
    kubeflow_job_id,
    role_from_env,
    role_rank,
    store_host,
)

__all__ = ["ClusterEnv", "ClusterEnvError", "detect", "expand_nodelist", "reachable_address", "with_config"]

SLURM_PORT_BASE = 29500   # port = base + job id mod span, as many SLURM recipes do
SLURM_PORT_SPAN = 10000


class ClusterEnvError(ValueError):
    """The environment does not describe a cluster launch, or describes it badly."""


@dataclass(frozen=True)
class ClusterEnv:
    launcher: str            # "torchrun" | "slurm" | "kubeflow" | "torchx" | "env" (PSGD_ROLE)
    rank: int
    world_size: int
    master_addr: str         # host of the TCPStore
    master_port: int
    agent_store: bool        # torchrun's agent hosts the store: every rank is a client
    job_id: str              # namespaces the store keys of one job / restart
    advertise_host: Optional[str] = None  # PSGD_HOST, if set
    role: Optional[str] = None  # set by PSGD_ROLE (torchx component): rank and world size then come from the config
    role_index: int = 0


def _int(env: Mapping[str, str], name: str) -> int:
    raw = env.get(name, "")
    try:
        return int(raw)
    except ValueError:
        raise ClusterEnvError(f"{name} must be an integer, got {raw!r}") from None


def expand_nodelist(nodelist: str) -> list[str]:
    """SLURM's compact host list ('gpu[01-03,07],login1') as host names, in order."""
    hosts: list[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", nodelist):
        if plain:
            hosts.append(plain)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if not hi:
                hosts.append(prefix + lo)
                continue
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise ClusterEnvError(f"cannot read SLURM node list {nodelist!r} (range {part!r})")
            hosts.extend(f"{prefix}{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1))
    if not hosts:
        raise ClusterEnvError(f"empty SLURM node list {nodelist!r}")
    return hosts


def detect(env: Optional[Mapping[str, str]] = None) -> ClusterEnv:
    """The launch described by `env` (default: os.environ). torchrun's variables
    win over SLURM's, since torchrun is often started inside an allocation."""
    env = os.environ if env is None else env
    advertise = env.get("PSGD_HOST") or None
    try:
        named = role_from_env(env)
        host = store_host(env)
    except EnvError as exc:
        raise ClusterEnvError(str(exc)) from None
    if named is not None:
        if not host or not env.get("MASTER_PORT"):
            raise ClusterEnvError(f"{ROLE_ENV} is set but the store is not: set MASTER_ADDR (or {ADDR_ENV_ENV}) "
                                  "and MASTER_PORT")
        launcher = "torchx" if any(k.startswith("TORCHX_") for k in env) or env.get(ADDR_ENV_ENV) else "env"
        launch = ClusterEnv(launcher, -1, 0, host, _int(env, "MASTER_PORT"), False, f"{launcher}.{named.job_id}",
                            advertise, named.role, named.index)
        _check_port(launch)
        return launch  # rank and world size follow from the config: see with_config
    if "RANK" in env and "WORLD_SIZE" in env:
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not env.get(name):
                raise ClusterEnvError(f"RANK and WORLD_SIZE are set but {name} is not")
        if is_kubeflow(env):  # PyTorchJob: the master pod (rank 0) hosts the store
            launch = ClusterEnv("kubeflow", _int(env, "RANK"), _int(env, "WORLD_SIZE"), env["MASTER_ADDR"],
                                _int(env, "MASTER_PORT"), False, kubeflow_job_id(env), advertise)
        else:
            run_id = f"{env.get('TORCHELASTIC_RUN_ID', 'none')}.{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
            launch = ClusterEnv("torchrun", _int(env, "RANK"), _int(env, "WORLD_SIZE"), env["MASTER_ADDR"],
                                _int(env, "MASTER_PORT"), env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
                                run_id, advertise)
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        job = env.get("SLURM_JOB_ID", "0")
        addr = env.get("MASTER_ADDR")
        if not addr:
            nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
            if not nodelist:
                raise ClusterEnvError("under SLURM, set MASTER_ADDR or run inside an allocation (SLURM_JOB_NODELIST)")
            addr = expand_nodelist(nodelist)[0]
        port = _int(env, "MASTER_PORT") if env.get("MASTER_PORT") else \
            SLURM_PORT_BASE + (int(job) if job.isdigit() else 0) % SLURM_PORT_SPAN
        launch = ClusterEnv("slurm", _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS"), addr, port,
                            False, f"slurm.{job}.{env.get('SLURM_STEP_ID', '0')}", advertise)
    else:
        raise ClusterEnvError("no cluster launcher found: expected torchrun's RANK/WORLD_SIZE/MASTER_ADDR/"
                              "MASTER_PORT or SLURM's SLURM_PROCID/SLURM_NTASKS")
    if launch.world_size < 1 or not 0 <= launch.rank < launch.world_size:
        raise ClusterEnvError(f"rank {launch.rank} is outside world size {launch.world_size}")
    _check_port(launch)
    return launch


def _check_port(launch: ClusterEnv) -> None:
    if not 0 < launch.master_port < 65536:
        raise ClusterEnvError(f"master port {launch.master_port} is not a port number")


def with_config(launch: ClusterEnv, servers: int, workers: int, evaluator: bool) -> ClusterEnv:
    """A PSGD_ROLE launch with its rank and world size: servers first, then
    workers, then the evaluator (server 0 is rank 0 and hosts the store)."""
    if launch.role is None:
        return launch
    count = {"server": servers, "worker": workers, "evaluator": int(evaluator)}[launch.role]
    if not 0 <= launch.role_index < count:
        raise ClusterEnvError(f"{ROLE_ENV}={launch.role} {INDEX_ENV}={launch.role_index}, but the config has "
                              f"{count} {launch.role}{'s' * (count != 1)}")
    return dataclasses.replace(launch, rank=role_rank(launch.role, launch.role_index, servers, workers),
                               world_size=servers + workers + int(evaluator))


def reachable_address(launch: ClusterEnv) -> str:
    """The IP address of this host that other hosts reach: PSGD_HOST if set, else
    the local address of the route towards the store's host (no packet is sent)."""
    if launch.advertise_host:
        return socket.gethostbyname(launch.advertise_host)
    master = socket.gethostbyname(launch.master_addr)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((master, launch.master_port))
        return s.getsockname()[0]

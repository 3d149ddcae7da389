"""A torchx component for psgd: one torchx role per psgd role.

    torchx run -s local_cwd psgd/orchestrate/cluster/torchx_component.py:psgd --config configs/quickstart.yaml
    torchx run -s kubernetes -cfg queue=default psgd/orchestrate/cluster/torchx_component.py:psgd \\
        --config configs/quickstart.yaml --image my-registry/psgd:latest

The roles are `servers` (cluster.servers replicas), `workers` (cluster.workers
replicas) and, when eval.enabled, `evaluator` (one replica; it takes the final
measurement and writes model.pt). Every replica runs `psgd run CONFIG`, which
reads its role from PSGD_ROLE and its index from PSGD_ROLE_INDEX (torchx's
replica id), so no role is inferred from a rank. Server 0 is the first
replica of the first role: it hosts the job's TCPStore, where the servers
publish their addresses, at the host torchx names in `rank0_env`.
"""

import torchx
import torchx.specs as specs

from psgd.config import load_config
from psgd.config.modes import Role
from psgd.runtime.k8s_env import ADDR_ENV_ENV, INDEX_ENV, JOB_ENV, ROLE_ENV

__all__ = ["psgd", "role_env"]


def role_env(role: str, port: int) -> dict[str, str]:
    """What each replica of `role` is told (torchx fills in the macros per replica)."""
    return {ROLE_ENV: role, INDEX_ENV: specs.macros.replica_id, ADDR_ENV_ENV: specs.macros.rank0_env,
            "MASTER_PORT": str(port), JOB_ENV: specs.macros.app_id, "PYTHONUNBUFFERED": "1"}


def psgd(
    config: str,
    image: str = torchx.IMAGE,
    port: int = 29500,
    run_dir: str = "",
    entrypoint: str = "psgd",
    cpu: int = 1,
    worker_gpu: int = 0,
    memMB: int = 2048,
    overrides: str = "",
) -> specs.AppDef:
    """psgd parameter-server training: servers, workers and the evaluator as torchx roles.

    Args:
        config: psgd YAML config (the replica counts come from its cluster section)
        image: container image with psgd installed (ignored by local_cwd)
        port: port of the job's TCPStore on the first server's host
        run_dir: run directory shared by every replica (default: run.out_dir/NAME-APP_ID)
        entrypoint: the psgd console script (or a path to it)
        cpu: CPUs per replica
        worker_gpu: GPUs per worker replica
        memMB: memory per replica in MB
        overrides: comma-separated key=value config overrides, as psgd's --set
    """
    sets = [s.strip() for s in overrides.split(",") if s.strip()]
    cfg = load_config(config, sets)  # fails here, naming the key, before anything is scheduled
    if not cfg.consistency.mode.on_servers:
        raise ValueError("consistency.mode: the torchx component runs parameter-server modes; "
                         "use torchx's dist.ddp for the all-reduce baseline")
    args = ["run", config] + (["--run-dir", run_dir] if run_dir else [])
    for s in sets:
        args += ["--set", s]
    counts = [("servers", "server", cfg.cluster.num_servers, 0), ("workers", "worker", cfg.cluster.workers, worker_gpu)]
    if cfg.eval.enabled:
        counts.append(("evaluator", "evaluator", 1, 0))
    roles = [specs.Role(name=name, image=image, entrypoint=entrypoint, args=list(args), env=role_env(role, port),
                        num_replicas=n, resource=specs.Resource(cpu=cpu, gpu=gpu, memMB=memMB),
                        port_map={"store": port} if role == Role.SERVER else {})
             for name, role, n, gpu in counts]
    return specs.AppDef(name=f"psgd-{cfg.run.name}", roles=roles)

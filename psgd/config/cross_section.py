"""The config's checks that span sections (a worker rank named in one section must exist in
`cluster`, a feature that needs a mode or a launcher, ...). Config calls this as it is
built, after every section has checked its own values; each check names the key it refuses."""
from __future__ import annotations

from psgd.config.elastic import elastic_refusal
from psgd.config.loader import ConfigError, check
from psgd.config.modes import Overlap
from psgd.config.sim import MAX_SIM_WORKERS

__all__ = ["check_across_sections"]


def check_across_sections(cfg) -> None:
    """Raises ConfigError naming the first key whose value the rest of `cfg` (a psgd Config,
    which calls this as it is built) cannot run with."""
    if cfg.cluster.launcher == "sim":
        check(cfg.cluster.workers <= MAX_SIM_WORKERS, "cluster.workers",
              f"at most {MAX_SIM_WORKERS} on the virtual cluster (--on sim executes every worker in one "
              f"process), got {cfg.cluster.workers}")
        # Overlap changes which parameters each step reads and when its pushes leave:
        # the virtual cluster's executor steps on the parameters of the last reply only.
        check(cfg.workers.overlap is Overlap.OFF, "workers.overlap",
              f"{cfg.workers.overlap} is not modelled on the virtual cluster (--on sim): its steps would "
              "be timed and trained as overlap off; run it with --on local, or set workers.overlap: off")
    for rank in cfg.workers.slowdown:
        check(rank < cfg.cluster.workers, f"workers.slowdown[{rank}]",
              f"no such worker rank (cluster.workers is {cfg.cluster.workers})")
    for rank in cfg.workers.delay.ranks if cfg.workers.delay else []:
        check(rank < cfg.cluster.workers, "workers.delay.ranks",
              f"no worker rank {rank} (cluster.workers is {cfg.cluster.workers})")
    for i, kill in enumerate(cfg.sim.faults.kills):
        check(kill.rank < cfg.cluster.workers, f"sim.faults.kills[{i}].rank",
              f"no worker rank {kill.rank} (cluster.workers is {cfg.cluster.workers})")
    check(not (cfg.sim.hosts and not cfg.consistency.mode.on_servers), "sim.hosts",
          "are not modelled for allreduce (its ring has no hosts in the time model): leave sim.hosts out")
    slots = cfg.sim.worker_slots() if cfg.sim.hosts else None
    if slots is not None:
        check(slots >= cfg.cluster.workers, "sim.placement.workers_per_host",
              f"places {slots} workers on the {cfg.sim.worker_kind} hosts, fewer than cluster.workers "
              f"({cfg.cluster.workers})")
    for i, tr in enumerate(cfg.workers.transient):
        check(tr.rank < cfg.cluster.workers, f"workers.transient[{i}].rank",
              f"no worker rank {tr.rank} (cluster.workers is {cfg.cluster.workers})")
    if cfg.workers.overlap is Overlap.PIPELINE:
        check(cfg.consistency.mode.live, "workers.overlap",
              f"pipeline computes each step on parameters one clock older than {cfg.consistency.mode} "
              "allows: use ssp or asp (or overlap: backward, which keeps every step's parameters)")
    if cfg.workers.overlap is not Overlap.OFF:
        check(not cfg.local.enabled, "workers.overlap", "local updates already push once per round")
    if cfg.local.enabled:
        check(cfg.consistency.mode.on_servers, "local.steps",
              f"local updates run on the parameter servers (bsp, ssp, asp), not {cfg.consistency.mode}")
        check(cfg.optimizer.dc_asgd is None, "optimizer.dc_asgd",
              "delay compensation corrects gradients, not the deltas of local updates")
        check(cfg.optimizer.lr_scaling == "none", "optimizer.lr_scaling",
              "the shards average deltas under local updates: set local.outer_lr instead")
        check(cfg.optimizer.schedule.name == "constant" and not cfg.optimizer.schedule.warmup_updates,
              "optimizer.schedule", "is keyed to the servers' updates; under local updates the "
              "optimizer section is the workers' inner optimizer")
    check(cfg.local.fragments <= cfg.cluster.num_servers, "local.fragments",
          f"a fragment is one or more shards: at most cluster.servers ({cfg.cluster.num_servers})")
    check(not cfg.local.delayed_nesterov or cfg.consistency.mode.live, "local.delayed_nesterov",
          "is for the asynchronous modes (ssp, asp); bsp averages every worker's delta already")
    if cfg.consistency.quorum is not None:
        check(cfg.local.enabled, "consistency.quorum", "merges the deltas of local updates: set local.steps")
        check(cfg.consistency.quorum.size <= cfg.cluster.workers, "consistency.quorum.size",
              f"must be <= cluster.workers ({cfg.cluster.workers}), got {cfg.consistency.quorum.size}")
    if cfg.local.eager:
        check(cfg.cluster.launcher != "sim", "local.eager",
              "is not modelled on the virtual cluster (--on sim): run it with --on local")
    if cfg.consistency.backup_workers:
        check(cfg.consistency.backup_workers < cfg.cluster.workers,
              "consistency.backup_workers", "must be < cluster.workers")
    if cfg.cluster.replicas:
        check(cfg.cluster.launcher != "ray", "cluster.replicas",
              "backups bind their primary's address on the same machine, which Ray's nodes are not: "
              "use the local or sim launcher")
        check(cfg.checkpoint.enabled, "cluster.replicas",
              "backups follow their primary's checkpoint log: set checkpoint.enabled: true")
        check(cfg.consistency.mode.on_servers, "cluster.replicas",
              f"replicates parameter-server shards; {cfg.consistency.mode} has none")
    refusal = elastic_refusal(cfg)
    if refusal is not None:
        raise ConfigError(*refusal)


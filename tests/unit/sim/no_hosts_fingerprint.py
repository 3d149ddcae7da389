"""Fingerprints of simulated runs without sim.hosts, to hold the time model to its behaviour before hosts.

`python tests/unit/sim/no_hosts_fingerprint.py > tests/unit/sim/data/no_hosts.json`, run on the
commit before hosts existed (PYTHONPATH at that checkout), wrote the expected figures; the test
(test_hosts_off.py) recomputes them on this code. Each fingerprint is the sha256 of every event the
run emitted (times to the last bit, as repr) and of its final parameters' bytes. Fields that
events gained after that commit (ADDED_LATER: the shards' pull waits and busy time in server_stats,
each step's parked wait, which report the run and do not steer it) are left out, so the fingerprint
still speaks of the run.
"""
from __future__ import annotations

import hashlib
import json

MODES = {
    "bsp": ["consistency.mode=bsp"],
    "ssp": ["consistency.mode=ssp", "consistency.staleness=2"],
    "asp": ["consistency.mode=asp"],
    "bsp+backup": ["consistency.mode=bsp", "consistency.backup_workers=1"],
    "local-diloco": ["consistency.mode=asp", "local.steps=3", "local.outer_momentum=0.9", "local.outer_nesterov=true"],
}


ADDED_LATER = ("waits", "busy_s", "wait_s")


def config(mode: str, extra: tuple[str, ...] = ()):
    from psgd.config import load_config
    sets = ["task.model=linear", "task.dataset=synthetic", "task.batch_size=8", "cluster.servers=2",
            "cluster.workers=4", "train.steps_per_worker=12", "eval.every_s=0.05", "sim.compute_ms=2",
            "sim.compute_jitter=0.2", "sim.worker_spread=0.3", "workers.slowdown={1: 3.0}",
            "train.max_time_s=1e9", "train.target_accuracy=null", "sim.request_us=200",
            "sim.bandwidth_gbps=0.1"]
    return load_config(None, sets + MODES[mode] + list(extra))


def fingerprint(mode: str, extra: tuple[str, ...] = ()) -> str:
    import torch

    from psgd.sim import Engine, Executor, TimeModel
    cfg = config(mode, tuple(extra))
    events: list[dict] = []
    ex = Executor(cfg)
    engine = Engine(ex, TimeModel.for_run(cfg, cfg.sim.compute_ms, ex.plans),
                    steps_per_worker=cfg.train.steps_per_worker, max_time_s=cfg.train.max_time_s,
                    eval_every_s=cfg.eval.every_s, emit=events.append)
    engine.run()
    events = [{k: v for k, v in e.items() if k not in ADDED_LATER} for e in events]
    digest = hashlib.sha256(repr(events).encode())
    for p in ex.server_params():
        digest.update(p.detach().to(torch.float32).numpy().tobytes())
    return digest.hexdigest()


if __name__ == "__main__":
    print(json.dumps({mode: fingerprint(mode) for mode in MODES}, indent=1))

"""`sim.batched: auto`: a short probe at the start of a run times the two
gradient paths on the run's model and picks the faster.

The probe times, in CPU seconds of this process, `rounds` rounds of K worker
gradients (K = the run's workers, at most PROBE_WORKERS) each way: one by one
(the exact path on the CPU, or one worker after another on a gradient device)
and in one vmapped call (psgd.sim.batched), after one untimed round of each,
and keeps each path's best round. Batched wins only when it was timed and is
faster by more than BATCHED_MARGIN; a model batching cannot run (psgd.sim.batched.static_fallback,
local updates, a kill storm, vmap refusing it) runs one by one unprobed.

The probe decides only which path runs: it draws no random numbers and reads
no worker's loader, and the choice is written into the run's config.yaml as
`sim.batched: true` or `false`, so a rerun from that file repeats the run
exactly. Two runs of the same `auto` config may choose differently only
where the two paths' timings differ across the runs.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from psgd.config import Config
from psgd.core.sharding import layout_for_module
from psgd.sim.batched import BatchedGradients, initialize_functorch, static_fallback
from psgd.sim.binding import ModelBinding
from psgd.tasks import build_model, load_task
from psgd.tasks.loaders import train_loader
from psgd.workers.model_sync import ModelSync
from psgd.workers.step import forward_backward

__all__ = ["BATCHED_MARGIN", "PROBE_ROUNDS", "PROBE_WORKERS", "PathProbe", "choose_batched", "probe_paths", "resolve_batched"]

PROBE_WORKERS = 16  # worker gradients per timed round: enough that vmap's per-call cost is spread as in a run
PROBE_ROUNDS = 3    # timed rounds per path, after one untimed; the best counts (the least disturbed by others)
# Batched must be at least this much faster per gradient: a near tie keeps the exact path (bit for bit
# with a replay), and a run's batched steps also pay what a round does not (the first call's check).
BATCHED_MARGIN = 0.05


def choose_batched(serial_s: Optional[float], batched_s: Optional[float], fallback: Optional[str]) -> bool:
    """Batched only when both paths were timed, nothing rules batching out, and it took
    less CPU per worker gradient by more than BATCHED_MARGIN: a near tie keeps the exact path."""
    return (fallback is None and serial_s is not None and batched_s is not None
            and batched_s < serial_s * (1 - BATCHED_MARGIN))


@dataclass(frozen=True)
class PathProbe:
    workers: int                 # worker gradients per timed round
    serial_s: Optional[float]    # best round's CPU seconds per worker gradient, one by one
    batched_s: Optional[float]   # the same in one vmapped call; None: not timed (fallback)
    fallback: Optional[str]      # why batching was not timed
    probe_s: float               # CPU seconds the whole probe took

    @property
    def batched(self) -> bool:
        return choose_batched(self.serial_s, self.batched_s, self.fallback)

    def describe(self) -> dict:
        return {"chosen": "batched" if self.batched else "serial", "workers": self.workers,
                "serial_s_per_gradient": self.serial_s, "batched_s_per_gradient": self.batched_s,
                "fallback": self.fallback, "probe_cpu_s": round(self.probe_s, 4)}


def _ruled_out(cfg: Config, model: torch.nn.Module) -> Optional[str]:
    """Why batching cannot run this model in this run, before timing anything."""
    if cfg.local.enabled:
        return "local updates: each worker's inner optimizer steps on its own"
    if cfg.sim.faults.storm:
        return "sim.faults.kill_every_s: a killed worker's step may sit in a batch"
    return static_fallback(model)


def _best(fn: Callable[[], None], rounds: int) -> float:
    fn()  # untimed: allocation, kernel choice, first-call setup
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def probe_paths(cfg: Config, device: Optional[torch.device] = None, rounds: int = PROBE_ROUNDS,
                cap: int = PROBE_WORKERS) -> PathProbe:
    """Time both gradient paths on `cfg`'s model and batches (see the module's doc)."""
    started = time.process_time()
    device = device or torch.device("cpu")
    task = load_task(cfg, None, splits=("train",))
    model = build_model(cfg, task)
    k = max(1, min(cfg.cluster.workers, cap))
    fallback = _ruled_out(cfg, model)
    if fallback is not None:
        return PathProbe(k, None, None, fallback, time.process_time() - started)
    layout = layout_for_module(model, cfg.cluster.num_servers)
    sync = ModelSync(model, layout, torch.device("cpu"), pin_memory=False)
    binding = ModelBinding(sync.params, layout)
    params = layout.flatten([p.detach() for p in sync.params])
    loader = train_loader(task.train_data(), 0, 1, cfg.task.batch_size, cfg.run.seed)  # no worker's stream
    first = next(loader)
    batches = [first] + [b for b in (next(loader) for _ in range(k - 1))]
    batches = [b if b[0].shape == first[0].shape and b[1].shape == first[1].shape else first for b in batches]
    xs, ys = [b[0] for b in batches], [b[1] for b in batches]
    bufs = [[torch.zeros(n) for n in layout.shard_sizes] for _ in range(k)]

    def zeroed():
        for grads in bufs:
            for g in grads:
                g.zero_()
        return bufs

    if device.type == "cpu":
        def serial():
            for batch, grads in zip(batches, zeroed()):
                binding.bind(params)
                binding.bind_grads(grads)
                forward_backward(task, model, batch)
                binding.gather_split(grads)
    else:
        one_by_one = BatchedGradients(model, binding, task, device, vectorize=False)

        def serial():
            one_by_one.compute([params] * k, xs, ys, zeroed())
    serial_s = _best(serial, rounds) / k
    initialize_functorch()
    vmapped = BatchedGradients(model, binding, task, device, vectorize=True)
    try:
        batched_s = _best(lambda: vmapped.compute([params] * k, xs, ys, zeroed()), rounds) / k
    except RuntimeError as exc:  # vmap refuses: randomness, in-place updates of captured state, ...
        return PathProbe(k, serial_s, None, f"vmap failed: {str(exc).splitlines()[0]}",
                         time.process_time() - started)
    return PathProbe(k, serial_s, batched_s, None, time.process_time() - started)


def resolve_batched(cfg: Config, device: Optional[torch.device] = None) -> tuple[Config, Optional[PathProbe]]:
    """`cfg` with sim.batched true or false: as given, or for `auto` as the probe chose
    (returned with it). All-reduce computes no gradients in the executor: auto is false there."""
    if cfg.sim.batched != "auto":
        return cfg, None
    if not cfg.consistency.mode.on_servers:
        return dataclasses.replace(cfg, sim=dataclasses.replace(cfg.sim, batched=False)), None
    probe = probe_paths(cfg, device)
    return dataclasses.replace(cfg, sim=dataclasses.replace(cfg.sim, batched=probe.batched)), probe

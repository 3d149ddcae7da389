"""`psgd bench sim`: serial, batched and the path `sim.batched: auto` chooses,
each in CPU seconds per worker step over a plain loop's (psgd.sim.cost), for
one workload or the four reference models, with this core's matrix-product peak.

`chosen_over_faster` is the chosen path's CPU per worker step over the faster
measured path's: 1 when the probe (psgd.sim.path_probe) picked the faster. The
probe's own CPU, paid once at a run's start, is reported apart (`probe`).
"""
from __future__ import annotations

from typing import Optional

import torch

from psgd.config import Config, override_config
from psgd.sim.cost import PEAK_ROUNDS, measure_cost, measure_gemm_peak, measure_plain_loop
from psgd.sim.path_probe import probe_paths

__all__ = ["SUITE", "measure_model", "measure_peak", "report_lines"]

# The four reference models, as overrides of the built-in defaults (2 shards, asp):
# the quickstart's MLP, the convergence study's MNIST-1D CNN at 32 and 256 channels
# (benchmarks/convergence/mnist1d.yaml) and its character transformer (charlm.yaml).
SUITE: dict[str, list[str]] = {
    "quickstart-mlp": ["task.model=mlp", "task.dataset=digits", "task.batch_size=32"],
    "mnist1d-cnn-32": ["task.model=cnn1d", "task.dataset=mnist1d", "task.batch_size=32",
                       "task.model_args={channels: 32}"],
    "mnist1d-cnn-256": ["task.model=cnn1d", "task.dataset=mnist1d", "task.batch_size=32",
                        "task.model_args={channels: 256}"],
    "charlm": ["task.model=char_transformer", "task.dataset=charlm", "task.batch_size=16",
               "task.model_args={d_model: 64, heads: 4, layers: 2}",
               "task.dataset_args={context: 64, val_windows: 64}", "optimizer.name=adam", "optimizer.lr=0.003"],
}


def measure_peak(size: int, seconds: float) -> dict:
    """This core's fp32 matrix-product peak on one thread (psgd.sim.cost.measure_gemm_peak)."""
    torch.set_num_threads(1)
    flops = measure_gemm_peak((size,), seconds)
    return {"gflops": round(flops / 1e9, 2), "size": size, "seconds_per_round": seconds, "rounds": PEAK_ROUNDS,
            "threads": 1}


def measure_model(cfg: Config, counts: list[int], total_steps: int, peak_flops: float) -> dict:
    """Serial, batched and chosen at each worker count in `counts`, and the floor."""
    points = []
    for w in counts:
        steps = max(1, total_steps // w)
        serial = measure_cost(cfg, w, steps, batched=False)
        batched = measure_cost(cfg, w, steps, batched=True)
        probe = probe_paths(override_config(cfg, [f"cluster.workers={w}"]))
        chosen = batched if probe.batched else serial
        points.append({"workers": w, "serial": serial, "batched": batched, "probe": probe,
                       "chosen": "batched" if probe.batched else "serial", "chosen_cost": chosen,
                       "chosen_over_faster": round(chosen.per_step_s / min(serial.per_step_s, batched.per_step_s),
                                                   4)})
    floor = measure_plain_loop(cfg, max(1, total_steps // len(counts)), peak_flops)
    for p in points:
        for key in ("serial", "batched", "chosen"):
            cost = p["chosen_cost"] if key == "chosen" else p[key]
            p[f"{key}_over_floor"] = round(cost.per_step_s / floor.per_step_s, 4)
    return {"points": points, "floor": floor}


def as_json(name: str, measured: dict) -> dict:
    floor = measured["floor"]
    return {"model": name,
            "points": [{"workers": p["workers"], "serial": p["serial"].as_dict(), "batched": p["batched"].as_dict(),
                        "chosen": p["chosen"], "probe": p["probe"].describe(),
                        **{k: p[k] for k in ("serial_over_floor", "batched_over_floor", "chosen_over_floor",
                                             "chosen_over_faster")}}
                       for p in measured["points"]],
            "floor": {"steps": floor.steps, "per_step_s": round(floor.per_step_s, 7), "overhead": floor.overhead,
                      "flops_per_step": floor.flops_per_step,
                      "gemm_peak_fraction": round(floor.gemm_peak_fraction, 4)}}


def report_lines(name: Optional[str], measured: dict) -> list[str]:
    lines = [f"{name}:"] if name else []
    lines.append(f"{'workers':>7} {'path':>8} {'steps':>7} {'cpu s':>8} {'grad s':>8} {'shard s':>8} "
                 f"{'overhead':>9} {'own':>7} {'/floor':>7}")
    for p in measured["points"]:
        for key in ("serial", "batched"):
            c = p[key]
            lines.append(f"{c.workers:>7} {key:>8} {c.worker_steps:>7} {c.total_s:>8.3f} {c.gradient_s:>8.3f} "
                         f"{c.shard_s:>8.3f} {100 * c.overhead:>8.1f}% {100 * c.own_overhead:>6.1f}% "
                         f"{p[key + '_over_floor']:>7.3f}")
        probe = p["probe"]
        timed = (f"probe: {1e3 * probe.serial_s:.3f} ms serial, {1e3 * probe.batched_s:.3f} ms batched per gradient"
                 if probe.batched_s is not None else f"probe: batching ruled out ({probe.fallback})")
        lines.append(f"{'':>7} {'chosen':>8} {p['chosen']}: {p['chosen_over_floor']:.3f} x floor, "
                     f"{p['chosen_over_faster']:.3f} x the faster path ({timed}; {probe.probe_s:.2f} s CPU once)")
        if p["batched"].fallback:
            lines.append(f"  batched fell back to one by one: {p['batched'].fallback}")
    floor = measured["floor"]
    lines.append(f"floor: a plain one-process loop (loader, SGD step) on the same model and batch: "
                 f"{1e3 * floor.per_step_s:.3f} ms CPU per step, {100 * floor.overhead:.1f}% of its forward+backward "
                 f"besides it; its FLOPs run at {100 * floor.gemm_peak_fraction:.0f}% of the peak, so a path doing "
                 f"them at the peak and nothing else would take {floor.gemm_peak_fraction:.3f} x floor")
    return lines

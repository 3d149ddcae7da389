"""The step time a simulated run uses, and where it came from (`sim.compute_ms`, `sim.device`).

- a number in `sim.compute_ms`: that, whatever the device says;
- null with a stated device time (`workers.device_ms`, which real workers wait
  out): that time;
- null: the model's FLOPs per step (psgd.sim.flops) on the device profile,
  step_overhead_us + FLOPs / (peak_tflops x efficiency): the same on every machine;
- `measure`: timed here (psgd.sim.measure), the only case that depends on this
  machine; the figure replaces `measure` in the run's config.yaml, so rerunning
  that file repeats the run bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from psgd.config import Config, override_config

__all__ = ["ComputeSource", "ResolvedCompute", "resolve_compute"]


class ComputeSource(str, Enum):
    CONFIG = "config"        # sim.compute_ms as given
    DEVICE_MS = "workers.device_ms"  # the device time real workers wait out
    FLOPS = "flops"          # FLOPs on the device profile
    MEASURED = "measured"    # timed on this machine


@dataclass(frozen=True)
class ResolvedCompute:
    cfg: Config              # the config to record (compute_ms filled in when measured)
    compute_ms: float        # before sim.speedup
    source: ComputeSource
    flops: int = 0           # per step, when counted

    def describe(self) -> dict:
        """What summary.json records under "sim_compute"."""
        sim = self.cfg.sim
        out = {"compute_ms": self.compute_ms, "source": self.source.value, "speedup": sim.speedup}
        if self.source is ComputeSource.FLOPS:
            profile = sim.profile()
            out.update(flops_per_step=self.flops, device=sim.device, peak_tflops=profile.peak_tflops,
                       efficiency=sim.efficiency or profile.efficiency,
                       step_overhead_us=profile.step_overhead_us)
        return out


def compute_ms_from_flops(cfg: Config, flops: int) -> float:
    profile = cfg.sim.profile()
    efficiency = cfg.sim.efficiency or profile.efficiency
    return profile.step_overhead_us / 1e3 + flops / (profile.peak_tflops * 1e12 * efficiency) * 1e3


def resolve_compute(cfg: Config, task) -> ResolvedCompute:
    """`task`: the run's loaded task (its model and first batch are what is counted or timed)."""
    given = cfg.sim.compute_ms
    if given == "measure":
        from psgd.sim.measure import measure_compute_ms
        ms = float(f"{measure_compute_ms(cfg, task):.6g}")
        return ResolvedCompute(override_config(cfg, [f"sim.compute_ms={ms}"]), ms, ComputeSource.MEASURED)
    if given is not None:
        return ResolvedCompute(cfg, float(given), ComputeSource.CONFIG)
    if cfg.workers.device_ms is not None:
        return ResolvedCompute(cfg, float(cfg.workers.device_ms), ComputeSource.DEVICE_MS)
    from psgd.sim.flops import step_flops
    flops = step_flops(cfg, task)
    return ResolvedCompute(cfg, compute_ms_from_flops(cfg, flops), ComputeSource.FLOPS, flops)

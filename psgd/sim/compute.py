"""The step time a simulated run uses, and where it came from (`sim.compute_ms`, `sim.device`).

- a number in `sim.compute_ms`: that, whatever the device says;
- null with a stated device time (`workers.device_ms`, which real workers wait
  out): that time;
- null: the model's FLOPs per step (psgd.sim.flops) on the device profile,
  step_overhead_us + FLOPs / (peak_tflops x efficiency): the same on every machine;
- null with `sim.device: profile`: the step's work on sim.host_profile's host,
  operations x its measured cost per operation + each matrix product at the rate
  it measured for that size (psgd.sim.op_count): the same on every machine;
- `measure`: timed here (psgd.sim.measure), the only case that depends on this
  machine; the figure replaces `measure` in the run's config.yaml, so rerunning
  that file repeats the run bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from psgd.config import Config, ConfigError, override_config

__all__ = ["ComputeSource", "ResolvedCompute", "resolve_compute"]


class ComputeSource(str, Enum):
    CONFIG = "config"        # sim.compute_ms as given
    DEVICE_MS = "workers.device_ms"  # the device time real workers wait out
    FLOPS = "flops"          # FLOPs on the device profile
    MEASURED = "measured"    # timed on this machine
    PROFILE = "host_profile"  # the step's work on sim.host_profile's measured costs


@dataclass(frozen=True)
class ResolvedCompute:
    cfg: Config              # the config to record (compute_ms filled in when measured)
    compute_ms: float        # before sim.speedup
    source: ComputeSource
    flops: int = 0           # per step, when counted
    ops: int = 0             # operations per step, when counted (psgd.sim.op_count)

    def describe(self) -> dict:
        """What summary.json records under "sim_compute"."""
        sim = self.cfg.sim
        out = {"compute_ms": self.compute_ms, "source": self.source.value, "speedup": sim.speedup}
        if self.source is ComputeSource.FLOPS:
            profile = sim.profile()
            out.update(flops_per_step=self.flops, device=sim.device, peak_tflops=profile.peak_tflops,
                       efficiency=sim.efficiency or profile.efficiency,
                       step_overhead_us=profile.step_overhead_us)
            if profile.launch_us:
                out.update(ops_per_step=self.ops, launch_us=profile.launch_us)
        if self.source is ComputeSource.PROFILE:
            out.update(flops_per_step=self.flops, ops_per_step=self.ops, host_profile=sim.host_profile)
        return out


def compute_ms_from_flops(cfg: Config, flops: int, ops: int = 0) -> float:
    profile = cfg.sim.profile()
    efficiency = cfg.sim.efficiency or profile.efficiency
    launches_ms = ops * profile.launch_us / 1e3 if profile.launch_us else 0.0
    return profile.step_overhead_us / 1e3 + launches_ms + flops / (profile.peak_tflops * 1e12 * efficiency) * 1e3


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
    from psgd.config.sim import PROFILE_DEVICE
    if cfg.sim.device == PROFILE_DEVICE and PROFILE_DEVICE not in cfg.sim.devices:
        from psgd.sim.host_profile import load_host_profile
        from psgd.sim.op_count import step_work
        try:
            host = load_host_profile(cfg.sim.host_profile)
        except ValueError as exc:
            raise ConfigError("sim.host_profile", str(exc)) from None
        work = step_work(cfg, task)
        return ResolvedCompute(cfg, work.host_s(host) * 1e3, ComputeSource.PROFILE, work.flops, work.ops)
    if cfg.sim.profile().launch_us:  # the operations are counted with the FLOPs, by the same pass
        from psgd.sim.op_count import step_work
        work = step_work(cfg, task)
        return ResolvedCompute(cfg, compute_ms_from_flops(cfg, work.flops, work.ops), ComputeSource.FLOPS,
                               work.flops, work.ops)
    from psgd.sim.flops import step_flops
    flops = step_flops(cfg, task)
    return ResolvedCompute(cfg, compute_ms_from_flops(cfg, flops), ComputeSource.FLOPS, flops)

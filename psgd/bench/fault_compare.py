"""A simulated fault storm beside a real one (`psgd bench faults --on sim --against
REAL/faults.json`): for goodput kept, time lost per kill and its throughput
equivalent, the simulated median and interval beside the real ones, and whether the
simulated median lies inside the real interval. Pure: both sides are faults.json
dictionaries (psgd.bench.fault_report.fault_json)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["FIGURES", "Comparison", "compare_storms", "check_same_storm", "STORM_KEYS"]

STORM_KEYS = ("target", "kill_every_s", "max_time_s", "mode", "workers", "shards")  # what both must share

# faults.json's analysis key, the figure's name, its unit and digits
FIGURES = (("goodput_ratio", "goodput kept (storm / fault-free)", "", 3),
           ("lost_s_per_fault", "time lost per kill (kill -> back on every shard)", " s", 2),
           ("throughput_equivalent_lost_s_per_fault", "throughput-equivalent loss per kill", " s", 2))


@dataclass(frozen=True)
class Comparison:
    key: str
    name: str
    simulated: Optional[dict]   # {"median", "low", "high", "n"}
    real: Optional[dict]
    unit: str
    digits: int

    @property
    def inside(self) -> Optional[bool]:
        """Whether the simulated median lies in the real interval (None: a side has no figure)."""
        if not self.simulated or not self.real:
            return None
        return self.real["low"] <= self.simulated["median"] <= self.real["high"]

    def text(self, side: Optional[dict]) -> str:
        if not side:
            return "n/a"
        d, u = self.digits, self.unit
        return f"{side['median']:.{d}f}{u} [{side['low']:.{d}f}, {side['high']:.{d}f}] (n={side['n']})"


def check_same_storm(simulated: dict, real: dict) -> None:
    """Raises ValueError (one line) when the two benches do not run the same storm on the same job."""
    for key in STORM_KEYS:
        if simulated.get(key) != real.get(key):
            raise ValueError(f"--against: the real bench's {key} is {real.get(key)!r}, this one's "
                             f"{simulated.get(key)!r}: not the same storm")


def compare_storms(simulated: dict, real: dict) -> list[Comparison]:
    """Raises ValueError when the two benches did not run the same storm."""
    check_same_storm(simulated, real)
    sim, rl = simulated.get("analysis") or {}, real.get("analysis") or {}
    return [Comparison(key, name, sim.get(key), rl.get(key), unit, digits) for key, name, unit, digits in FIGURES]

"""`psgd launch`'s words: what is printed when a job ends (every time with its unit; for a run that stopped early
with checkpoints, the command that continues it)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

__all__ = ["launch_result_lines", "seconds"]


def seconds(value: Optional[float], none: str = "—") -> str:
    return none if value is None else f"{value:.2f} s"


def launch_result_lines(result, run_dir: Path) -> list[str]:
    s = result.summary or {}
    if result.code == 0:
        acc = s.get("final_test_accuracy")
        clock = " simulated" if s.get("clock") == "simulated" else ""  # the virtual cluster's seconds
        return [f"done: {s.get('mode')} accuracy {'—' if acc is None else f'{acc:.4f}'} in "
                f"{seconds(s.get('wall_time_s'))}{clock}, {s.get('total_updates')} updates "
                f"({s.get('updates_per_s')} updates/s), time to target "
                f"{seconds(s.get('time_to_target_s'), 'not reached')}, staleness mean {s.get('staleness_mean')} "
                f"max {s.get('staleness_max')}, max clock gap {s.get('max_clock_gap')} -> {run_dir}"]
    lines = [f"psgd launch: failed: {result.reason} (logs in {Path(run_dir) / 'logs'})"]
    checkpoints = Path(run_dir) / "checkpoints"
    # A deterministic start-up failure (a damaged checkpoint, user code) would fail the same way on resume.
    deterministic = "not restarted" in (result.reason or "")
    if checkpoints.is_dir() and any(checkpoints.iterdir()) and not deterministic:
        lines.append(f"psgd launch: the servers' checkpoints are kept; continue this run with: "
                     f"psgd launch --resume {run_dir}")
    return lines

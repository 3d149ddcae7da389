"""`psgd launch`'s choices and words: which launcher runs the job, and what is
printed when it ends (every time with its unit; for a run that stopped early
with checkpoints, the command that continues it)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

from psgd.config import Config

__all__ = ["launch_result_lines", "launcher_for", "seconds"]


def launcher_for(cfg: Config) -> tuple[Optional[type], str]:
    """(launcher class, "") or (None, why the job cannot start here)."""
    if cfg.logging.tensorboard and importlib.util.find_spec("tensorboard") is None:
        return None, "logging.tensorboard needs the tensorboard package: pip install 'psgd[tensorboard]'"
    if cfg.cluster.launcher == "ray":
        if importlib.util.find_spec("ray") is None:
            return None, "--on ray (cluster.launcher: ray) needs Ray: pip install 'psgd[ray]'"
        from psgd.orchestrate.ray_launcher import RayLauncher
        return RayLauncher, ""
    if cfg.cluster.launcher == "sim":
        from psgd.sim.launcher import SimLauncher
        return SimLauncher, ""
    from psgd.orchestrate.launcher import Launcher
    return Launcher, ""


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

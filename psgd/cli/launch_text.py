"""`psgd launch`'s words: what is printed when a job ends (every time with its unit; for a run that stopped early
with checkpoints, the command that continues it)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from psgd.config import Mode

__all__ = ["launch_result_lines", "seconds"]


def seconds(value: Optional[float], none: str = "—") -> str:
    return none if value is None else f"{value:.2f} s"


def _value(key: str, v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _settings_text(s: dict) -> str:
    """The mode a run ended in, with its bound in clocks, and each live change on the way."""
    start = s.get("mode")
    if s.get("staleness") is not None:
        start += f" (bound {s.get('staleness')} clocks)"
    changes = s.get("setting_changes") or []
    if not changes:
        return start
    final = s.get("final_setting") or {}
    end = final.get("mode", start) + (f" (bound {final.get('staleness')} clocks)" if _bounded(final.get("mode")) else "")
    steps = "; ".join(f"clock {c['clock']}: {c['key']} {_value(c['key'], c['old'])} -> {_value(c['key'], c['new'])}"
                      f" ({c['origin']})" for c in changes)
    return f"{end}, lr {_value('', final.get('lr'))} at the end, started {start}; changes: {steps};"


def _bounded(mode: Optional[str]) -> bool:
    """Whether the staleness setting bounds this mode's pulls (its class's BOUNDED fact)."""
    from psgd.core.modes import behaviour_class
    return mode is not None and behaviour_class(Mode(mode)).BOUNDED


def launch_result_lines(result, run_dir: Path) -> list[str]:
    s = result.summary or {}
    if result.code == 0:
        acc = s.get("final_test_accuracy")
        clock = " simulated" if s.get("clock") == "simulated" else ""  # the virtual cluster's seconds
        # Staleness counts updates between a gradient's pull and its push; the clock gap is what the bound caps.
        return [f"done: {_settings_text(s)} accuracy {'—' if acc is None else f'{acc:.4f}'} in "
                f"{seconds(s.get('wall_time_s'))}{clock}, {s.get('total_updates')} updates "
                f"({s.get('updates_per_s')} updates/s), time to target "
                f"{seconds(s.get('time_to_target_s'), 'not reached')}, staleness mean {s.get('staleness_mean')} "
                f"max {s.get('staleness_max')} (updates), max clock gap {s.get('max_clock_gap')} (clocks) -> {run_dir}"]
    lines = [f"psgd launch: failed: {result.reason} (logs in {Path(run_dir) / 'logs'})"]
    checkpoints = Path(run_dir) / "checkpoints"
    # A deterministic start-up failure (a damaged checkpoint, user code) would fail the same way on resume.
    deterministic = "not restarted" in (result.reason or "")
    if checkpoints.is_dir() and any(checkpoints.iterdir()) and not deterministic:
        lines.append(f"psgd launch: the servers' checkpoints are kept; continue this run with: "
                     f"psgd launch --resume {run_dir}")
    return lines

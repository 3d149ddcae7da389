"""The scale study's sensitivity section: the verdicts re-judged at a small
one-knob-at-a-time sweep around the stated cluster (psgd.bench.sensitivity).

Layout, written by the study's run script next to the main cases:

    sensitivity/knobs.json   {"<knob>": {"name": "link bandwidth", "unit": "Gb/s",
                               "key": "sim.bandwidth_gbps", "stated": 25, "values": [1, 4, 10, 100]}, ...}
    sensitivity/<knob>-<value:g>/w<W>-<case>/seeds.csv   (the study's cases with that knob at that value)

Each claim is keyed by its worker count ("W=64: SSP beats BSP ..."); the
stated verdicts are the main study's.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from psgd.bench.sensitivity import Knob, plot_sensitivity, sensitivity, sensitivity_table

__all__ = ["load_knobs", "keyed", "sensitivity_section"]

SWEEP_DIR = "sensitivity"


def load_knobs(study_dir: Path) -> dict[str, tuple[Knob, list[float]]]:
    """knob id -> (Knob, swept values), from sensitivity/knobs.json (empty without one)."""
    path = Path(study_dir) / SWEEP_DIR / "knobs.json"
    if not path.is_file():
        return {}
    out = {}
    for kid, d in json.loads(path.read_text()).items():
        try:
            out[kid] = (Knob(d["name"], d.get("unit", ""), float(d["stated"]), d.get("key", "")),
                        [float(v) for v in d["values"]])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: knob {kid!r}: needs name, stated and values ({exc})") from None
    return out


def keyed(claims_by_w: dict[int, list]) -> dict[str, str]:
    """"W=<w>: <claim>" -> verdict."""
    return {f"W={w}: {c.claim.split(': ', 1)[1]}": str(c.verdict) for w, cs in claims_by_w.items() for c in cs}


def sensitivity_section(study_dir: Path, stated: dict[int, list],
                        judge_study: Callable[[Path], dict[int, list]]) -> list[str]:
    """Markdown lines (and sensitivity.png) for the sweep, or [] without one.
    `judge_study(dir)`: W -> claims for a study laid out like the main one."""
    knobs = load_knobs(study_dir)
    if not knobs:
        return []
    sweeps = {}
    for kid, (_, values) in knobs.items():
        sweeps[kid] = {}
        for v in values:
            d = Path(study_dir) / SWEEP_DIR / f"{kid}-{v:g}"
            if d.is_dir():
                sweeps[kid][v] = keyed(judge_study(d))
    base = keyed(stated)
    rows = sensitivity(base, sweeps, {k: kv[0] for k, kv in knobs.items()})
    plot_sensitivity(base, sweeps, {k: kv[0] for k, kv in knobs.items()}, Path(study_dir) / "sensitivity.png",
                     "Verdicts around the stated cluster, one knob at a time (outlined: stated)")
    holds = [r.claim for r in rows if r.holds]
    depends = [f"{r.claim}: {r.text()}" for r in rows if not r.holds]
    return (["## Sensitivity to the time model", "",
             "Each verdict re-judged with one knob of the time model moved at a time ("
             + "; ".join(f"{k.name} `{k.key}` at {', '.join(f'{v:g}' for v in vals)} {k.unit}, stated {k.fmt(k.stated)}"
                         for k, vals in knobs.values()) + ").", "",
             sensitivity_table(rows), "",
             f"Holds across the whole sweep ({len(holds)}): " + ("; ".join(holds) if holds else "none") + ".", ""]
            + ["Depends on the time model:", ""] + [f"- {d}" for d in depends]
            + ["", "![verdicts around the stated cluster](sensitivity.png)", ""])

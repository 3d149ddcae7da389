"""Reading finished run directories back: summary, config and the metric
series that the convergence report and plots need."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from psgd.bench.outcomes import examples_per_update
from psgd.config.modes import Mode, Overlap
from psgd.core.target import METRICS
from psgd.runtime.event_names import Event

__all__ = ["RunData", "load_run", "mode_label", "group_by_label"]


def mode_label(mode: str, staleness: Optional[int], staleness_aware: bool, dc_asgd: bool = False,
               backup_workers: int = 0, local: Optional[dict] = None, overlap: str = "off",
               compression: Any = "none") -> str:
    """The name a mode has on the bench command line (its long form): allreduce, bsp, bsp+b1,
    ssp:2, asp, asp+sa, asp+dc, bsp+h8, bsp+h8+diloco, asp+h8+diloco+dn, bsp+h8+diloco+f2+t1+a0.5,
    bsp+h8+diloco+int8 (`compression`: wire.compression, named when it is one codec other than none)."""
    mode = Mode(mode)
    label = f"ssp:{staleness}" if mode is Mode.SSP else mode.value
    if not mode.on_servers:
        return label
    if backup_workers and mode is Mode.BSP:
        label += f"+b{backup_workers}"
    if staleness_aware:
        label += "+sa"
    label = label + "+dc" if dc_asgd else label
    local = local or {}
    if local.get("steps"):  # "+diloco": an outer momentum (DiLoCo's rule), "+dn": Delayed Nesterov
        label += f"+h{local['steps']}"
        if local.get("outer_momentum"):
            label += "+diloco"
        if local.get("delayed_nesterov"):
            label += "+dn"
        if local.get("fragments"):  # streaming DiLoCo
            label += f"+f{local['fragments']}"
            label += f"+t{local['fragment_sync_delay']}" if local.get("fragment_sync_delay") else ""
            label += f"+a{float(local['fragment_update_alpha']):g}" if local.get("fragment_update_alpha") else ""
    overlap = Overlap.OFF if isinstance(overlap, bool) else Overlap(overlap)  # YAML may read off as false
    suffix = {Overlap.PIPELINE: "+pipe", Overlap.BACKWARD: "+bwd"}.get(overlap, "")
    codec = f"+{compression}" if isinstance(compression, str) and compression != "none" else ""
    return label + suffix + codec


@dataclass
class RunData:
    run_dir: Path
    label: str
    summary: dict
    evals: list[dict] = field(default_factory=list)   # eval events, by time
    steps: list[dict] = field(default_factory=list)   # worker step events, by time
    config: dict = field(default_factory=dict)        # the run's resolved config.yaml

    @property
    def seed(self) -> Optional[int]:
        return self.summary.get("seed")

    @property
    def train_end_s(self) -> float:
        """When the last worker step finished."""
        return max((float(e["t"]) for e in self.steps), default=0.0)

    @property
    def training_evals(self) -> list[dict]:
        """Evaluations made while training ran, plus those after it up to the
        first that sees every update (the final parameters: the last steps'
        pushes land after those steps end); without update counts, the first
        after it. Later ones only repeat the final model, so they would make a
        run look as if it held its last value for longer."""
        end = self.train_end_s
        inside = [e for e in self.evals if float(e["t"]) <= end]
        after = [e for e in self.evals if float(e["t"]) > end]
        final = max((e["updates"] for e in self.evals if e.get("updates") is not None), default=None)
        upto = next((i + 1 for i, e in enumerate(after) if final is not None and e.get("updates") == final), 1)
        return inside + after[:upto]

    @property
    def examples_per_update(self) -> int:
        c = self.config
        return examples_per_update(self.summary.get("mode", c.get("consistency", {}).get("mode", "asp")),
                                   int(self.summary.get("workers") or c.get("cluster", {}).get("workers", 1)),
                                   int(c.get("task", {}).get("batch_size", 1)),
                                   int(c.get("consistency", {}).get("backup_workers", 0) or 0),
                                   int((c.get("local") or {}).get("steps", 0) or 0))

    def metric_series(self, metric: str = "accuracy") -> tuple[list[float], list[float], list[float]]:
        """(t, examples, value) of every evaluation reporting `metric`
        (accuracy or loss). `examples` is the training examples behind the
        updates the evaluated parameters had (mean over shards), the same unit
        in every mode."""
        key, _ = METRICS[metric]
        per = self.examples_per_update
        ts, exs, vals = [], [], []
        for e in self.training_evals:
            if e.get(key) is None:
                continue
            versions = e.get("versions") or [e.get("updates", 0)]
            ts.append(float(e["t"]))
            exs.append(per * sum(versions) / len(versions))
            vals.append(float(e[key]))
        return ts, exs, vals

    def accuracy_series(self) -> tuple[list[float], list[float], list[float]]:
        """(t, updates, accuracy) of every evaluation."""
        ts, exs, vals = self.metric_series("accuracy")
        per = self.examples_per_update or 1
        return ts, [x / per for x in exs], vals

    def loss_series(self) -> tuple[list[float], list[float]]:
        pairs = [(float(e["t"]), float(e["loss"])) for e in self.steps if e.get("loss") is not None]
        return [p[0] for p in pairs], [p[1] for p in pairs]


def load_run(run_dir: Path) -> RunData:
    """Raises FileNotFoundError naming the missing file if run_dir is not a finished run."""
    run_dir = Path(run_dir)
    for name in ("summary.json", "metrics.jsonl", "config.yaml"):
        if not (run_dir / name).is_file():
            raise FileNotFoundError(f"{run_dir} is not a psgd run directory: no {name}")
    summary = json.loads((run_dir / "summary.json").read_text())
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    opt, cons = cfg.get("optimizer", {}) or {}, cfg.get("consistency", {}) or {}
    label = mode_label(summary["mode"], summary.get("staleness"), bool(opt.get("staleness_aware", False)),
                       opt.get("dc_asgd") is not None, int(cons.get("backup_workers", 0) or 0), cfg.get("local"),
                       (cfg.get("workers") or {}).get("overlap", "off"), (cfg.get("wire") or {}).get("compression", "none"))
    evals, steps = [], []
    with open(run_dir / "metrics.jsonl") as f:
        for line in f:
            if not line.strip():
                continue
            e = json.loads(line)
            if e.get("event") == Event.EVAL:
                evals.append(e)
            elif e.get("event") == Event.STEP:
                steps.append(e)
    evals.sort(key=lambda e: e["t"])
    steps.sort(key=lambda e: e["t"])
    return RunData(run_dir, label, summary, evals, steps, cfg)


def group_by_label(runs: list[RunData]) -> dict[str, list[RunData]]:
    """Runs grouped by mode label, in order of first appearance."""
    groups: dict[str, list[RunData]] = {}
    for r in runs:
        groups.setdefault(r.label, []).append(r)
    return groups

"""`psgd bench convergence`: the same task under several consistency modes,
learning rates and seeds, one run after another, then report.md, summary.csv,
seeds.csv and plots.

A mode is written as on the command line: `allreduce`, `bsp`, `ssp:S`, `asp`,
with suffixes `+sa` (staleness-aware steps, PS modes), `+dc` (DC-ASGD delay
compensation, PS modes), `+bN` (BSP with N backup workers), and for local
updates `+hN` (N inner steps per push), `+diloco` (DiLoCo's outer rule and
inner AdamW) and `+dn` (Delayed Nesterov, asynchronous DiLoCo), e.g. `asp+sa`,
`bsp+b1`, `bsp+h8+diloco`. Short names: `local:H` = `bsp+hH` (local SGD),
`geo:H` = `asp+hH` (GEO-SGD), `diloco:H` = `bsp+hH+diloco`, `adiloco:H` =
`asp+hH+diloco+dn`, each taking further suffixes (`diloco:8+int8`). Streaming DiLoCo:
`+fN` (N fragments), `+tK` (each fragment's exchange overlaps K inner steps), `+aX` (alpha,
the weight of the local parameters when a fragment lands). A codec for the pushes:
`+` and any `wire.compression` word but none (`+int8`). Each run is a normal `psgd launch` run (its own run directory under
OUT/runs), so the figures come from the same metrics any run leaves behind.
The analysis (held time to target, intervals, verdicts) is in
convergence_report, outcomes and stats.
"""
from __future__ import annotations

import csv
import importlib.util
import math
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

from psgd.bench.convergence_report import (
    Analysis,
    TargetSpec,
    analyse,
    grid_table,
    mode_table,
    report_sections,
    write_seeds_csv,
    write_summary_csv,
)
from psgd.bench.plots import plot_runs
from psgd.bench.run_data import RunData, load_run
from psgd.bench.setting import compute_line, setting_lines
from psgd.config import Config, Mode, load_config
from psgd.config.modes import Overlap
from psgd.config.operations import CODEC_WORDS
from psgd.core.modes import behaviour_class
from psgd.core.target import TargetHold
from psgd.orchestrate.launchers import LauncherUnavailable, launcher_for

__all__ = ["ModeSpec", "parse_modes", "parse_lr_grid", "inner_rate_problem", "ADAMW_GRID", "read_lr_choice", "run_matrix", "BenchResult",
           "write_outputs", "target_spec", "setting_lines"]

_BACKUP = re.compile(r"b(\d+)")
_LOCAL = re.compile(r"h(\d+)")
_FRAGMENTS = re.compile(r"f(\d+)")
_DELAY = re.compile(r"t(\d+)")
_ALPHA = re.compile(r"a(0(?:\.\d+)?|1(?:\.0+)?)")
CODEC_SUFFIXES = tuple(word for word in CODEC_WORDS if word != "none")  # wire.compression values (none: no suffix)


def _bounded(mode: Mode) -> bool:
    """Its mode class bounds its pulls by the staleness setting: written MODE:S."""
    return mode.on_servers and behaviour_class(mode).BOUNDED


_MODE_SPELLINGS = tuple(f"{mode}:S" if _bounded(mode) else str(mode) for mode in Mode)
OVERLAP_SUFFIXES = {"pipe": Overlap.PIPELINE, "bwd": Overlap.BACKWARD}
# Short names of the local-update modes -> their long form.
LOCAL_ALIASES = {"local": "bsp+h{}", "geo": "asp+h{}", "diloco": "bsp+h{}+diloco", "adiloco": "asp+h{}+diloco+dn"}
# DiLoCo (Douillard et al. 2023): outer SGD at 0.7 with Nesterov momentum 0.9 on the shards, inner AdamW.
DILOCO_OVERRIDES = ["local.outer_lr=0.7", "local.outer_momentum=0.9", "local.outer_nesterov=true",
                    "optimizer.name=adamw"]


@dataclass(frozen=True)
class ModeSpec:
    label: str
    mode: Mode
    staleness: Union[int, str] = 0   # "auto": the adaptive bound
    staleness_aware: bool = False
    dc_asgd: bool = False
    backup_workers: int = 0
    local_steps: int = 0             # local updates: inner steps per push (0: a gradient per step)
    diloco: bool = False
    delayed_nesterov: bool = False
    overlap: Overlap = Overlap.OFF   # workers.overlap
    fragments: int = 0               # streaming DiLoCo: local.fragments (0: whole-model pushes)
    fragment_sync_delay: int = 0     # local.fragment_sync_delay (tau)
    fragment_update_alpha: float = 0.0  # local.fragment_update_alpha
    compression: Optional[str] = None  # wire.compression (None: the config's)

    @property
    def overrides(self) -> list[str]:
        sets = [f"consistency.mode={self.mode}", f"consistency.staleness={self.staleness}",
                f"consistency.backup_workers={self.backup_workers}",
                f"optimizer.staleness_aware={'true' if self.staleness_aware else 'false'}",
                "optimizer.dc_asgd={}" if self.dc_asgd else "optimizer.dc_asgd=null",
                f"local.steps={self.local_steps}",
                f"local.delayed_nesterov={'true' if self.delayed_nesterov else 'false'}",
                f"workers.overlap={self.overlap.value}", f"local.fragments={self.fragments}",
                f"local.fragment_sync_delay={self.fragment_sync_delay}",
                f"local.fragment_update_alpha={self.fragment_update_alpha}"]
        if self.compression is not None:
            sets.append(f"wire.compression={self.compression}")
        if self.local_steps:
            # The inner optimizer steps one worker's batch, and lr_scaling (a rule for the
            # servers' steps on gradients) is refused under local updates: a config that
            # scales bsp's rate still runs its local modes, at the configured rate.
            sets.append("optimizer.lr_scaling=none")
        return sets + (DILOCO_OVERRIDES if self.diloco else [])

    @property
    def dir_name(self) -> str:
        return self.label.replace(":", "").replace("+", "-")


def _parse_mode(item: str) -> ModeSpec:
    short, colon, rest = item.partition(":")
    if short in LOCAL_ALIASES:
        steps, plus, more = rest.partition("+")
        if not (colon and steps.isdigit() and int(steps) >= 1):
            raise ValueError(f"--modes: {item!r}: {short} needs its local steps ({short}:H, H >= 1)")
        long = LOCAL_ALIASES[short].format(int(steps)) + plus + more
        return _parse_long(long, long)  # reports name it in its long form, as runs read back are named
    return _parse_long(item, item)


def _parse_long(item: str, label: str) -> ModeSpec:  # noqa: C901 - one branch per suffix
    base, *suffixes = item.split("+")
    name, colon, bound = base.partition(":")
    try:
        mode = Mode(name)
    except ValueError:
        raise ValueError(f"--modes: {item!r}: mode must be one of {', '.join(_MODE_SPELLINGS)} "
                         f"(or {', '.join(f'{a}:H' for a in LOCAL_ALIASES)})") from None
    if _bounded(mode) != bool(colon):
        bounded = ", ".join(f"{m} needs a bound ({m}:S)" for m in Mode if _bounded(m))
        raise ValueError(f"--modes: {item!r}: {bounded}, other modes take none")
    if colon and not (bound.isdigit() or bound == "auto"):
        raise ValueError(f"--modes: {item!r}: the bound must be an integer >= 0 or auto")
    aware = dc = diloco = dn = False
    backup = local = fragments = delay = 0
    alpha, codec = 0.0, None
    overlap = Overlap.OFF
    for s in suffixes:
        m, h = _BACKUP.fullmatch(s), _LOCAL.fullmatch(s)
        f, t, a = _FRAGMENTS.fullmatch(s), _DELAY.fullmatch(s), _ALPHA.fullmatch(s)
        if s in CODEC_SUFFIXES:
            if not mode.on_servers:
                raise ValueError(f"--modes: {item!r}: '+{s}' is a codec of the parameter servers' pushes")
            codec = s
        elif f or t or a:
            fragments = int(f.group(1)) if f else fragments
            delay = int(t.group(1)) if t else delay
            alpha = float(a.group(1)) if a else alpha
        elif s in OVERLAP_SUFFIXES:
            overlap = OVERLAP_SUFFIXES[s]
        elif s in ("sa", "dc") or h or s in ("diloco", "dn"):
            if not mode.on_servers:
                raise ValueError(f"--modes: {item!r}: '+{s}' needs a parameter-server mode")
            aware, dc = aware or s == "sa", dc or s == "dc"
            diloco, dn = diloco or s == "diloco", dn or s == "dn"
            if h:
                if int(h.group(1)) < 1:
                    raise ValueError(f"--modes: {item!r}: '+hN' needs N >= 1 local steps")
                local = int(h.group(1))
        elif m:
            if mode is not Mode.BSP or int(m.group(1)) < 1:
                raise ValueError(f"--modes: {item!r}: '+bN' (N >= 1 backup workers) only applies to bsp")
            backup = int(m.group(1))
        else:
            raise ValueError(f"--modes: {item!r}: suffixes are '+sa' (staleness-aware), '+dc' (DC-ASGD), "
                             "'+bN' (bsp with N backup workers), '+hN' (N local steps per push), "
                             "'+diloco', '+dn' (Delayed Nesterov), '+pipe' and '+bwd' (workers.overlap), "
                             "'+fN', '+tK', '+aX' (streaming DiLoCo), "
                             f"{', '.join(chr(39) + '+' + c + chr(39) for c in CODEC_SUFFIXES)} (wire.compression)")
    if overlap is Overlap.PIPELINE and not mode.live:
        raise ValueError(f"--modes: {item!r}: '+pipe' needs ssp or asp (it computes on one clock older parameters)")
    if (diloco or dn) and not local:
        raise ValueError(f"--modes: {item!r}: '+diloco' and '+dn' are local-update modes: add '+hN'")
    if dn and (not mode.live or not diloco):
        raise ValueError(f"--modes: {item!r}: '+dn' is for asynchronous DiLoCo (ssp or asp, with '+diloco')")
    if (fragments or delay or alpha) and not local:
        raise ValueError(f"--modes: {item!r}: '+fN', '+tK' and '+aX' are streaming DiLoCo's: add '+hN'")
    if (delay or alpha) and not fragments:
        raise ValueError(f"--modes: {item!r}: '+tK' and '+aX' need fragments ('+fN', N >= 1)")
    if local and dc:
        raise ValueError(f"--modes: {item!r}: '+dc' corrects gradients, not the deltas of local updates")
    staleness = (bound if bound == "auto" else int(bound)) if colon else 0
    return ModeSpec(label, mode, staleness, aware, dc, backup, local, diloco, dn, overlap, fragments, delay, alpha,
                    codec)


def parse_modes(text: str) -> list[ModeSpec]:
    """'allreduce,bsp,bsp+b1,ssp:2,ssp:auto,asp+sa,asp+dc,diloco:8' -> specs. Raises ValueError naming the bad item."""
    specs = [_parse_mode(item) for item in (s.strip() for s in text.split(",")) if item]
    if not specs:
        raise ValueError("--modes: give at least one mode")
    if len({s.label for s in specs}) != len(specs):
        raise ValueError("--modes: a mode is listed twice")
    return specs


def parse_lr_grid(text: str) -> list[float]:
    try:
        lrs = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--lr-grid: expected comma-separated numbers, got {text!r}") from None
    if not lrs or any(not (lr > 0 and math.isfinite(lr)) for lr in lrs):
        raise ValueError(f"--lr-grid: need at least one learning rate, all > 0, got {text!r}")
    if len(set(lrs)) != len(lrs):
        raise ValueError("--lr-grid: a learning rate is listed twice")
    return lrs


# Inner AdamW rates that trained DiLoCo in this repository's studies (best 0.003-0.01 on digits, MNIST-1D
# and the character LM; benchmarks/convergence*/...-adamw-lr): the grid a refusal suggests.
ADAMW_GRID = (0.001, 0.003, 0.01)


def inner_rate_problem(cfg: Config, specs: list[ModeSpec]) -> Optional[str]:
    """Without a grid every mode runs at optimizer.lr; a mode whose inner optimizer
    is not the configured one (DiLoCo's AdamW under an SGD config) would inherit a
    rate meant for another optimizer. Returns the one-line refusal, or None."""
    foreign = [s.label for s in specs if s.diloco and cfg.optimizer.name != "adamw"]
    if not foreign:
        return None
    grid = ",".join(f"{lr:g}" for lr in sorted({*ADAMW_GRID, cfg.optimizer.lr}))
    return (f"the inner steps of {', '.join(foreign)} use AdamW, and optimizer.lr {cfg.optimizer.lr:g} is a rate for "
            f"{cfg.optimizer.name}: pass --lr-grid {grid} (each mode at its best), or --lr-from a previous bench")


def read_lr_choice(summary_csv: Path) -> dict[str, float]:
    """label -> lr from an earlier bench's summary.csv (its chosen rates)."""
    try:
        rows = list(csv.DictReader(open(summary_csv)))
    except FileNotFoundError:
        raise ValueError(f"--lr-from: {summary_csv} does not exist") from None
    if not rows or "lr" not in rows[0]:
        raise ValueError(f"--lr-from: {summary_csv} has no lr column")
    return {r["label"]: float(r["lr"]) for r in rows}


def target_spec(cfg: Config) -> Optional[TargetSpec]:
    t = cfg.train.target
    if t is not None:
        return TargetSpec(t.metric, t.value, TargetHold(t.hold_evals, t.tolerance))
    if cfg.train.target_accuracy is not None:
        return TargetSpec("accuracy", cfg.train.target_accuracy, TargetHold())
    return None


@dataclass
class BenchResult:
    out_dir: Path
    runs: list[RunData]
    failed: list[str]          # "label lr seed N: reason"
    target: TargetSpec
    analysis: Optional[Analysis] = None


def _rounded(v) -> str:
    return "—" if v is None else f"{float(v):.4f}"


def _lr_text(lr: float) -> str:
    return f"{lr:g}".replace(".", "p")


def run_matrix(config_path: str, overrides: list[str], specs: list[ModeSpec], seeds: int | list[int], out_dir: Path,
               lrs: Optional[list[float]] = None, lr_for: Optional[dict[str, float]] = None,
               on_run: Callable[[str], None] = lambda msg: None,
               child_main: Optional[Callable[[list[str]], int]] = None) -> BenchResult:
    """Run every (mode, learning rate, seed), seed by seed; `seeds` is a count
    (run.seed, run.seed + 1, ...) or a list of offsets from run.seed. Blocks;
    a failed run is recorded, not raised. Raises ConfigError up front if any config is invalid
    and ValueError if the config has no target or --lr-from lacks a mode. `child_main`: the
    `psgd` entry the launcher may fork children into (see psgd.orchestrate.fork)."""
    out_dir = Path(out_dir)
    base = load_config(config_path, overrides)
    target = target_spec(base)
    if target is None:
        raise ValueError("the config sets no target: give train.target (metric, value) or train.target_accuracy")
    if importlib.util.find_spec("tensorboard") is not None:
        # One TensorBoard run per mode and seed (OUT/runs/<mode>-seed<N>/tensorboard): the modes overlay.
        overrides = [*overrides, "logging.tensorboard=true"]
    plan: list[tuple[ModeSpec, Optional[float], int, list[str], Config]] = []
    for spec in specs:
        if lr_for is not None and spec.label not in lr_for:
            raise ValueError(f"--lr-from: no learning rate for mode {spec.label}")
        rates = lrs or ([lr_for[spec.label]] if lr_for is not None else [None])
        for lr in rates:
            for k in (range(seeds) if isinstance(seeds, int) else seeds):
                seed = base.run.seed + k
                sets = list(overrides) + spec.overrides + [f"run.seed={seed}"]
                if lr is not None:
                    sets.append(f"optimizer.lr={lr}")
                plan.append((spec, lr, seed, sets, load_config(config_path, sets)))
    # Seed by seed, every mode and rate in turn: a machine whose load drifts during the bench
    # weighs on every mode alike, not on whichever ran last (the sort is stable).
    plan.sort(key=lambda entry: entry[2])
    runs, failed = [], []
    for i, (spec, lr, seed, _sets, cfg) in enumerate(plan, 1):
        name = spec.dir_name + (f"-lr{_lr_text(lr)}" if lrs else "") + f"-seed{seed}"
        run_dir = out_dir / "runs" / name
        run_dir.mkdir(parents=True, exist_ok=True)
        lr_note = f" lr {cfg.optimizer.lr:g}"
        on_run(f"[{i}/{len(plan)}] {spec.label}{lr_note} seed {seed} -> {run_dir}")
        t = time.monotonic()
        try:
            launcher = launcher_for(cfg)
        except LauncherUnavailable as exc:
            raise ValueError(str(exc)) from None
        result = launcher(cfg, run_dir, child_main=child_main).run()
        if result.code != 0:
            failed.append(f"{spec.label}{lr_note} seed {seed}: {result.reason}")
            on_run(f"    failed: {result.reason}")
            if result.code >= 128:  # interrupted by the user: stop the whole bench
                break
            continue
        run = load_run(run_dir)
        run.label = spec.label
        # A bench never resumes its runs, and their push logs (a gradient per push since
        # the previous snapshot) reach hundreds of MB a run: a study would fill a disk.
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
        runs.append(run)
        s = run.summary
        on_run(f"    final accuracy {_rounded(s.get('final_test_accuracy'))}, loss {_rounded(s.get('final_test_loss'))}, "
               f"{s.get('total_updates')} updates ({time.monotonic() - t:.0f} s with start-up)")
    return BenchResult(out_dir, runs, failed, target)


def write_outputs(result: BenchResult, title: str, config_text: str, command: str, setting: list[str],
                  notes: str = "", baseline: str = "bsp") -> tuple[Path, Path, list[Path]]:
    """Write summary.csv, seeds.csv, the plots and report.md into result.out_dir;
    every mode is compared with `baseline`'s runs."""
    out = result.out_dir
    out.mkdir(parents=True, exist_ok=True)
    a = result.analysis = analyse(result.runs, result.target, baseline) if result.runs else None
    csv_path = out / "summary.csv"
    plots: list[Path] = []
    parts = [f"# Convergence: {title}", "", f"Command: `{command}`", ""]
    if a is not None:
        write_summary_csv(csv_path, a)
        write_seeds_csv(out / "seeds.csv", a)
        plots = plot_runs(a.chosen_runs(result.runs), out, title, result.target.value, result.target.metric)
        parts += (report_sections(a, setting + [compute_line(result.runs)], baseline)
                  + ["", "## Per mode", "", mode_table(a, baseline), ""])
        if a.grid:
            parts += ["## Learning-rate grid", "", "Median held time to target (seeds that held it) for every "
                      "rate; the rate each mode is compared at in bold.", "", grid_table(a), ""]
    else:
        csv_path.write_text("")
        parts += ["No run finished.", ""]
    if result.failed:
        parts += ["Failed runs:", ""] + [f"- {f}" for f in result.failed] + [""]
    if notes:
        parts += [notes, ""]
    if any((r.run_dir / "tensorboard").is_dir() for r in result.runs):
        parts += ["TensorBoard, one run per mode and seed: `tensorboard --logdir runs` in this directory.", ""]
    if plots:
        parts += ["## Plots", "", "Median over seeds with a min–max band; every seed's curve ends where its run "
                  "ended (x).", ""]
    for p in plots:
        parts += [f"![{p.stem}]({p.name})", ""]
    parts += ["Resolved base config (each run's own config.yaml is in its run directory):", "",
              "```yaml", config_text.rstrip(), "```", ""]
    report = out / "report.md"
    report.write_text("\n".join(parts))
    return report, csv_path, plots

"""`psgd bench convergence`: mode parsing, lr grids, run labels and the files
the bench writes, on hand-made runs with known numbers (exact)."""
import csv
from pathlib import Path

import pytest

from psgd.bench.convergence import BenchResult, parse_lr_grid, parse_modes, read_lr_choice, write_outputs
from psgd.bench.convergence_report import TargetSpec, analyse
from psgd.bench.plots import PLOT_FILES, curve_on_grid
from psgd.bench.run_data import RunData, mode_label
from psgd.core.target import TargetHold

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_parse_modes_covers_every_mode_and_suffix():
    specs = parse_modes("allreduce, bsp,bsp+b1,ssp:0,ssp:8,asp,asp+sa,asp+dc,ssp:2+sa")
    assert [(s.label, s.mode, s.staleness, s.staleness_aware, s.dc_asgd, s.backup_workers) for s in specs] == [
        ("allreduce", "allreduce", 0, False, False, 0), ("bsp", "bsp", 0, False, False, 0),
        ("bsp+b1", "bsp", 0, False, False, 1), ("ssp:0", "ssp", 0, False, False, 0),
        ("ssp:8", "ssp", 8, False, False, 0), ("asp", "asp", 0, False, False, 0),
        ("asp+sa", "asp", 0, True, False, 0), ("asp+dc", "asp", 0, False, True, 0),
        ("ssp:2+sa", "ssp", 2, True, False, 0)]
    assert specs[7].overrides == ["consistency.mode=asp", "consistency.staleness=0", "consistency.backup_workers=0",
                                  "optimizer.staleness_aware=false", "optimizer.dc_asgd={}", "local.steps=0",
                                  "local.delayed_nesterov=false", "workers.overlap=off", "local.fragments=0",
                                  "local.fragment_sync_delay=0", "local.fragment_update_alpha=0.0"]
    assert specs[2].overrides[2] == "consistency.backup_workers=1" and specs[2].overrides[4] == "optimizer.dc_asgd=null"
    assert specs[6].dir_name == "asp-sa" and specs[4].dir_name == "ssp8"


@pytest.mark.parametrize("text, fragment", [
    ("ssp", "ssp needs a bound"), ("asp:2", "other modes take none"), ("ssp:-1", "integer >= 0"),
    ("sync", "mode must be"), ("asp+fast", "suffixes are"), ("allreduce+sa", "parameter-server mode"),
    ("asp+b1", "only applies to bsp"), ("bsp+b0", "only applies to bsp"),
    ("asp,asp", "listed twice"), (" , ", "at least one mode")])
def test_parse_modes_rejects_bad_items_naming_them(text, fragment):
    with pytest.raises(ValueError, match="--modes") as err:
        parse_modes(text)
    assert fragment in str(err.value)


def test_lr_grid_and_lr_choice(tmp_path):
    assert parse_lr_grid("0.1, 0.05,1e-3") == [0.1, 0.05, 0.001]
    for bad in ("", "0.1,x", "0,0.1", "0.1,0.1"):
        with pytest.raises(ValueError, match="--lr-grid"):
            parse_lr_grid(bad)
    (tmp_path / "summary.csv").write_text("label,lr\nbsp,0.4\nasp,0.1\n")
    assert read_lr_choice(tmp_path / "summary.csv") == {"bsp": 0.4, "asp": 0.1}
    with pytest.raises(ValueError, match="does not exist"):
        read_lr_choice(tmp_path / "nope.csv")


def test_mode_label_names_runs_as_the_command_line_does():
    assert mode_label("ssp", 4, False) == "ssp:4"
    assert mode_label("asp", None, True) == "asp+sa"
    assert mode_label("asp", None, False, dc_asgd=True) == "asp+dc"
    assert mode_label("bsp", None, False, backup_workers=1) == "bsp+b1"
    assert mode_label("allreduce", None, True) == "allreduce"


def test_curves_stop_where_runs_stop():
    grid = [0.0, 1.0, 2.0, 3.0, 4.0]
    import numpy as np
    out = curve_on_grid([0.5, 2.0, 3.0], [0.1, 0.5, 0.7], np.asarray(grid))
    assert np.isnan(out[0]) and list(out[1:4]) == [0.1, 0.5, 0.7] and np.isnan(out[4])


def _run(label, seed, lr, accs, mode="bsp", batch=32, workers=4, step_end=None):
    """A finished run evaluated at t = 1, 2, ...; trained until step_end."""
    evals = [{"event": "eval", "t": float(i + 1), "accuracy": a, "test_loss": 1 - a, "versions": [10 * (i + 1)] * 2}
             for i, a in enumerate(accs)]
    end = float(len(accs)) if step_end is None else step_end
    steps = [{"t": 0.5, "loss": 1.0}, {"t": end, "loss": 0.5}]
    summary = {"seed": seed, "mode": mode, "workers": workers, "total_updates": 10 * len(accs),
               "staleness_hist": {"0": 5, "1": 5}, "wire_bytes_per_example": 100.0 + seed}
    config = {"optimizer": {"lr": lr}, "task": {"batch_size": batch}, "consistency": {"mode": mode}}
    return RunData(Path(f"/runs/{label}-{lr}-{seed}"), label, summary, evals, steps, config)


TARGET = TargetSpec("accuracy", 0.8, TargetHold(1, 0.0))


def test_analysis_picks_each_modes_best_rate_and_times_the_held_target():
    runs = [_run("bsp", s, 0.1, [0.5, 0.8, 0.85, 0.9]) for s in range(3)]           # held at t=2
    runs += [_run("bsp", s, 0.4, [0.81, 0.7, 0.85, 0.9]) for s in range(3)]         # touch at 1, held at 3
    runs += [_run("asp", s, 0.1, [0.8, 0.9, 0.9], mode="asp") for s in range(3)]   # held at t=1
    a = analyse(runs, TARGET)
    assert a.grid and a.chosen_lr == {"bsp": 0.1, "asp": 0.1}
    assert (a.stats["bsp"].time.median, a.stats["asp"].time.median, a.stats["asp"].ratio_to_bsp) == (2.0, 1.0, 0.5)
    assert a.resolution_s == 1.0 and not a.resolution_ok   # evaluations 1 s apart: 50% of bsp's 2 s
    # a BSP update averages 4 workers' batches of 32; an ASP update applies one batch
    assert runs[0].metric_series("accuracy")[1][:2] == [1280.0, 2560.0]
    assert runs[6].metric_series("accuracy")[1][:2] == [320.0, 640.0]


def test_evaluations_after_training_do_not_count():
    r = _run("bsp", 0, 0.1, [0.5, 0.7, 0.9, 0.9, 0.9], step_end=2.5)
    assert [e["t"] for e in r.training_evals] == [1.0, 2.0, 3.0]   # the first after the end is the final model
    assert analyse([r], TargetSpec("accuracy", 0.85, TargetHold(2, 0.0))).stats["bsp"].time.median == 3.0


def test_evaluations_until_the_last_pushes_land_count():
    # the last step ends at 2.5; its pushes land by 4.0, which the evaluations' update counts show
    r = _run("ssp:2", 0, 0.1, [0.5, 0.7, 0.6, 0.9, 0.9, 0.9], step_end=2.5)
    for e, updates in zip(r.evals, [10, 20, 25, 30, 30, 30]):
        e["updates"] = updates
    assert [e["t"] for e in r.training_evals] == [1.0, 2.0, 3.0, 4.0]
    assert analyse([r], TargetSpec("accuracy", 0.85, TargetHold(2, 0.0))).stats["ssp:2"].time.median == 4.0


def test_outputs_summary_seeds_report_and_plots(tmp_path):
    runs = [_run("bsp", s, 0.1, [0.5, 0.8, 0.85, 0.9 + 0.01 * s]) for s in range(3)]
    runs += [_run("ssp:2", s, 0.1, [0.8, 0.9, 0.9], mode="ssp") for s in range(3)]
    result = BenchResult(tmp_path, runs, ["asp lr 0.1 seed 0: boom"], TARGET)
    report, csv_path, plots = write_outputs(result, "my_pkg.models:TinyNet on my_pkg.data:load_signals, 4 workers",
                                            "run: {}", "psgd bench convergence x.yaml", ["Heterogeneity: rank 3 slowed 4x."])
    rows = list(csv.DictReader(open(csv_path)))
    assert [(r["label"], r["seeds"], r["time_to_target_median_s"], r["time_to_target_ci_low_s"],
             r["time_to_target_ci_high_s"], r["ratio_to_bsp"]) for r in rows] == [
        ("bsp", "3", "2.0", "2.0", "2.0", "1.0"), ("ssp:2", "3", "1.0", "1.0", "1.0", "0.5")]
    assert rows[0]["final_metric_median"] == "0.91" and rows[0]["final_metric_ci_low"] == "0.9"
    seeds = list(csv.DictReader(open(tmp_path / "seeds.csv")))
    assert len(seeds) == 6 and seeds[0]["time_to_target_s"] == "2.0" and seeds[0]["chosen_lr"] == "True"
    assert [r["wire_bytes_per_example"] for r in seeds[:3]] == ["100.0", "101.0", "102.0"]  # each run's own
    text = report.read_text()
    lines = text.splitlines()
    assert lines[4] == "## Conclusion"
    assert lines[6] == "- Time to hold test accuracy 0.8, median [95% CI] over seeds; bsp: 2.00 [2.00, 2.00] s."
    assert lines[7] == ("- Faster than bsp (ratio interval below 1 - margin): ssp:2 (1.00 [1.00, 1.00] s; faster: "
                        "ratio 0.50 [0.50, 0.50] (±10% margin, paired by seed)).")   # half the time in every seed
    assert "- Heterogeneity: rank 3 slowed 4x." in lines and "- asp lr 0.1 seed 0: boom" in lines
    assert "Seeds: 3 per mode" in text and "(NOT within 5%" in text
    for name in PLOT_FILES.values():
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, name
        assert f"]({name})" in text


def test_local_update_modes_parse_to_their_overrides_and_read_back_under_the_same_label():
    from psgd.bench.convergence import parse_modes
    from psgd.bench.run_data import mode_label
    from psgd.config import load_config
    specs = parse_modes("local:8,geo:4,diloco:8,adiloco:8,ssp:2+h4")
    assert [s.label for s in specs] == ["bsp+h8", "asp+h4", "bsp+h8+diloco", "asp+h8+diloco+dn", "ssp:2+h4"]
    for spec in specs:
        cfg = load_config(None, spec.overrides + ["cluster.workers=4"])
        assert cfg.local.steps == spec.local_steps and cfg.consistency.mode == spec.mode
        local = {"steps": cfg.local.steps, "outer_momentum": cfg.local.outer_momentum,
                 "delayed_nesterov": cfg.local.delayed_nesterov}
        staleness = cfg.consistency.staleness if cfg.consistency.mode == "ssp" else None
        assert mode_label(cfg.consistency.mode, staleness, False, local=local) == spec.label
    # A config that scales bsp's rate linearly (the study's) still runs its local modes.
    for spec in specs:
        assert load_config(None, ["optimizer.lr_scaling=linear"] + spec.overrides).optimizer.lr_scaling == "none"
    diloco = specs[2]
    cfg = load_config(None, diloco.overrides)
    assert (cfg.local.outer_lr, cfg.local.outer_momentum, cfg.local.outer_nesterov, cfg.optimizer.name) == \
        (0.7, 0.9, True, "adamw")


@pytest.mark.parametrize("bad,why", [("local:0", "H >= 1"), ("diloco", "local steps"), ("bsp+diloco", r"\+hN"),
                                     ("bsp+h8+diloco+dn", "asynchronous"), ("asp+h4+dc", "deltas"),
                                     ("allreduce+h4", "parameter-server")])
def test_impossible_local_update_modes_are_refused(bad, why):
    from psgd.bench.convergence import parse_modes
    with pytest.raises(ValueError, match=why):
        parse_modes(bad)


def test_streaming_and_codec_suffixes_set_their_keys_and_read_back_under_the_same_label():
    import dataclasses

    from psgd.bench.convergence import parse_modes
    from psgd.bench.run_data import mode_label
    from psgd.config import load_config
    specs = parse_modes("diloco:8+f2+t1+a0.5,adiloco:8+f2,diloco:8+int8,bsp+int4")
    assert [s.label for s in specs] == ["bsp+h8+diloco+f2+t1+a0.5", "asp+h8+diloco+dn+f2", "bsp+h8+diloco+int8",
                                        "bsp+int4"]
    for spec in specs:
        cfg = load_config(None, spec.overrides + ["cluster.workers=4"])
        assert (cfg.local.fragments, cfg.local.fragment_sync_delay, cfg.local.fragment_update_alpha) == \
            (spec.fragments, spec.fragment_sync_delay, spec.fragment_update_alpha)
        assert cfg.wire.compression == (spec.compression or "none")
        staleness = cfg.consistency.staleness if cfg.consistency.mode == "ssp" else None
        assert mode_label(cfg.consistency.mode, staleness, False, local=dataclasses.asdict(cfg.local),
                          compression=cfg.wire.compression) == spec.label


@pytest.mark.parametrize("bad,why", [("bsp+f2", r"\+hN"), ("diloco:8+t1", "fragments"), ("allreduce+int8", "codec"),
                                     ("diloco:8+f2+a2", "suffixes")])
def test_impossible_streaming_or_codec_modes_are_refused(bad, why):
    from psgd.bench.convergence import parse_modes
    with pytest.raises(ValueError, match=why):
        parse_modes(bad)


def test_overlap_suffixes_set_the_worker_overlap_and_read_back():
    from psgd.bench.convergence import parse_modes
    from psgd.bench.run_data import mode_label
    pipe, bwd = parse_modes("asp+pipe,bsp+bwd")
    assert "workers.overlap=pipeline" in pipe.overrides and "workers.overlap=backward" in bwd.overrides
    assert mode_label("asp", None, False, overlap="pipeline") == "asp+pipe"
    assert mode_label("bsp", None, False, overlap="backward") == "bsp+bwd"
    assert mode_label("asp", None, False, overlap=False) == "asp"  # YAML's reading of off
    with pytest.raises(ValueError, match="ssp or asp"):
        parse_modes("bsp+pipe")


def test_another_baseline_is_what_every_mode_is_compared_with(tmp_path):
    runs = [_run("asp", s, 0.1, [0.5, 0.8, 0.85], mode="asp") for s in range(3)]              # held at t=2
    runs += [_run("asp+pipe", s, 0.1, [0.5, 0.6, 0.7, 0.8, 0.9], mode="asp") for s in range(3)]  # held at t=4
    report, _, _ = write_outputs(BenchResult(tmp_path, runs, [], TARGET), "t", "run: {}", "cmd", [], baseline="asp")
    lines = report.read_text().splitlines()
    assert lines[6] == "- Time to hold test accuracy 0.8, median [95% CI] over seeds; asp: 2.00 [2.00, 2.00] s."
    assert lines[7] == ("- Slower than asp (ratio interval above 1 + margin): asp+pipe (4.00 [4.00, 4.00] s; slower: "
                        "ratio 2.00 [2.00, 2.00] (±10% margin, paired by seed)).")
    assert any(line.startswith("| mode |") and "ratio to asp" in line for line in lines)


def test_a_diloco_mode_under_an_sgd_config_without_a_grid_is_refused_with_the_grid_to_pass():
    from psgd.bench.convergence import ADAMW_GRID, inner_rate_problem
    from psgd.config import load_config
    sgd = load_config(None, ["optimizer.name=sgd", "optimizer.lr=0.1"])
    assert inner_rate_problem(sgd, parse_modes("asp,local:8,geo:4")) is None   # every mode steps SGD
    problem = inner_rate_problem(sgd, parse_modes("asp,local:8,diloco:8"))
    grid = sorted({*ADAMW_GRID, 0.1})
    assert problem == ("the inner steps of bsp+h8+diloco use AdamW, and optimizer.lr 0.1 is a rate for sgd: pass --lr-grid "
                       + ",".join(f"{x:g}" for x in grid) + " (each mode at its best), or --lr-from a previous bench")
    assert "\n" not in problem
    adamw = load_config(None, ["optimizer.name=adamw", "optimizer.lr=0.003"])
    assert inner_rate_problem(adamw, parse_modes("diloco:8")) is None   # the configured rate is an AdamW rate

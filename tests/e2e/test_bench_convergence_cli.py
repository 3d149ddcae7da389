"""`psgd bench convergence` and `psgd plot` as a user runs them: a model and a
dataset of their own (import paths into a module beside the config), a 4x
straggler, the default number of seeds; then the files it leaves."""
import csv
from pathlib import Path

import pytest
from conftest import run_psgd

from psgd.bench.plots import PLOT_FILES

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

USER_MODULE = '''
import torch
from torch import nn


def signals(n=480, seed=0):
    """Two classes of noisy 1-D signals: a rising and a falling ramp."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    ramp = torch.linspace(-1, 1, 24)
    x = torch.where(y[:, None] == 1, ramp, -ramp) + 0.8 * torch.randn(n, 24, generator=g)
    return (x[:400], y[:400]), (x[400:], y[400:])


def tiny_net(width=16):
    return nn.Sequential(nn.Linear(24, width), nn.ReLU(), nn.Linear(width, 2))
'''


@pytest.mark.e2e
@pytest.mark.timeout(400)
def test_bench_convergence_on_a_user_model_with_a_straggler_and_default_seeds(small_config, tmp_path):
    (tmp_path / "my_task.py").write_text(USER_MODULE)
    cfg = small_config(task={"model": "my_task:tiny_net", "dataset": "my_task:signals", "batch_size": 16},
                       train={"steps_per_worker": 25, "max_time_s": 30,
                              "target": {"metric": "accuracy", "value": 0.7, "hold_evals": 2, "tolerance": 0.05}},
                       optimizer={"name": "sgd", "lr": 0.05, "lr_scaling": "linear"},
                       eval={"every_s": 0.1})
    out = tmp_path / "bench"
    code, stdout, stderr = run_psgd("bench", "convergence", str(cfg), "--modes", "bsp,asp", "--out", str(out),
                                    "--set", "workers.slowdown={1: 4.0}", "--set", "eval.every_s=0.1", cwd=tmp_path,
                                    timeout=380)
    assert code == 0, stderr
    assert stdout.splitlines()[0].startswith("Time to hold test accuracy 0.7, median [95% CI] over seeds; bsp: ")

    rows = list(csv.DictReader(open(out / "summary.csv")))
    assert [(r["label"], r["seeds"], r["lr"]) for r in rows] == [("bsp", "3", "0.05"), ("asp", "3", "0.05")]
    for r in rows:
        for col in ("time_to_target_median_s", "time_to_target_ci_low_s", "time_to_target_ci_high_s", "ratio_to_bsp"):
            assert col in r
        assert 0 < float(r["final_metric_median"]) <= 1
    assert rows[0]["ratio_to_bsp"] in ("1.0", "")  # bsp against itself (empty if it never held the target)
    seeds = list(csv.DictReader(open(out / "seeds.csv")))
    assert sorted((s["label"], s["seed"]) for s in seeds) == [("asp", "0"), ("asp", "1"), ("asp", "2"),
                                                             ("bsp", "0"), ("bsp", "1"), ("bsp", "2")]
    # linear scaling: the bsp runs stepped at 2 x 0.05 (2 workers), asp at 0.05
    bsp_cfg = (out / "runs" / "bsp-seed0" / "config.yaml").read_text()
    assert "lr_scaling: linear" in bsp_cfg and "slowdown:\n    1: 4.0" in bsp_cfg

    report = (out / "report.md").read_text()
    lines = report.splitlines()
    assert lines[4] == "## Conclusion" and lines[6].startswith("- Time to hold test accuracy 0.7")
    assert "- Heterogeneity: rank 1 slowed 4x." in lines
    assert "Seeds: 3 per mode" in report and "model `my_task:tiny_net`" in report
    for name in PLOT_FILES.values():
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, name
        assert f"]({name})" in report

    # psgd plot redraws the same four plots from the run directories alone.
    plots = tmp_path / "replot"
    run_dirs = sorted(str(p) for p in (out / "runs").iterdir())
    assert not [d for d in run_dirs if Path(d, "checkpoints").exists()]  # a bench keeps no push logs
    code, stdout, stderr = run_psgd("plot", *run_dirs, "--out", str(plots), "--title", "replot", cwd=tmp_path,
                                    timeout=60)
    assert code == 0, stderr
    assert sorted(Path(p).name for p in stdout.split()) == sorted(PLOT_FILES.values())
    assert all((plots / n).read_bytes().startswith(PNG_MAGIC) for n in PLOT_FILES.values())


def test_bench_convergence_refuses_bad_arguments_before_running(small_config, tmp_path):
    cfg = small_config()
    code, _, stderr = run_psgd("bench", "convergence", str(cfg), "--modes", "asp+b1", cwd=tmp_path, timeout=60)
    assert code == 2 and "'+bN' (N >= 1 backup workers) only applies to bsp" in stderr
    code, _, stderr = run_psgd("bench", "convergence", str(cfg), "--lr-grid", "0.1,x", cwd=tmp_path, timeout=60)
    assert code == 2 and "--lr-grid" in stderr
    code, _, stderr = run_psgd("bench", "convergence", str(cfg), "--set", "train.target={metric: loss}",
                               cwd=tmp_path, timeout=60)
    assert code == 2 and "train.target.value" in stderr
    code, _, stderr = run_psgd("bench", "convergence", str(cfg), "--modes", "asp,local:8,diloco:8", "--on", "sim",
                               cwd=tmp_path, timeout=60)
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr   # one line, before any run
    assert "the inner steps of bsp+h8+diloco use AdamW" in stderr and "pass --lr-grid 0.001,0.003,0.01," in stderr


def test_plot_cli_rejects_a_directory_that_is_not_a_run(tmp_path):
    code, _, stderr = run_psgd("plot", str(tmp_path), "--out", str(tmp_path / "p"), cwd=tmp_path, timeout=60)
    assert code == 2 and "not a psgd run directory: no summary.json" in stderr

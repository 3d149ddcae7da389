"""`psgd bench convergence` and `psgd plot`: mode parsing and the report table
on hand-made runs (exact), plus one real smoke run of the CLI on a tiny config."""
import csv
from pathlib import Path
import pytest
from conftest import run_psgd
from psgd.bench.plots import PLOT_FILES
from psgd.bench.run_data import RunData


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(label, seed, ttt, acc, updates, last_step_t, st_mean=0.0, st_max=0):
    summary = {"seed": seed, "time_to_target_s": ttt, "final_test_accuracy": acc, "total_updates": updates,
               "staleness_mean": st_mean, "staleness_max": st_max}
    steps = [{"t": last_step_t / 2, "loss": 1.0}, {"t": last_step_t, "loss": 0.5}]
    return RunData(Path(f"/runs/{label}-{seed}"), label, summary, [], steps)


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_bench_convergence_cli_writes_report_csv_plots_and_prints_the_table(small_config, tmp_path):
    cfg = small_config(train={"steps_per_worker": 30, "max_time_s": 30, "target_accuracy": 0.3},
                       eval={"every_s": 0.25})
    out = tmp_path / "bench"
    code, stdout, stderr = run_psgd("bench", "convergence", str(cfg), "--modes", "allreduce,asp+sa", "--seeds", "1",
                          "--out", str(out), "--set", "optimizer.lr=0.2", cwd=tmp_path)
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert lines[0].startswith("| mode | seeds | time to 0.3 (s) |")
    assert [ln.split("|")[1].strip() for ln in lines[2:]] == ["allreduce", "asp+sa"]

    rows = list(csv.DictReader(open(out / "summary.csv")))
    assert [(r["label"], r["mode"], r["staleness_aware"], r["seed"], r["status"]) for r in rows] == [
        ("allreduce", "allreduce", "False", "0", "ok"), ("asp+sa", "asp", "True", "0", "ok")]
    assert rows[0]["total_updates"] == "30" and rows[1]["total_updates"] == "60"  # ASP: one update per push
    assert rows[0]["staleness_max"] == "0"
    for r in rows:
        assert 0 < float(r["final_test_accuracy"]) <= 1 and (out / r["run_dir"] / "model.pt").is_file()

    report = (out / "report.md").read_text()
    assert "| allreduce | 1 |" in report and "| asp+sa | 1 |" in report and "--modes allreduce,asp+sa" in report
    for name in PLOT_FILES.values():
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, name
        assert f"]({name})" in report

    # psgd plot redraws the same four plots from the run directories alone.
    plots = tmp_path / "replot"
    run_dirs = sorted(str(p) for p in (out / "runs").iterdir())
    code, stdout, stderr = run_psgd("plot", *run_dirs, "--out", str(plots), "--title", "replot", cwd=tmp_path,
                                    timeout=60)
    assert code == 0, stderr
    assert sorted(Path(p).name for p in stdout.split()) == sorted(PLOT_FILES.values())
    assert all((plots / n).read_bytes().startswith(PNG_MAGIC) for n in PLOT_FILES.values())


def test_plot_cli_rejects_a_directory_that_is_not_a_run(tmp_path):
    code, _, stderr = run_psgd("plot", str(tmp_path), "--out", str(tmp_path / "p"), cwd=tmp_path, timeout=60)
    assert code == 2 and "not a psgd run directory: no summary.json" in stderr

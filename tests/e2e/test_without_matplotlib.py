"""matplotlib is the `bench` extra: without it psgd imports and trains, and the
commands that plot refuse in one line naming the extra, before measuring anything."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A None entry in sys.modules makes `import matplotlib` raise ImportError, as when it is not installed.
NO_MPL = "import sys; sys.modules['matplotlib'] = None; "


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_MPL + code, *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=90)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return _python("from psgd.cli import main; sys.exit(main(sys.argv[1:]))", *args)


def test_the_package_and_the_bench_modules_import_without_it():
    done = _python("import psgd, psgd.cli, psgd.orchestrate.supervisor, psgd.bench.convergence, psgd.bench.tune, "
                   "psgd.bench.plots, psgd.bench.report, psgd.bench.comm_report, psgd.bench.explain, "
                   "psgd.bench.trace, psgd.bench.what_if, psgd.bench.timeline_plot; print('imported')")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "imported"


@pytest.mark.parametrize("args", [
    ["bench", "convergence", "configs/quickstart.yaml", "--modes", "bsp", "--seeds", "1"],
    ["tune", "staleness", "configs/quickstart.yaml", "--bounds", "1,2"],
    ["bench", "apply", "--sizes", "64KB", "--repeats", "1"],
    ["plot", "no-such-run"],
])
def test_plotting_commands_name_the_extra_in_one_line(args, tmp_path):
    done = _cli(*args, "--out", str(tmp_path / "out"))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"psgd {' '.join(args[:2] if args[0] != 'plot' else args[:1])}: plots need matplotlib, which is not "
        "installed: pip install 'psgd[bench]'"]
    assert not (tmp_path / "out").exists()  # refused before any run or measurement


def test_a_bench_without_a_report_needs_no_plots(tmp_path):
    done = _cli("bench", "apply", "--sizes", "64KB", "--optimizers", "sgd", "--repeats", "1", "--json")
    assert done.returncode == 0, done.stderr
    assert '"optimizer": "sgd"' in done.stdout


def test_explain_says_why_it_draws_no_timeline_and_explains_all_the_same(tmp_path):
    import json

    from psgd.config import dump_config, load_config
    (tmp_path / "config.yaml").write_text(dump_config(load_config(None, ["cluster.workers=2"])))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(
        {"t": 0.1 * c, "role": "worker", "index": r, "event": "step", "rank": r, "clock": c, "loss": 1.0,
         "compute_s": 0.05, "comm_s": 0.05, "step_s": 0.1, "gap": 0}) + "\n" for c in range(1, 6) for r in range(2)))
    done = _cli("explain", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["psgd explain: no timeline: plots need matplotlib, which is not installed: "
                                        "pip install 'psgd[bench]'"]
    assert "worker  steps" in done.stdout and not (tmp_path / "timeline.png").exists()

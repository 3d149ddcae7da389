"""Issue 50: what `psgd bench convergence` and `psgd tune staleness` tell a
newcomer at the terminal, on the quickstart on the virtual cluster: the
evaluation spacing a pilot chose, a verdict that separates the modes with no
resolution warning, the caveats report.md states, every file written; the
tuner's bounds that never bind and its by-bound chart; and a misspelled model
refused before any run."""
import re
from pathlib import Path

import pytest
from conftest import run_psgd

from psgd.config.task_sources import BUILTIN_MODEL_NAMES

QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
SHORT = ["--on", "sim", "--set", "train.steps_per_worker=150"]


def _written(stderr: str, out: Path) -> list[str]:
    line = next(ln for ln in stderr.splitlines() if ln.startswith(f"wrote into {out}: "))
    return line.split(": ", 1)[1].split(", ")


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_bench_chooses_its_spacing_separates_the_modes_and_lists_its_files(tmp_path):
    out = tmp_path / "bench"
    # A target of 0.9 in 300 steps: every bsp seed holds it by step 182 (simulated) despite the straggler, and
    # the pilot's first runs (which go to the last step) cost 300 steps, not the quickstart's 500 (with
    # 0.93 in 500 steps: 9,000 simulated gradients; here 5,400).
    # Each run ends at its target (as the pilot's do): what comes after it is not measured, and was half the CPU.
    code, stdout, stderr = run_psgd("bench", "convergence", str(QUICKSTART), "--on", "sim", "--modes", "bsp,asp",
                                    "--seeds", "3", "--set", "workers.slowdown={3: 2.0}",
                                    "--set", "train.stop_at_target=true", "--set", "train.target_accuracy=0.9",
                                    "--set", "train.steps_per_worker=300", "--out", str(out), cwd=tmp_path,
                                    timeout=280)
    assert code == 0, stderr
    spacing = next(ln for ln in stderr.splitlines() if ln.startswith("Evaluation spacing: a pilot of "))
    before = int(re.search(r", (\d+) before it\.$", spacing).group(1))
    assert before >= 20  # evaluations before the fastest pilot's target
    # A 2x straggler holds every bsp step back; asp does not wait for it. (At 4x bsp took twice the
    # simulated time for the same updates, and twice the evaluations at the spacing the pilot chose.)
    assert re.search(r"^Faster than bsp \(ratio interval below 1 - margin\): asp \(", stdout, re.M), stdout
    assert "NOT within 5%" not in stdout and "caveat:" not in stdout
    report = (out / "report.md").read_text()
    assert spacing in report and "(within the 5% limit)" in report
    files = _written(stderr, out)
    assert files[:3] == ["report.md", "summary.csv", "seeds.csv"] and "pilot/ (" in files[-2]
    assert files[-1] == "runs/ (6 runs)"
    assert all((out / f).is_file() for f in files[:-2]) and sum(f.endswith(".png") for f in files) == 4


@pytest.mark.e2e
@pytest.mark.timeout(200)
def test_one_seed_warns_on_the_terminal_in_the_reports_words(tmp_path):
    out = tmp_path / "bench"
    code, stdout, stderr = run_psgd("bench", "convergence", str(QUICKSTART), *SHORT, "--modes", "asp", "--seeds", "1",
                                    "--baseline", "asp", "--set", "eval.every_s=0.5", "--out", str(out),
                                    cwd=tmp_path, timeout=180)
    assert code == 0, stderr
    assert "as set with --set eval.every_s (no pilot)" in stderr and not (out / "pilot").exists()
    caveats = [ln.removeprefix("caveat: ") for ln in stdout.splitlines() if ln.startswith("caveat: ")]
    assert caveats[0].startswith("Only one seed per mode") and "NOT within 5%" in caveats[1]  # 0.5 s: coarse
    report = (out / "report.md").read_text()
    assert all(f"- {c}" in report for c in caveats)


@pytest.mark.e2e
@pytest.mark.timeout(200)
def test_tune_says_which_bounds_never_bind_and_draws_time_by_bound(tmp_path):
    out = tmp_path / "tune"
    code, stdout, stderr = run_psgd("tune", "staleness", str(QUICKSTART), *SHORT, "--bounds", "1,4", "--seeds", "1",
                                    "--lr-grid", "0.1", "--set", "cluster.workers=4", "--out", str(out),
                                    cwd=tmp_path, timeout=180)
    assert code == 0, stderr
    # Four equal workers, no jitter: no worker ever gets a clock ahead, so neither bound waits.
    caveat = next(ln for ln in stdout.splitlines() if ln.startswith("caveat:") and "never bind" in ln)
    assert caveat.startswith("caveat: bounds ≥ 1 never bind here (no worker waited)")
    md = (out / "tune.md").read_text()
    assert caveat.removeprefix("caveat: ") in md and "![held time to target by bound](time_to_target_by_bound.png)" in md
    files = _written(stderr, out)
    assert files[:3] == ["tune.md", "tune.csv", "time_to_target_by_bound.png"]
    assert (out / "time_to_target_by_bound.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.e2e
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", [["bench", "convergence"], ["tune", "staleness"], ["launch"]])
@pytest.mark.parametrize("on", ["sim", "local"])
def test_a_misspelled_model_fails_in_one_line_before_any_run(tmp_path, command, on):
    out = tmp_path / "out"
    code, stdout, stderr = run_psgd(*command, str(QUICKSTART), "--on", on, "--set", "task.model=mlpp",
                                    "--out", str(out), cwd=tmp_path, timeout=100)
    assert code == 2 and stdout == ""
    prefix = "config error: " if command == ["launch"] else ""  # launch's own wording for every config mistake
    assert stderr.splitlines() == [f"psgd {' '.join(command)}: {prefix}task.model: unknown model 'mlpp': the "
                                   f"built-in models are {', '.join(BUILTIN_MODEL_NAMES)}; or give your own as "
                                   "'module.path:callable'"]
    assert not out.exists()  # nothing started, not even the output directory

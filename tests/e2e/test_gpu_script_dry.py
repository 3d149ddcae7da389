"""benchmarks/gpu/run.sh --dry as CI runs it: every check of the GPU script on the CPU, its
CUDA parts skipped and said so, so the script a device session runs cannot rot."""
import json
import subprocess
import sys
import tarfile

import pytest
from conftest import ROOT, kill_tree, spawn

from psgd.sim.calibrate import calibrate
from psgd.tasks.mnist1d import default_cache_dir
from psgd.wire.codecs import CODECS

SCRIPT = ROOT / "benchmarks" / "gpu" / "run.sh"
CHECKS = ["install", "doctor", "quickstart", "comm", "overlap", "mnist1d", "sim-batched", "codecs", "sim-scale"]
IN_ARCHIVE = ("sim-batched", "codecs", "sim-scale")  # their JSON travels in runs.tar.gz (a device run returns 8 files)


def run_script(tmp_path, *args, env=None, timeout=880):
    """run.sh to completion as a real process (its temporary work folder under tmp_path)."""
    proc = spawn(["bash", str(SCRIPT), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                 cwd=str(tmp_path), env={"PSGD_PYTHON": sys.executable, "TMPDIR": str(tmp_path),
                                                  # the signals other tests generated: not made again
                                                  "PSGD_CACHE_DIR": str(default_cache_dir()), **(env or {})})
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        kill_tree(proc)
    return proc.returncode, out, err


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_dry_run_runs_every_check_on_cpu_and_says_what_it_skipped(tmp_path):
    out_dir = tmp_path / "out"
    code, out, err = run_script(tmp_path, "--dry", "--out", str(out_dir))
    assert code == 0, out + err
    assert out.rstrip().endswith("all checks passed")
    # The skipped list is printed, one line per check that stood in for a CUDA part.
    listed = out[out.index("skipped:"):]
    for name in CHECKS:
        assert f"\n  {name}: " in listed, name

    index = json.loads((out_dir / "checks.json").read_text())
    assert index["dry"] and index["ok"] and index["first_failed"] is None
    assert [s["name"] for s in index["steps"]] == CHECKS
    status = {s["name"]: s["status"] for s in index["steps"]}
    assert status == {**dict.fromkeys(CHECKS, "ok"), "install": "skipped"}
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        ["checks.json", "report.md", "runs.tar.gz", "doctor.json", "quickstart.json", "comm.json", "overlap.json",
         "mnist1d.json"])  # at most 8 files come back from a device run
    report = (out_dir / "report.md").read_text()
    assert "dry run" in report and all(f"| {name} |" in report for name in CHECKS)

    docs = {name: json.loads((out_dir / f"{name}.json").read_text()) for name in CHECKS[1:] if name not in IN_ARCHIVE}
    for name, doc in docs.items():
        assert doc["status"] == "ok" and doc["device"] == "cpu" and doc["skipped"], name
    # Without a GPU, the device run's own doctor command reports cuda missing.
    assert docs["doctor"]["doctor"]["failed"] == ["cuda"]
    assert docs["doctor"]["commands"] == ["psgd doctor --device cuda --json"]
    # BSP with plain SGD equals the all-reduce baseline (gloo here) within the stated tolerance.
    exact = docs["quickstart"]["exactness"]
    assert exact["status"] == "ok" and exact["data"]["backend"] == "gloo"
    assert exact["data"]["max_abs_diff"] <= exact["data"]["atol"] and exact["data"]["updates"] == 10
    assert docs["quickstart"]["quickstart"]["worker_devices"] == ["cpu"]
    (row,) = docs["comm"]["bench"]["rows"]
    assert row["size_bytes"] == 64 * 1024 and row["pinned"] is False and row["torch_rpc_ms"] > 0
    assert set(docs["overlap"]["bench"]["points"]) == {"off", "pipeline", "backward"}

    # The simulator's batched path ran (cpu against cpu here) and travels in the archive.
    with tarfile.open(out_dir / "runs.tar.gz") as tar:
        batched = json.load(tar.extractfile("sim-batched.json"))
    assert batched["status"] == "ok" and batched["skipped"]
    (row,) = batched["rows"]
    assert row["workers"] == 4 and row["within_rtol"] == 4 and row["max_relative_error"] == 0.0
    assert row["worst_cpu_vs_float64"] < 1e-5  # the float64 reference agrees with fp32 here

    # Many simulated workers with their gradients on the device (the cpu here) against few on the cpu.
    with tarfile.open(out_dir / "runs.tar.gz") as tar:
        scale = json.load(tar.extractfile("sim-scale.json"))
    assert scale["status"] == "ok" and scale["runs"]["device"]["workers"] > scale["runs"]["cpu"]["workers"]
    for run in scale["runs"].values():
        assert run["sim_gradients"]["device"] == run["gradient_device"] == "cpu"
        assert run["sim_gradients"]["batched_steps"] > 0 and run["summary"]["status"] == "ok"
    assert scale["scaled_cpu_s"] > 0

    # Every push codec from tensors of every shape (cpu standing in for cuda): each round trip
    # within its codec's stated bound, the same bytes as the flat cpu encoding, error feedback
    # losing nothing and keeping the cpu's residual; the int8 quickstart needs a GPU.
    with tarfile.open(out_dir / "runs.tar.gz") as tar:
        codecs = json.load(tar.extractfile("codecs.json"))
    assert codecs["status"] == "ok" and "no quickstart run" in codecs["skipped"] and "quickstart_int8" not in codecs
    assert sorted(codecs["codecs"]) == sorted(name for name, c in CODECS.items() if name != "none")
    trips = codecs["round_trips"]
    assert {tuple(r["shape"]) for r in trips} >= {(1,), (63,), (33, 77), (3, 5, 7, 11)}
    assert len(trips) == len(codecs["codecs"]) * len({tuple(r["shape"]) for r in trips})
    assert all(r["within_bound"] and r["max_error_of_bound"] <= 1 and r["identical"] for r in trips)
    fed = {r["codec"]: r for r in codecs["feedback"]}
    assert sorted(fed) == sorted(name for name, c in CODECS.items() if c.error_feedback)
    for r in fed.values():
        assert r["loses_nothing"] and r["max_gap"] <= r["max_slack"] and r["residual_max"] > 0
        assert r["residual_equals_cpu"] and r["identical_pushes"] == r["pushes"]
    assert [r["codec"] for r in codecs["timings"]] == codecs["codecs"]
    assert all(r["device_s"] > 0 and r["cpu_s"] > 0 for r in codecs["timings"])

    # The MNIST-1D runs travel as run directories the simulator calibrates from: calibrating
    # the archived copy gives the very sim: section the check recorded.
    with tarfile.open(out_dir / "runs.tar.gz") as tar:
        names = tar.getnames()
        tar.extractall(tmp_path / "runs", filter="data")
    assert "logs/run-mnist1d.log" in names
    for mode in ("asp", "bsp"):
        recorded = docs["mnist1d"]["modes"][mode]
        assert recorded["summary"]["mode"] == mode and recorded["worker_devices"] == ["cpu"]
        # What `psgd sim calibrate DIR --json` prints, in this process (its own CLI test runs the command).
        calibrated = calibrate(tmp_path / "runs" / f"mnist1d-{mode}")
        assert json.loads(json.dumps(calibrated.sim)) == recorded["sim"] and recorded["sim"]["compute_ms"] > 0


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_failing_check_fails_the_script_naming_the_first_one(tmp_path):
    code, _, err = run_script(tmp_path, "--dry", "--bogus", timeout=30)
    assert code == 2 and "unknown argument --bogus" in err
    # A psgd that cannot be imported (a broken package ahead on the path): every check fails,
    # the report is still written (it needs only the standard library), doctor is named first.
    broken = tmp_path / "broken" / "psgd"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("this psgd is broken on purpose")\n')
    out_dir = tmp_path / "out"
    code, out, err = run_script(tmp_path, "--dry", "--out", str(out_dir), env={"PYTHONPATH": str(broken.parent)},
                                timeout=280)
    assert code == 1, out + err
    assert "FAILED: doctor" in err
    index = json.loads((out_dir / "checks.json").read_text())
    assert not index["ok"] and index["first_failed"] == "doctor"
    assert {s["name"]: s["status"] for s in index["steps"]}["mnist1d"] == "failed"
    assert "first failure: **doctor**" in (out_dir / "report.md").read_text()

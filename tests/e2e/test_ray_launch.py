"""`psgd launch --on ray` against a local Ray instance started by the test
(ray.init(num_cpus=2)): the quickstart job reaches the local launcher's
accuracy and leaves the same run directory."""
import csv
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import ray
from conftest import ROOT, kill_tree, psgd_cmd, run_psgd, spawn, wait_for
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

pytestmark = pytest.mark.e2e

QUICKSTART = ROOT / "configs" / "quickstart.yaml"
# Seven processes on a 2-CPU Ray instance: each role asks for a quarter of a CPU.
QUARTER_CPU = ["--set", "ray.server.num_cpus=0.25", "--set", "ray.worker.num_cpus=0.25",
               "--set", "ray.evaluator.num_cpus=0.25"]
# Three roles (one shard, one worker, the evaluator) where the quickstart job is not the point: each
# is an actor and a process that imports torch, about 6 s of CPU on two cores.
SMALL_STEPS = 50
SMALL_JOB = ["--set", "cluster.servers=1", "--set", "cluster.workers=1", "--set", f"train.steps_per_worker={SMALL_STEPS}"]
SMALL_ROLES = ["server-0", "worker-0", "evaluator-0"]


@pytest.fixture(scope="module")
def ray_address():
    # No idle workers started ahead of use (each an interpreter importing Ray): every role is an actor of its own.
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False,
             _system_config={"enable_worker_prestart": False, "prestart_worker_first_driver": False})
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _tree(run_dir: Path) -> dict[str, list[str]]:
    """Top-level entries and the files inside each folder of a run directory."""
    tree = {".": sorted(p.name for p in run_dir.iterdir())}
    for sub in run_dir.iterdir():
        if sub.is_dir():
            names = sorted(p.name for p in sub.iterdir())
            # TensorBoard names its files by host, time and pid: compare their number only. A shard's
            # push logs are numbered by the snapshot they follow (checkpoint.every_s): a run a few
            # seconds longer has later numbers, so compare the files, not their numbers.
            if sub.name == "checkpoints":
                names = sorted(re.sub(r"\.log\.\d+$", ".log.N", n) for n in names)
            tree[sub.name] = len(names) if sub.name == "tensorboard" else names
    return tree


def _check_exports(run_dir: Path) -> None:
    """metrics.csv has one row per evaluation; TensorBoard has accuracy and staleness."""
    evals = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
             if '"event": "eval"' in line]
    with open(run_dir / "metrics.csv", newline="") as f:  # pandas is not among psgd's dependencies
        rows = list(csv.DictReader(f))
    assert [float(r["test_accuracy"]) for r in rows] == [e["accuracy"] for e in evals]
    assert [int(r["updates"]) for r in rows] == [max(e["versions"]) for e in evals]
    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    assert [s.value for s in acc.Scalars("test/accuracy")] == pytest.approx([e["accuracy"] for e in evals])
    assert len(acc.Scalars("staleness/mean")) == len(evals) and acc.Histograms("staleness")


@pytest.mark.timeout(240)
def test_quickstart_on_ray_matches_the_local_launcher(ray_address, tmp_path):
    # 300 steps a worker reach the target as the config's 500 do (tests/e2e/test_ray_two_nodes.py).
    sets = ["--set", "logging.tensorboard=true", "--set", "train.steps_per_worker=300"]
    code, _, err = run_psgd("launch", str(QUICKSTART), "--on", "ray", "--address", ray_address, *QUARTER_CPU,
                            *sets, "--out", str(tmp_path / "ray"), "--quiet", cwd=tmp_path, timeout=200)
    assert code == 0, err
    code, _, err = run_psgd("launch", str(QUICKSTART), *sets, "--out", str(tmp_path / "local"), "--quiet",
                            cwd=tmp_path, timeout=200)
    assert code == 0, err
    on_ray, local = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("ray", "local"))
    assert _tree(tmp_path / "ray") == _tree(tmp_path / "local")
    assert "processes.json" not in _tree(tmp_path / "ray")["."]
    assert set(on_ray) == set(local)
    for s in (on_ray, local):
        assert s["status"] == "ok" and s["total_updates"] == 1200 and s["worker_steps"] == 1200
        assert s["final_test_accuracy"] >= 0.93  # quickstart's target
    assert math.isclose(on_ray["final_test_accuracy"], local["final_test_accuracy"], abs_tol=0.03)
    assert "launcher: ray" in (tmp_path / "ray" / "config.yaml").read_text()
    for run in ("ray", "local"):
        _check_exports(tmp_path / run)


@pytest.mark.timeout(120)
def test_requests_beyond_the_cluster_fail_up_front_naming_the_keys(ray_address, tmp_path):
    # One CPU per role (the default) is 7 CPUs: more than the instance has.
    code, _, err = run_psgd("launch", str(QUICKSTART), "--on", "ray", "--address", ray_address,
                            "--out", str(tmp_path / "run"), "--quiet", cwd=tmp_path, timeout=100)
    assert code == 1
    assert "asks Ray for 7 CPU" in err and "has 2 CPU" in err and "ray.worker.num_cpus=1" in err, err
    assert not (tmp_path / "run" / "events").exists()  # no role was started


@pytest.mark.timeout(120)
def test_psgd_launch_with_cluster_launcher_ray_runs_on_ray(ray_address, tmp_path):
    # The Python API in a process of its own (this one is already Ray's driver); only Ray's
    # launcher measures the job against the cluster's CPUs, so its refusal shows where the job went.
    code = ("import sys, psgd\n"
            "try:\n"
            "    psgd.launch(sys.argv[1], overrides=sys.argv[3:], out=sys.argv[2])\n"
            "except psgd.LaunchError as exc:\n"
            "    print(exc.reason)\n")
    done = subprocess.run([sys.executable, "-c", code, str(QUICKSTART), str(tmp_path / "run"),
                           "cluster.launcher=ray", f"ray.address={ray_address}"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=100)
    assert done.returncode == 0, done.stderr
    assert "asks Ray for 7 CPU" in done.stdout and "has 2 CPU" in done.stdout, done.stdout
    assert not (tmp_path / "run" / "events").exists()  # no role was started


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _command(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.mark.timeout(150)
def test_ctrl_c_stops_every_role_and_says_how_to_resume(ray_address, tmp_path):
    out = tmp_path / "run"
    cmd = psgd_cmd("launch", str(QUICKSTART), "--on", "ray", "--address", ray_address, *QUARTER_CPU, *SMALL_JOB,
                   "--out", str(out), "--quiet", "--set", "train.steps_per_worker=100000",
                   "--set", "checkpoint.every_s=0.5")
    proc = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(tmp_path))
    try:
        assert wait_for(lambda: (out / "start.json").exists() and any((out / "checkpoints").glob("*")), timeout=100)
        pids = [e["pid"] for e in json.loads((out / "processes.json").read_text())]
        assert len(pids) == len(SMALL_ROLES) and all(_alive(p) for p in pids)
        # Forked by one process that imported torch once for them all: the run's zygote on this node.
        parents = {_parent(p) for p in pids}
        assert len(parents) == 1 and "psgd.orchestrate.ray.zygote" in _command(parents.pop()), pids
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: the whole foreground group
        t = time.monotonic()
        output, _ = proc.communicate(timeout=60)
        stopped_in = time.monotonic() - t
    finally:
        kill_tree(proc)
    assert proc.returncode == 128 + signal.SIGINT, output
    assert f"continue this run with: psgd launch --resume {out}" in output
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"
    assert not any(_alive(p) for p in pids), "a role outlived the launcher"
    assert stopped_in < 30, stopped_in  # the roles get the local launcher's 4 s; Ray's shutdown adds its own


# The launcher's token file under another name: the actors cannot find it, so they
# behave as on other nodes without a shared filesystem (a directory of their own).
NOT_SHARED = """
import sys
import psgd.orchestrate.ray.launcher as ray_launcher
ray_launcher.TOKEN_FILE = "token-the-actors-do-not-look-for"
from psgd.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timeout(200)
def test_without_a_shared_directory_events_logs_and_model_come_back_through_ray(ray_address, tmp_path):
    before = set(Path(tempfile.gettempdir()).glob("psgd-ray-*"))
    out = tmp_path / "run"
    try:
        proc = spawn([sys.executable, "-c", NOT_SHARED, "launch", str(QUICKSTART), "--on", "ray", "--address",
                      ray_address, *QUARTER_CPU, *SMALL_JOB, "--out", str(out), "--quiet"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(tmp_path))
        try:
            output, _ = proc.communicate(timeout=180)
        finally:
            kill_tree(proc)
        assert proc.returncode == 0, output
        private = set(Path(tempfile.gettempdir()).glob("psgd-ray-*")) - before
        assert len(private) == len(SMALL_ROLES)  # one directory per actor: the run directory was not shared
    finally:
        for d in set(Path(tempfile.gettempdir()).glob("psgd-ray-*")) - before:
            shutil.rmtree(d, ignore_errors=True)
    names = SMALL_ROLES
    assert sorted(p.stem for p in (out / "events").glob("*.jsonl")) == sorted(names)
    assert sorted(p.stem for p in (out / "logs").glob("*.log")) == sorted(names)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["total_updates"] == summary["worker_steps"] == SMALL_STEPS
    events = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    mirrored = [json.loads(line) for name in names
                for line in (out / "events" / f"{name}.jsonl").read_text().splitlines()]
    assert sorted(map(json.dumps, events)) == sorted(map(json.dumps, mirrored))
    assert (out / "model.pt").stat().st_size > 0 and not (out / "checkpoints").exists()  # checkpoints stay on the node

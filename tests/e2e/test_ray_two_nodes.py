"""`psgd launch --on ray` on a two-node Ray cluster made of two network
namespaces (tests/support/ray_cluster.py): node A (the head, `node_a`) shares
the filesystem with the launcher; node B (`node_b`) has its own /tmp and
/dev/shm, so what its roles write comes back only through Ray. Every Ray test
is here, on one cluster: starting one costs more than most tests."""
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import pytest
from conftest import ROOT, kill_tree, run_psgd, wait_for
from support.ray_cluster import NODE_CPUS, SetupFailed, TwoNodeRay, leftovers, lent_past_tmp, unsupported
from support.ray_runs import alive, check_exports, command, parent, tree

from psgd.config import load_config

pytestmark = pytest.mark.e2e


def _cluster():
    reason = unsupported()
    if reason is not None:
        pytest.skip(reason)
    cluster = TwoNodeRay()
    try:
        cluster.start()
    except SetupFailed as exc:
        if "netns add" in str(exc):  # this machine cannot make namespaces: not a psgd failure
            pytest.skip(f"cannot create network namespaces here: {exc}")
        raise
    return cluster


def _teardown(cluster: TwoNodeRay) -> None:
    left = cluster.close() + leftovers(cluster.token)
    assert left == [], f"left behind: {left}"


@pytest.fixture(scope="module")
def cluster():
    """One cluster for the whole file: making one costs more than most tests here."""
    made = _cluster()
    try:
        yield made
    finally:
        _teardown(made)


@pytest.fixture
def two_nodes(cluster):
    """The file's cluster with both nodes up. A test that killed node B leaves it
    to be started again here: a fresh node B, as a replaced host would be. (The tests
    that kill node B come last: the no-room and elastic tests start it again themselves,
    and the restart test, which leaves it down, is the last. Each start of node B is a
    raylet, Ray's agents and a zygote: seconds of CPU.)"""
    if not cluster.node_b_up():
        cluster.start_node_b()
    return cluster


NODES = """
import json, ray
ray.init(address=%r, include_dashboard=False, log_to_driver=False, configure_logging=False)
@ray.remote(num_cpus=0.1)
def where():
    import tempfile, os
    return ray.util.get_node_ip_address(), sorted(os.listdir(tempfile.gettempdir()))
print(json.dumps({"resources": ray.cluster_resources(),
                  "a": ray.get(where.options(resources={"node_a": 1}).remote()),
                  "b": ray.get(where.options(resources={"node_b": 1}).remote())}))
"""


@pytest.mark.timeout(120)
def test_the_two_nodes_are_two_hosts_to_ray(two_nodes):
    res = subprocess.run(two_nodes.on_a([sys.executable, "-c", NODES % two_nodes.address]),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    assert seen["resources"]["node_a"] == 8 and seen["resources"]["node_b"] == 8
    assert f"node:{two_nodes.ip_a}" in seen["resources"] and f"node:{two_nodes.ip_b}" in seen["resources"]
    assert seen["a"][0] == two_nodes.ip_a and seen["b"][0] == two_nodes.ip_b
    # Node B's /tmp is its own: only its Ray session is there (and this checkout, where it lives under /tmp).
    assert seen["b"][1] == sorted({"psgd-rt", *(Path(p).relative_to("/tmp").parts[0] for p in lent_past_tmp())})


QUICKSTART = ROOT / "configs" / "quickstart.yaml"
# The quickstart job (2 shards, the evaluator, target 0.93) with 2 workers, not 4, in half-CPU
# actors: every role is an actor and a process importing torch (about 6 s of CPU) on two cores
# shared with the two Ray nodes. Two of each role still put one on either node; the full quickstart
# on Ray is test_quickstart_on_ray_matches_the_local_launcher's. 600 steps each: the 1200 updates the 4 x 300 had (at
# 600 updates, one local seed of three ended at 0.933).
WORKERS, STEPS = 2, 600
SMALL = ["--set", "ray.server.num_cpus=0.5", "--set", "ray.worker.num_cpus=0.5",
         "--set", "ray.evaluator.num_cpus=0.5", "--set", f"train.steps_per_worker={STEPS}",
         "--set", f"cluster.workers={WORKERS}"]


def _launch(cluster: TwoNodeRay, out: Path, *sets: str, timeout: float = 100, address=True, env=None):
    """`psgd launch --on ray` from node A; (exit code, output)."""
    where = ["--address", cluster.address] if address else []
    proc = cluster.psgd_on_a(["launch", str(QUICKSTART), "--on", "ray", *where, "--out", str(out), "--quiet",
                              *SMALL, *sets], out.parent, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    finally:
        kill_tree(proc)
    return proc.returncode, output


def _events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _nodes(events: list[dict]) -> dict[str, str]:
    """'role-index' -> the node it last became ready on."""
    return {f"{e['role']}-{e['index']}": e["node"] for e in events if e.get("event") == "ready"}


def _check_complete(out: Path, summary: dict, names: list[str]) -> None:
    """The usual run directory on the launching node, whatever node each role ran on."""
    assert summary["status"] == "ok" and summary["final_test_accuracy"] >= 0.93, summary
    assert summary["total_updates"] == summary["worker_steps"] == WORKERS * STEPS  # every acknowledged push applied
    assert sorted(p.stem for p in (out / "logs").glob("*.log")) == sorted(names)  # node B's came through Ray
    assert (out / "model.pt").stat().st_size > 0 and (out / "metrics.csv").is_file()
    assert not (out / "processes.json").exists()


ALL = ["server-0", "server-1", *(f"worker-{r}" for r in range(WORKERS)), "evaluator-0"]


@pytest.mark.timeout(120)
def test_shards_on_node_a_workers_and_evaluator_on_node_b(two_nodes, tmp_path):
    out = tmp_path / "run"
    code, output = _launch(two_nodes, out, "--set", "ray.server.resources={node_a: 1}",
                           "--set", "ray.worker.resources={node_b: 1}", "--set", "ray.evaluator.resources={node_b: 1}")
    assert code == 0, output[-3000:]
    events = _events(out)
    nodes = _nodes(events)
    assert nodes == {n: two_nodes.ip_a if n.startswith("server") else two_nodes.ip_b for n in ALL}
    # The shards bound node A's address, which node B reaches (not loopback).
    bound = sorted(e["address"] for e in events if e["role"] == "server" and e["event"] == "ready")
    assert len(bound) == 2 and all(a.startswith(f"tcp://{two_nodes.ip_a}:") for a in bound), bound
    _check_complete(out, json.loads((out / "summary.json").read_text()), ALL)
    assert load_config(out / "config.yaml").ray.address == two_nodes.address  # --address, kept for --resume
    # Node B's roles wrote in a /tmp of their own: their events reached the run directory through Ray.
    assert sorted(p.stem for p in (out / "events").glob("*.jsonl")) == sorted(ALL)


@pytest.mark.timeout(120)
def test_ray_address_in_the_environment_spreads_servers_and_workers_over_both_nodes(two_nodes, tmp_path):
    out = tmp_path / "run"
    # No resources: `scheduling: spread`, the default. No --address either: RAY_ADDRESS names the cluster
    # (a local instance would have put every role on node A).
    code, output = _launch(two_nodes, out, address=False, env={"RAY_ADDRESS": two_nodes.address})
    assert code == 0, output[-3000:]
    events = _events(out)
    nodes = _nodes(events)
    assert set(nodes) == set(ALL)
    for role in ("server", "worker"):
        assert {ip for n, ip in nodes.items() if n.startswith(role)} == {two_nodes.ip_a, two_nodes.ip_b}, nodes
    bound = {e["index"]: e["address"] for e in events if e["role"] == "server" and e["event"] == "ready"}
    assert bound == {i: f"tcp://{nodes[f'server-{i}']}:{bound[i].rsplit(':', 1)[1]}" for i in (0, 1)}
    _check_complete(out, json.loads((out / "summary.json").read_text()), ALL)
    # The shard on node B recorded into its own /tmp: its record came back, and the run replays exactly.
    code, stdout, stderr = run_psgd("replay", str(out), "--json", cwd=tmp_path, timeout=60)
    assert code == 0 and json.loads(stdout)["identical"], (stdout, stderr)


# ---- `psgd launch --on ray` as the local launcher runs it ------------------------------------------
# On this file's cluster (one Ray cluster for every Ray test, not a local instance besides): the roles
# pinned to node A where the run directory is shared, as on one machine, and to node B where it is not.
QUARTER_CPU = ["--set", "ray.server.num_cpus=0.25", "--set", "ray.worker.num_cpus=0.25",
               "--set", "ray.evaluator.num_cpus=0.25"]
ON_A = ["--set", "ray.server.resources={node_a: 1}", "--set", "ray.worker.resources={node_a: 1}",
        "--set", "ray.evaluator.resources={node_a: 1}"]
ON_B = [s.replace("node_a", "node_b") for s in ON_A]
# Three roles (one shard, one worker, the evaluator) where the quickstart job is not the point: each
# is an actor and a process.
SMALL_STEPS = 50
SMALL_JOB = ["--set", "cluster.servers=1", "--set", "cluster.workers=1", "--set", f"train.steps_per_worker={SMALL_STEPS}"]
SMALL_ROLES = ["server-0", "worker-0", "evaluator-0"]


def _on_a(cluster: TwoNodeRay, args: list[str], cwd: Path, timeout: float) -> tuple[int, str, str]:
    """`psgd ARGS` on node A to completion: (exit code, stdout, stderr)."""
    proc = cluster.psgd_on_a(args, cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        kill_tree(proc)
    return proc.returncode, stdout, stderr


@pytest.mark.timeout(240)
def test_quickstart_on_ray_matches_the_local_launcher(cluster, tmp_path):
    # 300 steps a worker reach the target as the config's 500 do (the two-node runs above).
    sets = ["--set", "logging.tensorboard=true", "--set", "train.steps_per_worker=300"]
    code, _, err = _on_a(cluster, ["launch", str(QUICKSTART), "--on", "ray", "--address", cluster.address,
                                   *QUARTER_CPU, *ON_A, *sets, "--out", str(tmp_path / "ray"), "--quiet"],
                         tmp_path, timeout=200)
    assert code == 0, err
    code, _, err = run_psgd("launch", str(QUICKSTART), *sets, "--out", str(tmp_path / "local"), "--quiet",
                            cwd=tmp_path, timeout=200)
    assert code == 0, err
    on_ray, local = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("ray", "local"))
    assert tree(tmp_path / "ray") == tree(tmp_path / "local")
    assert "processes.json" not in tree(tmp_path / "ray")["."]
    assert set(on_ray) == set(local)
    for s in (on_ray, local):
        assert s["status"] == "ok" and s["total_updates"] == 1200 and s["worker_steps"] == 1200
        assert s["final_test_accuracy"] >= 0.93  # quickstart's target
    assert math.isclose(on_ray["final_test_accuracy"], local["final_test_accuracy"], abs_tol=0.03)
    assert "launcher: ray" in (tmp_path / "ray" / "config.yaml").read_text()
    for run in ("ray", "local"):
        check_exports(tmp_path / run)


def _too_big() -> tuple[list[str], int, int]:
    """A job of one CPU per role (the default) with more roles than both nodes have CPUs:
    (its --set arguments, the CPUs it asks for, the CPUs the cluster has)."""
    have = 2 * NODE_CPUS
    cfg = load_config(QUICKSTART, [f"cluster.workers={have}"])
    return ["--set", f"cluster.workers={have}"], cfg.cluster.num_servers + have + 1, have


@pytest.mark.timeout(120)
def test_requests_beyond_the_cluster_fail_up_front_naming_the_keys(two_nodes, tmp_path):
    sets, need, have = _too_big()
    code, _, err = _on_a(two_nodes, ["launch", str(QUICKSTART), "--on", "ray", "--address", two_nodes.address,
                                     *sets, "--out", str(tmp_path / "run"), "--quiet"], tmp_path, timeout=100)
    assert code == 1
    assert f"asks Ray for {need} CPU" in err and f"has {have} CPU" in err and "ray.worker.num_cpus=1" in err, err
    assert not (tmp_path / "run" / "events").exists()  # no role was started


@pytest.mark.timeout(120)
def test_psgd_launch_with_cluster_launcher_ray_runs_on_ray(two_nodes, tmp_path):
    # The Python API in a process of its own on node A; only Ray's launcher measures the job
    # against the cluster's CPUs, so its refusal shows where the job went.
    sets, need, have = _too_big()
    code = ("import sys, psgd\n"
            "try:\n"
            "    psgd.launch(sys.argv[1], overrides=sys.argv[3:], out=sys.argv[2])\n"
            "except psgd.LaunchError as exc:\n"
            "    print(exc.reason)\n")
    done = subprocess.run(two_nodes.on_a([sys.executable, "-c", code, str(QUICKSTART), str(tmp_path / "run"),
                                          "cluster.launcher=ray", f"ray.address={two_nodes.address}", sets[1]]),
                          capture_output=True, text=True, cwd=tmp_path, timeout=100)
    assert done.returncode == 0, done.stderr
    assert f"asks Ray for {need} CPU" in done.stdout and f"has {have} CPU" in done.stdout, done.stdout
    assert not (tmp_path / "run" / "events").exists()  # no role was started


@pytest.mark.timeout(150)
def test_ctrl_c_stops_every_role_and_says_how_to_resume(cluster, tmp_path):
    out = tmp_path / "run"
    proc = cluster.psgd_on_a(["launch", str(QUICKSTART), "--on", "ray", "--address", cluster.address, *QUARTER_CPU,
                              *ON_A, *SMALL_JOB, "--out", str(out), "--quiet", "--set", "train.steps_per_worker=100000",
                              "--set", "checkpoint.every_s=0.5"], tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for(lambda: (out / "start.json").exists() and any((out / "checkpoints").glob("*")), timeout=100)
        pids = [e["pid"] for e in json.loads((out / "processes.json").read_text())]
        assert len(pids) == len(SMALL_ROLES) and all(alive(p) for p in pids)
        # Forked by one process that imported torch once for them all: the zygote on this node.
        parents = {parent(p) for p in pids}
        zygote = parents.pop()
        assert parents == set() and "psgd.orchestrate.ray.zygote" in command(zygote), pids
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: the whole foreground group
        t = time.monotonic()
        output, _ = proc.communicate(timeout=60)
        stopped_in = time.monotonic() - t
    finally:
        kill_tree(proc)
    assert proc.returncode == 128 + signal.SIGINT, output
    assert f"continue this run with: psgd launch --resume {out}" in output
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"
    assert not any(alive(p) for p in pids), "a role outlived the launcher"
    assert stopped_in < 30, stopped_in  # the roles get the local launcher's 4 s; Ray's shutdown adds its own
    assert alive(zygote)  # it stays for the next run on this node


@pytest.mark.timeout(200)
def test_without_a_shared_directory_events_logs_and_model_come_back_through_ray(two_nodes, tmp_path):
    # Every role on node B, whose /tmp is its own: the run directory is out of its actors' sight.
    node_b_tmp = two_nodes.node_b_tmp()
    before = set(node_b_tmp.glob("psgd-ray-*"))
    out = tmp_path / "run"
    try:
        code, _, err = _on_a(two_nodes, ["launch", str(QUICKSTART), "--on", "ray", "--address", two_nodes.address,
                                         *QUARTER_CPU, *ON_B, *SMALL_JOB, "--out", str(out), "--quiet"],
                             tmp_path, timeout=180)
        assert code == 0, err
        private = set(node_b_tmp.glob("psgd-ray-*")) - before
        assert len(private) == len(SMALL_ROLES)  # one directory per actor: the run directory was not shared
    finally:
        for d in set(node_b_tmp.glob("psgd-ray-*")) - before:
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


# ---- a lost node ---------------------------------------------------------------------------------
# A restart can take longer than cluster.timeout_s (10 s) on a loaded machine; a rank the shards
# timed out first rejoins at the slowest other rank's clock (psgd/core/clocks.py) and pushes fewer
# steps. A longer timeout makes every restarted rank take its own over, so the counts are exact.
KEEP_RANKS = ["--set", "cluster.timeout_s=60"]


def _launch_and_kill_node_b(cluster: TwoNodeRay, out: Path, *sets: str, after_steps: int,
                            once_lost: Optional[Callable[[], None]] = None):
    """Start the job, SIGKILL everything on node B once `after_steps` steps are in
    metrics.jsonl; `once_lost` runs once the launcher has recorded the loss (and
    so decided what to do about it), while the job stops. (exit code, output)."""
    proc = cluster.psgd_on_a(["launch", str(QUICKSTART), "--on", "ray", "--address", cluster.address, "--out",
                              str(out), "--quiet", *SMALL, *KEEP_RANKS, *sets], out.parent,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        metrics = out / "metrics.jsonl"
        assert wait_for(lambda: metrics.exists() and metrics.read_text().count('"event": "step"') >= after_steps,
                        timeout=75, interval=0.1), "training did not get going"
        assert cluster.kill_node_b(), "nothing was running on node B"
        if once_lost is not None:
            assert wait_for(lambda: '"event": "node_lost"' in metrics.read_text(), timeout=60, interval=0.1)
            once_lost()
        output, _ = proc.communicate(timeout=75)
        return proc.returncode, output
    finally:
        kill_tree(proc)


def _check_applied_once(events: list[dict], summary: dict, workers: int, steps: int) -> None:
    """Exactly once, from the shards' final figures: every rank reached its last
    clock, no clock was skipped, and each shard applied every push once. A push the
    kill cut between the two shards reached one only (the shards' partial_pushes)."""
    done = {e["rank"]: e for e in events if e.get("event") == "done"}
    assert {r: d["clock"] for r, d in done.items()} == {r: steps for r in range(workers)}
    last = {}
    for e in events:
        if e.get("event") == "server_stats":
            last[e["index"]] = e
    assert sorted(last) == [0, 1] and all(e["final"] for e in last.values()), last  # their word at the stop
    partial = {s: e["counters"].get("partial_pushes", 0) for s, e in last.items()}
    pushed = sum(d["seqs"] for d in done.values())  # every seq used, killed incarnations included
    assert pushed == workers * steps + sum(partial.values()), (pushed, partial)
    assert {s: e["version"] + partial[s] for s, e in last.items()} == {0: pushed, 1: pushed}
    assert summary["total_updates"] == max(e["version"] for e in last.values())
    assert summary["partial_pushes"] == sum(partial.values())


@pytest.mark.timeout(120)
def test_a_lost_worker_node_with_no_room_left_stops_with_checkpoints_and_resumes_when_it_is_back(
        two_nodes, tmp_path):
    cluster, out = two_nodes, tmp_path / "run"
    # Two workers, both on node B: the fewest processes that show it (this test starts the job twice).
    code, output = _launch_and_kill_node_b(
        cluster, out, "--set", "train.steps_per_worker=200",
        "--set", "ray.server.resources={node_a: 1}", "--set", "ray.evaluator.resources={node_a: 1}",
        "--set", "ray.worker.resources={node_b: 1}", "--set", "checkpoint.every_s=0.5", after_steps=60,
        once_lost=cluster.start_node_b)  # node B rejoins while the job stops: it has decided by then
    assert code == 1, output
    line = (f"lost Ray node {cluster.ip_b} (its node left the Ray cluster): worker 0, worker 1; "
            "no live Ray node has room for worker 0 (ray.worker.num_cpus=0.5, ray.worker.resources.node_b=1)")
    assert line in output, output
    assert f"continue this run with: psgd launch --resume {out}" in output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and line in summary["failure"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()), "no checkpoints kept"
    assert (out / "model.pt").is_file()  # the evaluator, on node A, took its final measurement
    n_before = len(_events(out))

    # Node B is back: the printed command finishes the run, every push applied once.
    proc = cluster.psgd_on_a(["launch", "--resume", str(out), "--quiet"], tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=80)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, output[-3000:]
    after = _events(out)[n_before:]
    assert {e["index"] for e in after if e.get("event") == "resumed"} == {0, 1}  # both shards, from checkpoints
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok"
    _check_applied_once(after, summary, workers=2, steps=200)


@pytest.mark.timeout(300)
def test_elastic_workers_follow_the_nodes(two_nodes, tmp_path):
    """cluster.workers {min: 1, max: 4} with 2.5-CPU workers: node A (4 CPUs, two half-CPU
    shards) holds worker 0, node B (4 CPUs) one more. The run grows onto node B, loses that
    worker with it and goes on, then grows again when node B joins the cluster anew; once the
    new worker has trained, Ctrl-C ends it (a time limit would only add waiting). (Losing
    several roles with one node: the no-room test above.)"""
    cluster, out = two_nodes, tmp_path / "run"
    metrics = out / "metrics.jsonl"

    def changes(kind):
        if not metrics.exists():
            return []
        return [e for e in _events(out) if e.get("event") == "membership" and e["change"] == kind]

    def trained_since_the_last_join():
        events = _events(out)
        joins = [i for i, e in enumerate(events) if e.get("event") == "membership" and e["change"] == "joined"]
        return len(joins) == 2 and events[joins[-1]]["rank"] in {
            e["rank"] for e in events[joins[-1]:] if e.get("event") == "step"}

    proc = cluster.psgd_on_a([
        "launch", str(QUICKSTART), "--on", "ray", "--address", cluster.address, "--out", str(out), "--quiet",
        "--set", "cluster.workers={min: 1, max: 4}", "--set", "consistency.mode=ssp",
        "--set", "consistency.staleness=2", "--set", "cluster.timeout_s=2", "--set", "cluster.heartbeat_s=0.5",
        "--set", "ray.server.num_cpus=0.5", "--set", "ray.server.resources={node_a: 1}",
        "--set", "ray.worker.num_cpus=2.5", "--set", "eval.enabled=false",
        "--set", "workers.device_ms=20", "--set", "train.steps_per_worker=100000"], tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for(lambda: len(changes("joined")) == 1, timeout=90, interval=0.2), "no worker joined on node B"
        assert cluster.kill_node_b(), "nothing was running on node B"
        assert wait_for(lambda: len(changes("left")) == 1, timeout=60, interval=0.2), "node B's worker stayed"
        cluster.start_node_b()
        assert wait_for(lambda: len(changes("joined")) == 2, timeout=60, interval=0.2), "node B's return added none"
        assert wait_for(trained_since_the_last_join, timeout=60, interval=0.2), "the new worker did not train"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: every role stops cleanly and reports
        output, _ = proc.communicate(timeout=60)
    finally:
        kill_tree(proc)
    assert proc.returncode == 128 + signal.SIGINT, output[-3000:]
    events = _events(out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["restarts"] == 0
    order = [(c["change"], c["rank"], c["cause"]) for c in summary["membership_changes"]]
    assert order == [("joined", 1, "scaled_up"), ("left", 1, "lost"), ("joined", 1, "scaled_up")]
    lost = [e for e in events if e.get("event") == "node_lost"]
    assert len(lost) == 1 and "the run goes on without worker 1" in lost[0]["line"]
    nodes = [(e["index"], e["node"]) for e in events if e.get("event") == "ready" and e["role"] == "worker"]
    assert nodes == [(0, cluster.ip_a), (1, cluster.ip_b), (1, cluster.ip_b)]
    finals = {e["index"]: e for e in events if e.get("event") == "server_stats" and e.get("final")}
    assert sorted(finals) == [0, 1] and all(f["live"]["max_gap_over_bound"] <= 0 for f in finals.values())
    assert all(f["counters"]["pushes"] == f["version"] for f in finals.values())  # each push applied once


@pytest.mark.timeout(120)
def test_a_lost_worker_node_has_its_roles_restarted_on_the_other_node(two_nodes, tmp_path):
    cluster, out = two_nodes, tmp_path / "run"
    code, output = _launch_and_kill_node_b(cluster, out, "--set", "ray.server.resources={node_a: 1}",
                                           "--set", "supervision.max_restarts=1", after_steps=100)
    assert code == 0, output[-3000:]
    events = _events(out)
    first = {}
    for e in events:
        if e.get("event") == "ready":
            first.setdefault(f"{e['role']}-{e['index']}", e["node"])
    on_b = sorted(n for n, ip in first.items() if ip == cluster.ip_b)
    assert any(n.startswith("worker") for n in on_b), first  # spread put workers on node B
    # One line names the node, every role it took and why; the CLI printed it.
    lost = [e for e in events if e.get("event") == "node_lost"]
    assert len(lost) == 1 and lost[0]["node"] == cluster.ip_b and sorted(lost[0]["roles"]) == on_b
    assert lost[0]["restarted"] and "its node left the Ray cluster" in lost[0]["line"]
    assert f"psgd launch: {lost[0]['line']}" in output
    assert _nodes(events) == {n: cluster.ip_a for n in ALL}  # every role ended on node A
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["restarts"] == len(on_b)
    _check_applied_once(events, summary, workers=WORKERS, steps=STEPS)
    assert summary["final_test_accuracy"] >= 0.93

"""`psgd run` under cluster launchers: roles from the launcher's rank, server
addresses through TCPStore, an orderly end, and failures that end the job."""
import json
import os
import socket
import subprocess
import sys

import pytest
from conftest import kill_tree, psgd_cmd, read_events, spawn, spawn_forked_with_env
from support import fork_relay, fork_server

from psgd.runtime.ports import free_ports


def _role_events(run_dir):
    return {e["rank"]: e for e in read_events(run_dir) if e.get("event") == "role"}


def _finish(procs, timeout):
    try:
        return [p.wait(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            kill_tree(p)


def _rank_entry() -> list[str]:
    """What torchrun starts per rank: `-m psgd.cli`, or (unless PSGD_TESTS_EXEC) a stdlib-only
    relay that forks the same `psgd` command from the suite's preloaded server with the
    rank's environment (tests/support/fork_relay.py): five fresh torch imports saved."""
    if os.environ.get("PSGD_TESTS_EXEC"):
        return ["-m", "psgd.cli"]
    return ["--no-python", sys.executable, "-S", fork_relay.__file__]


def _relay_env() -> dict:
    return {} if os.environ.get("PSGD_TESTS_EXEC") else {fork_relay.SERVER_VAR: fork_server.server().path}


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_torchrun_assigns_roles_and_servers_are_found_through_tcpstore(small_config, tmp_path):
    steps = 40
    config = small_config(train={"steps_per_worker": steps, "max_time_s": 60, "target_accuracy": 0.5})
    run_dir = tmp_path / "run"
    port = free_ports("127.0.0.1", 1)[0]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "5",
           "--master-addr", "127.0.0.1", "--master-port", str(port), *_rank_entry(),
           "run", str(config), "--run-dir", str(run_dir)]
    proc = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(tmp_path),
                 env=_relay_env())
    try:
        out, _ = proc.communicate(timeout=100)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, out[-3000:]
    roles = _role_events(run_dir)
    assert {r: (e["role_name"], e["role_index"]) for r, e in roles.items()} == {
        0: ("server", 0), 1: ("server", 1), 2: ("worker", 0), 3: ("worker", 1), 4: ("evaluator", 0)}
    assert all(e["launcher"] == "torchrun" and e["world_size"] == 5 for e in roles.values())
    # Every rank found the same addresses, and they are the ones the shards bound.
    events = read_events(run_dir)
    bound = {e["index"]: e["address"] for e in events if e["role"] == "server" and e["event"] == "ready"}
    for e in roles.values():
        assert ["tcp://" + a for a in e["servers"]] == [bound[0], bound[1]]
    done = sorted((e["index"], e["clock"]) for e in events if e["event"] == "done")
    assert done == [(0, steps), (1, steps)]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_updates"] == 2 * steps and summary["status"] == "ok"
    assert summary["final_test_accuracy"] >= 0.5
    assert (run_dir / "model.pt").is_file()


def _slurm_env(rank: int, world: int, port: int) -> dict:
    return {"SLURM_PROCID": str(rank), "SLURM_NTASKS": str(world), "SLURM_JOB_ID": "77",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "", "WORLD_SIZE": ""}


def _without_torchrun_vars():
    return {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}


def _start_slurm_ranks(config, run_dir, world, tmp_path):
    port = free_ports("127.0.0.1", 1)[0]
    procs = []
    for rank in range(world):
        env = {**_without_torchrun_vars(), **_slurm_env(rank, world, port)}
        env = {k: v for k, v in env.items() if v != ""}
        with open(tmp_path / f"rank{rank}.log", "w") as log:
            procs.append(spawn_forked_with_env(psgd_cmd("run", str(config), "--run-dir", str(run_dir)), env,
                                               stdout=log, stderr=subprocess.STDOUT, cwd=str(tmp_path)))
    return procs


@pytest.mark.e2e
@pytest.mark.timeout(90)
def test_slurm_ranks_with_rank_zero_hosting_the_store_stop_at_target(small_config, tmp_path):
    steps = 100000  # never reached: the evaluator's target ends the job
    config = small_config(cluster={"servers": 1, "workers": 1}, eval={"every_s": 0.2},
                          train={"steps_per_worker": steps, "max_time_s": 60, "target_accuracy": 0.6,
                                 "stop_at_target": True})
    run_dir = tmp_path / "run"
    codes = _finish(_start_slurm_ranks(config, run_dir, 3, tmp_path), timeout=70)
    logs = "".join(p.read_text() for p in sorted(tmp_path.glob("rank*.log")))
    assert codes == [0, 0, 0], logs[-3000:]
    roles = _role_events(run_dir)
    assert [(roles[r]["launcher"], roles[r]["role_name"]) for r in range(3)] == [
        ("slurm", "server"), ("slurm", "worker"), ("slurm", "evaluator")]
    summary = json.loads((run_dir / "summary.json").read_text())
    done = [e for e in read_events(run_dir) if e["event"] == "done"]
    assert len(done) == 1 and 0 < done[0]["clock"] < steps
    # The stop may interrupt a push the shard applied before its reply arrived.
    assert summary["total_updates"] - done[0]["clock"] in (0, 1)
    assert summary["time_to_target_s"] is not None and summary["final_test_accuracy"] >= 0.6


@pytest.mark.e2e
@pytest.mark.timeout(90)
def test_a_server_that_cannot_start_ends_the_job_with_its_cause(small_config, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        addr = f"127.0.0.1:{taken.getsockname()[1]}"
        config = small_config(cluster={"servers": [addr], "workers": 1}, eval={"enabled": False})
        codes = _finish(_start_slurm_ranks(config, tmp_path / "run", 2, tmp_path), timeout=70)
    server_log = (tmp_path / "rank0.log").read_text()
    assert codes[0] != 0 and "cannot bind" in server_log, server_log[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed"

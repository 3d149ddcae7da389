"""Authorisation at real shard processes: a second connection cannot act for a
registered rank (push, pull, heartbeat, leave, take it over), nobody without the
run token can shut a shard down, absurd seq/clock values are refused, and the
layout fingerprint never leaks. Meanwhile two real workers train under SSP, and
the final parameters are bit-identical to a control run without the attacker."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from conftest import kill_tree, spawn, wait_for, write_config
from support.raw_client import Raw

from psgd.config import load_config
from psgd.core.sharding import layout_for_module
from psgd.runtime.ports import free_ports
from psgd.runtime.token import new_run_token
from psgd.tasks import build_model, load_task
from psgd.wire import protocol as P
from psgd.workers.client import PSClient

pytestmark = pytest.mark.e2e
STEPS = 12


def start_shards(config, run_dir, addresses):
    procs = []
    for i in range(len(addresses)):
        procs.append(spawn([sys.executable, "-m", "psgd.cli", "server", str(config), "--shard", str(i),
                            "--run-dir", str(run_dir)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
    return procs


def grad(rank, clock, numel):
    return torch.full((numel,), (rank + 1) * ((clock % 5) - 2) / 64.0)


def train(addresses, layout, attack=None):
    """Ranks 0 and 1 take turns (SSP keeps them within one clock); `attack(clients)`
    runs after the third step. Returns each shard's final parameters."""
    clients = [PSClient(addresses, layout, rank=r, request_timeout_s=5, max_retries=5, heartbeat_s=0.2)
               for r in range(2)]
    try:
        for c in clients:
            c.register()
        for step in range(STEPS):
            for r, c in enumerate(clients):
                c.push_pull([grad(r, step, n) for n in layout.shard_sizes])
            if step == 3 and attack is not None:
                attack(clients)
        return [t.clone() for t in clients[0].pull()]
    finally:
        for c in clients:
            c.leave()
            c.close()


def free_rank_2(addresses, fingerprint, misbehave):
    """Rank 2 is a legitimate member nobody trains as: registered and left by a raw
    connection (so SSP does not wait for it); the attacker's variant misbehaves first."""
    for addr in addresses:
        raw = Raw(addr)
        try:
            welcome = raw.ask(P.MsgType.REGISTER, {"rank": 2, "role": "worker", "fingerprint": fingerprint})
            assert isinstance(welcome, P.Welcome), welcome  # its parameters ride in the same message
            if misbehave:
                misbehave(raw)
            assert isinstance(raw.ask(P.MsgType.LEAVE, {"rank": 2}), P.Ack)
        finally:
            raw.close()


@pytest.mark.timeout(120)
def test_second_connection_cannot_act_for_a_rank_and_the_run_is_unaffected(tmp_path):
    cfg_kw = dict(consistency={"mode": "ssp", "staleness": 1}, optimizer={"name": "sgd", "lr": 0.05},
                  task={"model": "linear", "dataset": "synthetic"}, checkpoint={"enabled": False})
    results, refusals = {}, {}
    for name in ("control", "attacked"):
        ports = free_ports("127.0.0.1", 2)
        addresses = [f"127.0.0.1:{p}" for p in ports]
        run_dir = tmp_path / name
        run_dir.mkdir()
        token = new_run_token(run_dir)
        config = write_config(tmp_path / f"{name}.yaml", cluster={"servers": addresses, "workers": 3,
                                                                  "timeout_s": 30.0}, **cfg_kw)
        cfg = load_config(config)
        layout = layout_for_module(build_model(cfg, load_task(cfg)), 2)
        layout_fp = layout.fingerprint
        procs = start_shards(config, run_dir, addresses)
        try:
            assert wait_for(lambda: all((run_dir / "events" / f"server-{i}.jsonl").exists() for i in range(2))
                            and all(b'"ready"' in (run_dir / "events" / f"server-{i}.jsonl").read_bytes()
                                    for i in range(2)), timeout=60)

            def absurd(raw, numel):
                bad = {}
                for field, value in (("seq", 2**63), ("clock", 10**12)):
                    fields = {"rank": 2, "seq": 0, "clock": 0, "read_version": 0, "encoding": "none", "numel": numel}
                    fields[field] = value
                    bad[field] = raw.ask(P.MsgType.PUSH, fields, torch.zeros(numel).numpy().tobytes())
                bad["pull_clock"] = raw.ask(P.MsgType.PULL, {"rank": 2, "clock": 10**12})
                refusals.setdefault("absurd", []).append(bad)

            if name == "attacked":
                raws = [Raw(addr) for addr in addresses]
                for s, addr in enumerate(addresses):
                    free_rank_2([addr], layout.fingerprint, lambda raw, s=s: absurd(raw, layout.shard_sizes[s]))
            else:
                free_rank_2(addresses, layout.fingerprint, None)

            def attack(clients):
                out = {}
                for s, raw in enumerate(raws):
                    m = layout.shard_sizes[s]
                    push = {"rank": 0, "seq": 10**3, "clock": 4, "read_version": 0, "encoding": "none", "numel": m}
                    zeros = torch.zeros(m).numpy().tobytes()
                    r = {}
                    r["mismatch"] = raw.ask(P.MsgType.REGISTER, {"rank": 0, "role": "worker", "fingerprint": "x"})
                    r["takeover"] = raw.ask(P.MsgType.REGISTER, {"rank": 0, "role": "worker",
                                                                 "fingerprint": layout.fingerprint})
                    r["takeover_bad_token"] = raw.ask(P.MsgType.REGISTER, {"rank": 0, "role": "worker",
                                                                           "fingerprint": layout.fingerprint,
                                                                           "token": "0" * 64})
                    r["push_unregistered"] = raw.ask(P.MsgType.PUSH, push, zeros)
                    r["pull_unregistered"] = raw.ask(P.MsgType.PULL, {"rank": 0, "clock": 4})
                    r["shutdown_stranger"] = raw.ask(P.MsgType.SHUTDOWN, {})
                    r["shutdown_bad_token"] = raw.ask(P.MsgType.SHUTDOWN, {"token": "f" * 64})
                    raw.send(P.MsgType.HEARTBEAT, {"rank": 0})  # heartbeats are never answered:
                    raw.send(P.MsgType.HEARTBEAT, {"rank": 0, "session": "0" * 32})  # refusals are counted
                    r["heartbeat"] = raw.ask(P.MsgType.STATS, {}).stats["counters"].get("bad_heartbeats")
                    evaluator = raw.ask(P.MsgType.REGISTER, {"rank": 0, "role": "evaluator",
                                                             "fingerprint": layout.fingerprint})
                    assert isinstance(evaluator, P.Welcome)
                    r["evaluator_push"] = raw.ask(P.MsgType.PUSH, push, zeros)
                    r["evaluator_leave"] = raw.ask(P.MsgType.LEAVE, {"rank": 0})  # ends its own connection only
                    r["evaluator_shutdown"] = raw.ask(P.MsgType.SHUTDOWN, {})
                    out[s] = r
                refusals["attack"] = out

            results[name] = train(addresses, layout, attack if name == "attacked" else None)
            assert all(p.poll() is None for p in procs), "a shard died"
            if name == "attacked":
                for raw in raws:  # the run token's holder may stop the shards
                    assert isinstance(raw.ask(P.MsgType.SHUTDOWN, {"token": token}), P.Ack)
                    raw.close()
                assert [p.wait(timeout=20) for p in procs] == [0, 0]
        finally:
            for p in procs:
                kill_tree(p)
    for a, b in zip(results["control"], results["attacked"]):
        assert torch.equal(a, b)
    for bad in refusals["absurd"]:
        assert {k: (type(v).__name__, getattr(v, "code", None)) for k, v in bad.items()} == {
            "seq": ("Error", "bad_seq"), "clock": ("Error", "bad_clock"), "pull_clock": ("Error", "bad_clock")}
    for s, r in refusals["attack"].items():
        codes = {k: getattr(v, "code", type(v).__name__) for k, v in r.items() if k != "heartbeat"}
        assert codes == {"mismatch": "layout_mismatch", "takeover": "rank_bound", "takeover_bad_token": "rank_bound",
                         "push_unregistered": "not_registered", "pull_unregistered": "not_registered",
                         "shutdown_stranger": "unauthorized", "shutdown_bad_token": "unauthorized",
                         "evaluator_push": "bad_rank", "evaluator_leave": "Ack",
                         "evaluator_shutdown": "unauthorized"}, s
        assert r["heartbeat"] == 2
        assert layout_fp not in r["mismatch"].reason  # says what is wrong, not what would be right

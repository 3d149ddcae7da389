"""Consistency modes enforced by real shard loops on loopback sockets, with
workers on threads: the SSP clock-gap bound with a 4x straggler, BSP's exact
all-reduce trajectory through the real worker loop, and a timed-out worker
that comes back."""
import dataclasses
import os
import threading
import time

import pytest
import torch
from sgd_reference import reference_sgd

from psgd.config import load_config
from psgd.runtime.events import EventLog
from psgd.runtime.role import RoleContext
from psgd.tasks import build_model, load_task
from psgd.workers.client import PSClient
from psgd.workers.worker import run_worker

STEPS = 40


BASE_STEP_S = 0.003


def cfg_for(mode, workers=3, staleness=0, **over):
    sets = ["task.model=linear", "task.dataset=synthetic", "cluster.servers=2", f"cluster.workers={workers}",
            f"consistency.mode={mode}", f"consistency.staleness={staleness}", "optimizer.lr=0.01"]
    return load_config(None, sets + [f"{k}={v}" for k, v in over.items()])


def run_straggler_workers(cluster, cfg, slow_rank=2, slowdown=4.0):
    """Every worker pushes STEPS constant gradients; `slow_rank` takes 4x as long
    per step. Returns the clock gap each worker saw on every pull."""
    gaps = {r: [] for r in range(cfg.cluster.workers)}
    errors = []

    def work(rank):
        client = PSClient(cluster.addresses, cluster.layout, rank=rank, heartbeat_s=None)
        try:
            client.register()
            grads = [torch.full((n,), 0.01) for n in cluster.layout.shard_sizes]
            for _ in range(STEPS):
                time.sleep(BASE_STEP_S * (slowdown if rank == slow_rank else 1.0))
                client.push_pull(grads)
                gaps[rank].append(client.clock - min(client.min_clocks))
            client.leave()
        except Exception as exc:  # reported by the test thread below
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=work, args=(r,)) for r in range(cfg.cluster.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert all(len(v) == STEPS for v in gaps.values())
    return gaps


def server_gap_max(cluster):
    return max(max((int(k) for k in s.state.clock_gaps.as_dict()), default=0) for s in cluster.servers)


@pytest.mark.timeout(60)
def test_ssp_bound_holds_with_a_4x_straggler_and_asp_drifts_further(shards):
    observed = {}
    for mode, s in [("ssp", 0), ("ssp", 1), ("ssp", 3), ("asp", 0)]:
        cfg = cfg_for(mode, staleness=s)
        model = build_model(cfg, load_task(cfg))
        cluster = shards(cfg, model)
        gaps = run_straggler_workers(cluster, cfg)
        worker_max = max(max(v) for v in gaps.values())
        observed[(mode, s)] = max(worker_max, server_gap_max(cluster))
        pulls = sum(s_.state.counters["pulls"] for s_ in cluster.servers)
        assert pulls >= 2 * cfg.cluster.workers * STEPS  # every pull was measured
        if mode == "ssp":
            assert worker_max <= s and server_gap_max(cluster) <= s, (s, gaps)
            # The bound was actually in force: fast workers were held back.
            assert sum(s_.state.counters["pulls_deferred"] for s_ in cluster.servers) > 0
        cluster.close()
    assert observed[("asp", 0)] > max(observed[("ssp", s)] for s in (0, 1, 3)), observed


def run_real_workers(cfg, cluster):
    """psgd.workers.worker.run_worker on threads, against the given shards."""
    cfg = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, servers=cluster.addresses))
    results, threads = {}, []
    for rank in range(cfg.cluster.workers):
        ctx = RoleContext(cfg, "worker", rank, None, EventLog(None, "worker", rank), threading.Event(),
                          supervised=False, parent_pid=os.getppid())
        t = threading.Thread(target=lambda c=ctx: results.__setitem__(c.index, run_worker(c)))
        threads.append((t, ctx))
        t.start()
    for t, ctx in threads:
        t.join(timeout=60)
        ctx.stop.set()
    assert results == {r: 0 for r in range(cfg.cluster.workers)}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("task", [
    {"task.model": "linear", "task.dataset": "synthetic", "task.batch_size": 16, "optimizer.lr": 0.05},
    {"task.model": "mlp", "task.dataset": "digits", "task.batch_size": 32, "optimizer.lr": 0.1},
], ids=["synthetic", "digits-mlp"])
@pytest.mark.parametrize("scaling", ["none", "linear"])
def test_bsp_sgd_equals_single_process_sgd_on_the_concatenated_batch(shards, task, scaling):
    """With optimizer.lr_scaling: linear, BSP over W workers steps at lr x W:
    exactly single-process SGD with lr x W on the W x B batch."""
    steps = 50
    sets = [f"{k}={v}" for k, v in task.items()]
    cfg = load_config(None, sets + ["cluster.servers=2", "cluster.workers=3", "consistency.mode=bsp",
                                    f"train.steps_per_worker={steps}", "workers.device=cpu", "optimizer.name=sgd",
                                    f"optimizer.lr_scaling={scaling}"])
    task_data = load_task(cfg)
    model = build_model(cfg, task_data)
    cluster = shards(cfg, model)
    run_real_workers(cfg, cluster)
    assert [s.state.version for s in cluster.servers] == [steps, steps]
    lr = cfg.optimizer.lr * (cfg.cluster.workers if scaling == "linear" else 1)
    ref = reference_sgd(cfg, steps, task=task_data, lr=lr)
    expected = cluster.layout.flatten([p.detach() for p in ref.parameters()])
    start = cluster.layout.flatten([p.detach() for p in model.parameters()])
    unscaled = cluster.layout.flatten([p.detach() for p in reference_sgd(cfg, steps, task=task_data).parameters()])
    for s, server in enumerate(cluster.servers):
        assert not torch.allclose(server.state.params, start[s], atol=1e-3)  # it did train
        torch.testing.assert_close(server.state.params, expected[s], rtol=0, atol=1e-5)
        if scaling == "linear":
            assert not torch.allclose(server.state.params, unscaled[s], atol=1e-3)  # the scaling mattered


@pytest.mark.timeout(60)
def test_timed_out_worker_releases_the_others_then_rejoins_at_the_current_clock(shards):
    cfg = cfg_for("ssp", workers=2, staleness=1, **{"cluster.timeout_s": 0.6, "cluster.heartbeat_s": 0.2})
    model = build_model(cfg, load_task(cfg))
    cluster = shards(cfg, model)
    grads = [torch.full((n,), 0.01) for n in cluster.layout.shard_sizes]
    quiet = PSClient(cluster.addresses, cluster.layout, rank=1, heartbeat_s=None)  # goes silent
    quiet.register()
    fast = PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=0.2)
    fast.register()
    t0 = time.monotonic()
    for _ in range(5):
        fast.push_pull(grads)                 # the pull at clock 2 waits until rank 1 times out
    assert time.monotonic() - t0 >= 0.4
    assert fast.clock == 5
    assert all(s.state.counters["workers_timed_out"] == 1 for s in cluster.servers)
    assert all(s.state.board.quorum() == [0] for s in cluster.servers)
    # Rank 1 was alive after all: its next push is refused, it re-registers with
    # every shard by itself and continues from the current clock.
    version = cluster.servers[0].state.version
    quiet.push_pull(grads)
    assert quiet.clock == 5
    assert all(s.state.board.quorum() == [0, 1] for s in cluster.servers)
    assert all(s.state.board.clocks == [5, 5] for s in cluster.servers)
    assert cluster.servers[0].state.version == version + 1  # its refused push applied exactly once
    fast.push_pull(grads)                     # clock 6: within s=1 of rank 1 at 5
    quiet.push_pull(grads)
    fast.push_pull(grads)                     # clock 7: rank 1 is at 6 now
    assert (fast.clock, quiet.clock) == (7, 6)
    assert max(server_gap_max(cluster), fast.clock - min(fast.min_clocks)) <= 1
    for c in (fast, quiet):
        c.leave()
        c.close()


@pytest.mark.timeout(30)
def test_parked_pull_of_a_timed_out_worker_is_refused_not_left_hanging(shards):
    from psgd.wire import protocol as P
    from psgd.workers.client import RemoteError
    cfg = cfg_for("ssp", workers=2, staleness=0, **{"cluster.timeout_s": 0.5, "cluster.heartbeat_s": 0.1})
    model = build_model(cfg, load_task(cfg))
    cluster = shards(cfg, model)
    alive = PSClient(cluster.addresses, cluster.layout, rank=1, heartbeat_s=0.1)  # never pushes
    alive.register()
    silent = PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=None)
    silent.register()
    silent.push([torch.zeros(n) for n in cluster.layout.shard_sizes])
    t0 = time.monotonic()
    req = silent._rpc.next_id()
    with pytest.raises(RemoteError) as err:   # parked at clock 1 until rank 0 itself times out
        silent._rpc.call({0: P.encode(P.Pull(req=req, rank=0, clock=1))})
    assert err.value.code == "not_registered" and "timed out" in err.value.reason
    assert time.monotonic() - t0 >= 0.4
    assert len(cluster.servers[0]._parked) == 0
    assert cluster.servers[0].state.board.quorum() == [1]
    for c in (alive, silent):
        c.close()


@pytest.mark.timeout(60)
def test_bsp_backup_worker_run_drops_the_straggler_and_keeps_one_update_per_clock(shards):
    cfg = cfg_for("bsp", workers=3, **{"consistency.backup_workers": 1})
    model = build_model(cfg, load_task(cfg))
    cluster = shards(cfg, model)
    pushes, errors = {}, []

    def work(rank):
        client = PSClient(cluster.addresses, cluster.layout, rank=rank, heartbeat_s=None)
        try:
            client.register()
            grads = [torch.full((n,), 0.01) for n in cluster.layout.shard_sizes]
            n = 0
            while client.clock < STEPS:
                time.sleep(BASE_STEP_S * (4.0 if rank == 2 else 1.0))
                client.push_pull(grads)
                n += 1
            pushes[rank] = n
            client.leave()
        except Exception as exc:  # reported by the test thread below
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=work, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=50)
    assert not errors, errors
    for server in cluster.servers:
        st = server.state
        assert st.version == STEPS and st.bsp.step == STEPS   # one averaged update per clock
        assert st.counters["late_dropped"] > 0
        # Each clock used at most W - b = 2 gradients (fewer once a worker has left);
        # every other push was dropped as late.
        used = sum(st.staleness_hist.counts.values())
        assert STEPS <= used <= 2 * STEPS
        assert st.counters["pushes"] == used + st.counters["late_dropped"]
    # The straggler was moved on to the step in progress instead of replaying old clocks.
    assert pushes[2] < STEPS

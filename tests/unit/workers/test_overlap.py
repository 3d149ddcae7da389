"""workers.overlap against real in-process shards (sockets, no processes): pushing
during backward applies exactly what a blocking push applies; a pipelined worker
follows the one-step-delayed SGD recurrence exactly, and its staleness shows it."""
import dataclasses

import pytest
import torch
from conftest import run_in_threads
from torch import nn

import psgd
from psgd.config import ConfigError, load_config


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 3))


def wide_net():  # 2563 parameters: with 1 KiB pieces, a shard's gradient leaves in several
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 64), nn.Tanh(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 3))


def batches(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 5, generator=g), torch.randint(0, 3, (16,), generator=g)) for _ in range(n)]


@pytest.fixture
def job(shards):
    def make(model, *sets):
        base = load_config(None, ["cluster.servers=2", "cluster.workers=1", "consistency.mode=asp", "optimizer.lr=0.1",
                                  "workers.device=cpu", "checkpoint.enabled=false", "cluster.timeout_s=30", *sets])
        served = shards(base, model)
        cfg = dataclasses.replace(base, cluster=dataclasses.replace(base.cluster, servers=served.addresses))
        return cfg, served
    return make


def train(cfg, model, data, rank=0):
    with psgd.Optimizer(model, cfg, rank=rank) as opt:
        for x, y in data:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    return model


def shard_params(served):
    return [s.state.params.clone() for s in served.servers]


def test_pushing_during_backward_applies_what_a_blocking_push_applies(job):
    results = {}
    for overlap in ("off", "backward"):
        cfg, served = job(net(), f"workers.overlap={overlap}")
        train(cfg, net(), batches(12))
        results[overlap] = shard_params(served)
    assert all(torch.equal(a, b) for a, b in zip(results["off"], results["backward"]))


@pytest.mark.parametrize("compression", ["none", "bf16", "fp16", "topk"])
@pytest.mark.parametrize("shared_memory", ["auto", "off"])
def test_pieces_sent_during_backward_apply_what_a_blocking_push_applies(job, compression, shared_memory):
    results, sent, pieces, in_shm = {}, {}, {}, {}
    for overlap in ("off", "backward"):
        sets = (f"workers.overlap={overlap}", f"wire.compression={compression}", "wire.topk_ratio=0.3",
                f"wire.shared_memory={shared_memory}", "wire.shared_memory_min_bytes=0",
                "workers.piece_kb=1")  # the small net: several pieces a shard
        cfg, served = job(wide_net(), *sets)
        model = wide_net()
        with psgd.Optimizer(model, cfg, rank=0) as opt:
            for x, y in batches(12):
                opt.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
            sent[overlap] = opt.stats.bytes_sent
        results[overlap] = shard_params(served)
        pieces[overlap] = sum(s.state.counters["push_pieces"] for s in served.servers)
        in_shm[overlap] = sum(s.state.counters["push_pieces_shm"] for s in served.servers)
    assert all(torch.equal(a, b) for a, b in zip(results["off"], results["backward"]))
    assert sent["off"] == sent["backward"]
    # none and bf16 are encoded element by element: sent in pieces. fp16's scale and top-k's
    # choice depend on the whole gradient: each shard leaves whole.
    assert pieces["off"] == 0 and (pieces["backward"] > 12 * 2) == (compression in ("none", "bf16"))
    # fp32 pieces are flattened into a same-host shard's segment and read from there, the others inline.
    assert in_shm["backward"] == (pieces["backward"] if compression == "none" and shared_memory == "auto" else 0)


def test_pieces_a_shard_lost_are_sent_again_whole(job):
    """The last piece finds the others missing (a shard that restarted mid-push, say):
    the push goes again in one message, under the same seq, and applies once."""
    cfg, served = job(net(), "optimizer.lr=0.5")
    layout, grads = served.layout, [torch.arange(n, dtype=torch.float32) / 7 for n in served.layout.shard_sizes]
    before = shard_params(served)
    client = psgd.PSClient(cfg.cluster.servers, layout, rank=0, heartbeat_s=None)
    try:
        client.register()
        request = client.start([None, None])
        for s, g in enumerate(grads):  # only the upper half of each shard: its first half never went
            client.send(request, s, g, piece=(g.numel() // 2, g.numel() - g.numel() // 2), last=True)
        client.wait(request)
    finally:
        client.close()
    for server, start, g in zip(served.servers, before, grads):
        assert torch.equal(server.state.params, start - 0.5 * g)
        assert server.state.counters["bad_requests_missing_pieces"] == 1 and server.state.version == 1


@pytest.mark.parametrize("shared_memory", ["off", "auto"])
def test_a_pipelined_worker_follows_the_one_step_delayed_recurrence(job, shared_memory):
    # auto: shared memory at any size, so the model trains on the segments' reply slots
    cfg, served = job(net(), "workers.overlap=pipeline", f"wire.shared_memory={shared_memory}",
                      "wire.shared_memory_min_bytes=0")
    data = batches(10)
    train(cfg, net(), data)
    # theta_k = theta_{k-1} - lr * grad(theta_{k-2}, batch_{k-1}), with theta_{-1} = theta_0:
    # each step computes on the parameters of the reply before last.
    model = net()
    params = [p for p in model.parameters()]
    history = [[p.detach().clone() for p in params]]
    for k, (x, y) in enumerate(data):
        on = history[max(0, k - 1)]
        with torch.no_grad():
            for p, v in zip(params, on):
                p.copy_(v)
        model.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        history.append([h - 0.1 * p.grad for h, p in zip(history[-1], params)])
    from psgd.core.sharding import layout_for_module
    expected = layout_for_module(net(), 2).flatten(history[-1])
    for got, want in zip(shard_params(served), expected):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    # The staleness the shards recorded includes the pipelined step: every push after the first is 1 stale.
    for server in served.servers:
        assert server.state.staleness_hist.as_dict() == {"0": 1, "1": 9}


def _slot_of(tensor, segment):
    """Which reply slot of `segment` holds `tensor`'s storage, or None (the model's own memory)."""
    from psgd.wire.shm.segment import reply_slot_at
    base, stride = segment._reply.data_ptr(), reply_slot_at(1, segment.reply_capacity // 2)
    at = tensor.data_ptr() - base
    return at // stride if 0 <= at < segment.reply_capacity else None


def test_a_pipelined_worker_trains_on_alternate_reply_slots_and_copies_split_parameters(job):
    from psgd.core.sharding import layout_for_module
    cfg, served = job(wide_net(), "workers.overlap=pipeline", "wire.shared_memory_min_bytes=0")
    model = wide_net()
    layout = layout_for_module(model, 2)
    shards_of = [{s for s, segs in enumerate(layout.segments) for seg in segs if seg.param == i}
                 for i in range(len(layout.shapes))]
    assert any(len(s) == 2 for s in shards_of) and any(len(s) == 1 for s in shards_of)  # both kinds here
    seen = []
    with psgd.Optimizer(model, cfg, rank=0) as opt:
        assert opt.client.shared_memory == [True, True] and opt.client.reply_slots == 2
        segments = [opt.client._shm.segment(s) for s in range(2)]
        for x, y in batches(6):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            seen.append([_slot_of(p, segments[min(shards)]) for p, shards in zip(model.parameters(), shards_of)])
    params = [p.detach() for p in model.parameters()]  # still views of the closed segments' memory
    for i, shards in enumerate(shards_of):
        got = [step[i] for step in seen]
        if len(shards) == 1:  # held whole by one shard: a view of the slot its last reply filled, no copy
            assert got == [None, 0, 1, 0, 1, 0], (i, got)
        else:  # split over both shards: copied into the model's own memory every time
            assert got == [None] * 6, (i, got)
    # After close (which drains the last push) the model holds exactly the shards' parameters after 6 pushes.
    for server, flat in zip(served.servers, layout.flatten(params)):
        assert server.state.version == 6
        assert torch.equal(flat, server.state.params)


def test_a_pipelined_worker_counts_its_steps_exactly_when_the_push_lands_before_it_looks(job):
    # The push in flight finishes on the communication thread, which moves the client's clock at once;
    # the training loop must still see each step once (CI once saw a worker stop a step short).
    cfg, served = job(net(), "workers.overlap=pipeline")
    model = net()
    with psgd.Optimizer(model, cfg, rank=0) as opt:
        for k, (x, y) in enumerate(batches(8), start=1):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.overlap.pending.result()  # the push has landed; step() has not collected it
            assert (opt.steps_taken, opt.clock, opt.stats.clock) == (k, k - 1, k - 1)
    assert opt.clock == 8 and [s.state.version for s in served.servers] == [8, 8]


def test_pipelined_workers_keep_the_ssp_bound(job):
    cfg, served = job(net(), "workers.overlap=pipeline", "consistency.mode=ssp", "consistency.staleness=1",
                      "cluster.workers=3")
    errors = run_in_threads(lambda rank: train(cfg, net(), batches(15, seed=10 + rank), rank), range(3))
    assert not errors, errors
    for server in served.servers:
        st = server.state
        assert st.version == 45
        assert max(int(g) for g in st.clock_gaps.as_dict()) <= 1
        assert st.policy.max_gap_over_bound is not None and st.policy.max_gap_over_bound <= 0


def test_pipelining_is_refused_where_it_cannot_keep_the_mode(tmp_path):
    with pytest.raises(ConfigError, match="workers.overlap"):
        load_config(None, ["consistency.mode=bsp", "workers.overlap=pipeline"])
    with pytest.raises(ConfigError, match="workers.overlap"):
        load_config(None, ["local.steps=4", "workers.overlap=backward"])
    assert load_config(None, ["workers.overlap=off"]).workers.overlap.value == "off"  # YAML reads off as false


def test_backward_twice_before_a_step_is_refused(job):
    cfg, _ = job(net(), "workers.overlap=backward")
    model = net()
    with psgd.Optimizer(model, cfg, rank=0) as opt:
        x, y = batches(1)[0]
        nn.functional.cross_entropy(model(x), y).backward()
        with pytest.raises(Exception, match="once per step"):
            nn.functional.cross_entropy(model(x), y).backward()
        del opt


def test_pieces_group_consecutive_segments_into_an_even_share_at_least():
    from psgd.workers.overlap import plan_pieces
    assert plan_pieces([4] * 8, 1) == [slice(i, i + 1) for i in range(8)]  # 8 layers: one piece each
    assert plan_pieces([5, 1, 1, 5, 2], 4) == [slice(0, 1), slice(1, 4), slice(4, 5)]  # the last: what is left
    assert plan_pieces([4] * 8, 100) == [slice(0, 8)]  # the minimum size wins over the even share
    assert plan_pieces([], 4) == []

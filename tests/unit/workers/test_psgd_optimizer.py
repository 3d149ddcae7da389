"""psgd.Optimizer against real in-process shards: it follows the torch optimizer it wraps
step for step, and refuses what it cannot honour."""
import copy
import dataclasses

import pytest
import torch
from support.tiny_model import batches, net
from torch import nn

import psgd
from psgd.config import OptimizerConfig, load_config
from psgd.core.torch_optim import UnsupportedOptimizer, rule_from_torch
from psgd.workers.optimizer import OptimizerStats

OPTIMIZERS = {
    "sgd-nesterov-wd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    "adam-wd": lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.95), weight_decay=0.001),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
}


@pytest.fixture
def job(shards):
    """job(model, rule) -> a config whose two shards serve `model` with `rule`."""
    def make(model, rule=None, **sets):
        base = load_config(None, ["cluster.servers=2", "cluster.workers=1", "consistency.mode=asp",
                                  "workers.device=cpu", "checkpoint.enabled=false",
                                  *[f"{k}={v}" for k, v in sets.items()]])
        if rule is not None:
            base = dataclasses.replace(base, optimizer=rule)
        served = shards(base, model)
        return dataclasses.replace(base, cluster=dataclasses.replace(base.cluster, servers=served.addresses))
    return make


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_training_through_the_servers_matches_the_torch_optimizer(job, name):
    model, reference = net(), net()
    local = OPTIMIZERS[name](reference.parameters())
    cfg = job(model, rule_from_torch(OPTIMIZERS[name](model.parameters()), model.parameters(), OptimizerConfig()))
    with psgd.Optimizer(model, cfg, optimizer=OPTIMIZERS[name](model.parameters()), rank=0) as opt:
        for x, y in batches(6):
            for m, o in ((model, opt), (reference, local)):
                o.zero_grad()
                nn.functional.cross_entropy(m(x), y).backward()
                o.step()
        assert opt.clock == 6
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_the_model_starts_from_the_servers_parameters_and_is_updated_in_place(job):
    served = net()
    cfg = job(served)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))  # other initial values
    storage = [p.data_ptr() for p in model.parameters()]
    with psgd.Optimizer(model, cfg, rank=0) as opt:
        for p, q in zip(model.parameters(), served.parameters()):
            assert torch.equal(p, q)
        x, y = batches(1)[0]
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        opt.step()
        for p, q, g in zip(model.parameters(), served.parameters(), grads):
            torch.testing.assert_close(p, q - cfg.optimizer.lr * g)  # plain SGD, one step
    assert [p.data_ptr() for p in model.parameters()] == storage


def test_a_torch_optimizer_that_disagrees_with_the_servers_rule_is_refused(job):
    model = net()
    cfg = job(model)  # servers apply sgd lr 0.05
    with pytest.raises(UnsupportedOptimizer, match=r"optimizer.name: adam here, sgd in the config"):
        psgd.Optimizer(model, cfg, optimizer=torch.optim.Adam(model.parameters()), rank=0)
    with pytest.raises(UnsupportedOptimizer, match=r"optimizer.lr: 0.5 here, 0.05 in the config"):
        psgd.Optimizer(model, cfg, optimizer=torch.optim.SGD(model.parameters(), lr=0.5), rank=0)


def test_an_lr_scheduler_on_the_wrapped_optimizer_is_refused_at_the_next_step(job):
    model = net()
    cfg = job(model)
    torch_opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with psgd.Optimizer(model, cfg, optimizer=torch_opt, rank=0) as opt:
        torch_opt.param_groups[0]["lr"] *= 0.5  # what a torch lr scheduler's step does
        with pytest.raises(UnsupportedOptimizer, match="optimizer.schedule"):
            opt.step()


def test_rank_comes_from_torchrun_and_must_fit_the_config(job, monkeypatch):
    model = net()
    cfg = job(model)
    torchrun = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}
    for k, v in torchrun.items():
        monkeypatch.setenv(k, v)
    with psgd.Optimizer(model, cfg) as opt:
        assert opt.rank == 0
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(psgd.ConfigError, match="torchrun started 3 processes but the config has 1 workers"):
        psgd.Optimizer(model, cfg)
    for k in torchrun:
        monkeypatch.delenv(k)
    monkeypatch.delenv("SLURM_PROCID", raising=False)
    with pytest.raises(ValueError, match="rank=None takes the rank from torchrun or SLURM"):
        psgd.Optimizer(model, cfg)


def test_state_dict_round_trip_and_rule_check(job):
    model = net()
    cfg = job(model)
    with psgd.Optimizer(model, cfg, rank=0) as opt:
        x, y = batches(1)[0]
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        state = opt.state_dict()
        assert state["rank"] == 0 and state["clock"] == 1 and state["optimizer"]["name"] == "sgd"
        opt.load_state_dict(copy.deepcopy(state))
        other = copy.deepcopy(state)
        other["optimizer"]["lr"] = 0.5
        with pytest.raises(ValueError, match="optimizer.lr: 0.5 here, 0.05 in the config"):
            opt.load_state_dict(other)


@pytest.mark.parametrize("compression, bytes_per_value", [("none", 4), ("fp16", 2)])
def test_stats_count_what_the_worker_sent(job, compression, bytes_per_value):
    model = net()
    numel = sum(p.numel() for p in model.parameters())
    with psgd.Optimizer(model, job(model, **{"wire.compression": compression}), rank=0) as opt:
        assert opt.stats == OptimizerStats(clock=0, pushes=0, seqs=0, resends=0, bytes_sent=0, peak_push_bytes=0,
                                           fp32_bytes=0, compression_ratio=1.0, encode_s=0.0, slowest_clock=0,
                                           pull_bytes=0, pull_fp32_bytes=0, reply_decode_s=0.0)
        for x, y in batches(3):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        stats = opt.stats
    assert (stats.clock, stats.pushes, stats.seqs, stats.resends) == (3, 3, 3, 0)
    assert stats.slowest_clock == 3  # the only worker
    assert stats.fp32_bytes == 3 * 4 * numel and stats.bytes_sent == 3 * bytes_per_value * numel
    assert stats.peak_push_bytes == bytes_per_value * numel  # every push carries the whole model
    assert stats.compression_ratio == bytes_per_value / 4
    assert stats.encode_s > 0  # the codec's own time is counted
    assert stats.pull_bytes == stats.pull_fp32_bytes == 3 * 4 * numel  # each push_pull's fp32 reply (not the welcome)
    assert stats.reply_decode_s == 0.0  # fp32 replies are not decoded
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.clock = 0


def test_a_rejoined_rank_counts_its_own_pushes_and_every_seq_its_rank_used(job):
    """The done event's `pushes` (and bytes_sent beside it) are this process's; `seqs`
    also counts a predecessor's, which the rank's next push continues after."""
    model = net()
    cfg = job(model)
    for incarnation, steps in enumerate((3, 2)):
        with psgd.Optimizer(model, cfg, rank=0) as opt:
            for x, y in batches(steps):
                opt.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
            stats = opt.stats
        numel = sum(p.numel() for p in model.parameters())
        assert (stats.pushes, stats.bytes_sent) == (steps, steps * 4 * numel)
        assert (stats.seqs, stats.clock) == ((3, 5)[incarnation],) * 2


def test_a_config_without_server_addresses_is_refused_naming_the_key():
    cfg = load_config(None, ["cluster.servers=2", "cluster.workers=1"])
    with pytest.raises(psgd.ConfigError, match="cluster.servers: this role needs the list of server host:port"):
        psgd.Optimizer(net(), cfg, rank=0)

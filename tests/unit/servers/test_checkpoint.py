"""Shard snapshots and the operation log: a shard rebuilt from disk after a
kill is bit-identical to the one that died, and a torn log tail is ignored."""
import pytest
import torch
from psgd.config import load_config
from psgd.servers.checkpoint import CheckpointError, ShardCheckpoint, read_log
from psgd.servers.state import PushStatus, ShardState


NUMEL = 37


def make_cfg(mode="asp", **over):
    sets = ["cluster.servers=1", "cluster.workers=3", f"consistency.mode={mode}",
            "optimizer.name=momentum", "optimizer.lr=0.1", "checkpoint.every_updates=0", "checkpoint.every_s=0"]
    return load_config(None, sets + [f"{k}={v}" for k, v in over.items()])


def fresh(cfg):
    return ShardState(cfg, 0, torch.linspace(-1, 1, NUMEL))


@pytest.mark.parametrize("mode", ["asp", "bsp"])
def test_restart_replays_log_after_snapshot_bit_identical(tmp_path, mode):
    cfg = make_cfg(mode)
    gen = torch.Generator().manual_seed(0)
    live = fresh(cfg)
    ckpt = ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint)
    assert ckpt.resume(live) is None  # nothing on disk yet: starts fresh, writes generation 1
    for r in range(3):
        live.register(r, 0.0)
        ckpt.log_join(r)
    pushes = [(r, torch.randn(NUMEL, generator=gen)) for r in (0, 1, 2) * 4]
    for n, (rank, grad) in enumerate(pushes):
        clock = live.board.clocks[rank]
        seq = clock
        read = live.version
        live.push(rank, seq, clock, read, grad)
        ckpt.log_push(rank, seq, clock, read, grad)
        if n == 4:
            ckpt.save(live)  # mid-run snapshot; later pushes only live in the log
    # The process dies here: no final save. A new shard resumes from disk.
    ckpt._log.flush()
    back = fresh(cfg)
    info = ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint).resume(back)
    assert info["replayed"] == len(pushes) - 5
    assert torch.equal(back.params, live.params)
    assert torch.equal(back.rule.state["momentum_buffer"], live.rule.state["momentum_buffer"])
    assert back.version == live.version and back.version > info["snapshot_version"] > 0
    assert back.last_seq == live.last_seq and back.board.clocks == live.board.clocks
    # The shard loop (not ShardState) counts push outcomes; replay counts them too.
    assert {k: v for k, v in back.counters.items() if not k.startswith("push_")} == live.counters
    if mode == "bsp":
        assert back.bsp.step == live.bsp.step == 4
    # A resend of an acknowledged push is still recognised after the restart.
    rank, grad = pushes[-1]
    assert back.push(rank, back.last_seq[rank], 0, 0, grad).status is PushStatus.DUPLICATE


def test_torn_log_tail_is_ignored(tmp_path):
    cfg = make_cfg()
    live = fresh(cfg)
    ckpt = ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint)
    ckpt.resume(live)
    live.register(0, 0.0)
    ckpt.log_join(0)
    g = torch.ones(NUMEL)
    live.push(0, 0, 0, 0, g)
    ckpt.log_push(0, 0, 0, 0, g)
    good = live.params.clone()
    ckpt.log_push(0, 1, 1, 1, g)  # this record is torn by the "crash" below
    ckpt.close()
    path = ckpt.log_path(ckpt.generation)
    data = path.read_bytes()
    path.write_bytes(data[:-7])
    assert len(list(read_log(path))) == 2
    back = fresh(cfg)
    info = ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint).resume(back)
    assert info["replayed"] == 2
    assert torch.equal(back.params, good) and back.last_seq[0] == 0


def test_snapshot_of_another_model_is_refused(tmp_path):
    cfg = make_cfg()
    ckpt = ShardCheckpoint(tmp_path, 0, "fp-a", cfg.checkpoint)
    ckpt.resume(fresh(cfg))
    ckpt.close()
    with pytest.raises(CheckpointError, match="fingerprint"):
        ShardCheckpoint(tmp_path, 0, "fp-b", cfg.checkpoint).resume(fresh(cfg))


def test_snapshot_loads_with_weights_only_and_is_replaced_atomically(tmp_path):
    cfg = make_cfg()
    state = fresh(cfg)
    ckpt = ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint)
    ckpt.resume(state)
    ckpt.save(state)
    sd = torch.load(ckpt.path, weights_only=True)
    assert sd["generation"] == ckpt.generation == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-0.log.2", "shard-0.pt"]


def test_due_by_update_count(tmp_path):
    cfg = make_cfg(**{"checkpoint.every_updates": 3})
    state = fresh(cfg)
    ckpt = ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint)
    ckpt.resume(state)
    state.register(0, 0.0)
    for i in range(3):
        assert not ckpt.due(state)
        state.push(0, i, i, state.version, torch.zeros(NUMEL))
    assert ckpt.due(state)


def test_log_size_bounds_the_time_between_snapshots(tmp_path):
    cfg = make_cfg(**{"checkpoint.max_log_mb": 1})  # neither count nor time triggers a snapshot
    state = ShardState(cfg, 0, torch.zeros(1 << 16))  # 256 KiB of parameters: 4 pushes fill 1 MiB
    ckpt = ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint)
    ckpt.resume(state)
    state.register(0, 0.0)
    seq = 0
    while not ckpt.due(state):
        g = torch.zeros(1 << 16)
        state.push(0, seq, seq, state.version, g)
        ckpt.log_push(0, seq, seq, state.version, g)
        seq += 1
    assert seq == 4

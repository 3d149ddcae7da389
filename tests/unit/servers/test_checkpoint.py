"""Shard snapshots and the operation log: a shard rebuilt from disk after a
kill is bit-identical to the one that died, and a torn log tail is ignored."""
import pytest
import torch

from psgd.config import load_config
from psgd.servers.checkpoint import CheckpointError, ShardCheckpoint, read_log
from psgd.servers.snapshot_file import read_snapshot
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


@pytest.mark.parametrize("saved, resumed, holds, keeps", [
    ({"optimizer.name": "adam"}, {"optimizer.name": "sgd"},
     "adam state (exp_avg, exp_avg_sq)", "sgd and keeps sgd without momentum (no state)"),
    ({"optimizer.name": "sgd"}, {"optimizer.name": "adam"},
     "sgd without momentum (no state)", "adam and keeps adam state (exp_avg, exp_avg_sq)"),
    ({"optimizer.name": "sgd"}, {"optimizer.name": "sgd", "optimizer.momentum": 0.9},
     "sgd without momentum (no state)", "sgd (momentum 0.9) and keeps momentum state (momentum_buffer)"),
    ({"optimizer.name": "adagrad"}, {"optimizer.name": "adamw"},
     "adagrad state (sum)", "adamw and keeps adam state (exp_avg, exp_avg_sq)"),
])
def test_snapshot_of_another_optimizer_is_refused_naming_both(tmp_path, saved, resumed, holds, keeps):
    """A hand-resumed shard whose config changed its optimizer: one CheckpointError naming
    what the snapshot holds and what the config wants, never a KeyError from load_state_dict."""
    cfg = make_cfg(**saved)
    live = fresh(cfg)
    ckpt = ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint)
    ckpt.resume(live)
    live.register(0, 0.0)
    live.push(0, 0, 0, 0, torch.ones(NUMEL))
    ckpt.save(live)
    ckpt.close()
    with pytest.raises(CheckpointError) as info:
        ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint).resume(fresh(make_cfg(**resumed)))
    assert str(info.value).startswith(f"the checkpoint holds {holds}, the config's optimizer is {keeps}: "), info.value
    # The same optimizer still resumes.
    back = fresh(cfg)
    ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint).resume(back)
    assert torch.equal(back.params, live.params)


def test_snapshot_loads_with_weights_only_and_is_replaced_atomically(tmp_path):
    cfg = make_cfg()
    state = fresh(cfg)
    ckpt = ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint)
    ckpt.resume(state)
    ckpt.save(state)
    sd = read_snapshot(ckpt.path)  # checksum checked, then torch.load(weights_only=True)
    assert sd["generation"] == ckpt.generation == 2
    assert read_snapshot(ckpt.files.previous)["generation"] == 1
    # The previous snapshot and every log after it are kept to fall back on.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-0.log.1", "shard-0.log.2", "shard-0.prev.pt",
                                                          "shard-0.pt"]
    ckpt.save(state)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-0.log.2", "shard-0.log.3", "shard-0.prev.pt",
                                                          "shard-0.pt"]


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


def run_with_snapshots(tmp_path, cfg, sparse_every=2):
    """Pushes (every other one sparse, some with a NaN) with snapshots after push 4 and 9;
    returns the live state after 13 pushes (the process then 'dies')."""
    gen = torch.Generator().manual_seed(1)
    live = fresh(cfg)
    ckpt = ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint)
    ckpt.resume(live)
    live.register(0, 0.0)
    ckpt.log_join(0)
    for n in range(13):
        if n % sparse_every:
            idx = torch.randperm(NUMEL, generator=gen)[:5].to(torch.int32)
            vals = torch.randn(5, generator=gen)
            if n == 7:
                vals[2] = float("nan")  # refused, logged, refused again on replay
            grad = (idx, vals)
        else:
            grad = torch.randn(NUMEL, generator=gen)
        read = live.version
        live.push(0, n, n, read, grad)
        ckpt.log_push(0, n, n, read, grad)
        if n in (4, 9):
            ckpt.save(live)
    ckpt.close()
    return live


def test_sparse_pushes_replay_bit_identically(tmp_path):
    cfg = make_cfg()
    live = run_with_snapshots(tmp_path, cfg)
    assert live.counters["rejected_nonfinite"] == 1
    back = fresh(cfg)
    info = ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint).resume(back)
    assert info["replayed"] == 3 and info["skipped"] == []
    assert torch.equal(back.params, live.params) and back.version == live.version
    assert back.counters["rejected_nonfinite"] == 1


def test_damaged_newest_snapshot_falls_back_to_previous_plus_logs(tmp_path):
    cfg = make_cfg()
    live = run_with_snapshots(tmp_path, cfg)
    newest = tmp_path / "shard-0.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x40
    newest.write_bytes(bytes(data))
    back = fresh(cfg)
    ckpt = ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint)
    info = ckpt.resume(back)
    assert info["skipped"] == [str(newest)] and info["replayed"] == 5 + 3
    assert torch.equal(back.params, live.params) and back.version == live.version
    assert back.last_seq == live.last_seq
    # The damaged file was replaced, and the good one it fell back on is still the fallback.
    # Generations: 1 at start, 2 after push 4, 3 after push 9 (damaged), 4 written on resume.
    assert read_snapshot(newest)["version"] == live.version and read_snapshot(newest)["generation"] == 4
    assert read_snapshot(tmp_path / "shard-0.prev.pt")["generation"] == 2
    assert sorted(p.name for p in tmp_path.glob("shard-0.log.*")) == ["shard-0.log.2", "shard-0.log.3",
                                                                       "shard-0.log.4"]
    ckpt.close()
    again = fresh(cfg)
    assert ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint).resume(again)["replayed"] == 0
    assert torch.equal(again.params, live.params)


def test_damaged_log_record_stops_replay_naming_the_file(tmp_path):
    cfg = make_cfg()
    run_with_snapshots(tmp_path, cfg)
    logs = sorted(tmp_path.glob("shard-0.log.*"), key=lambda p: int(p.suffix[1:]))
    data = bytearray(logs[-1].read_bytes())
    data[len(data) // 3] ^= 0x01
    logs[-1].write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as err:
        ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint).resume(fresh(cfg))
    assert str(logs[-1]) in str(err.value) and "\n" not in str(err.value)


def test_no_usable_snapshot_is_one_error_naming_both_files(tmp_path):
    cfg = make_cfg()
    run_with_snapshots(tmp_path, cfg)
    for name in ("shard-0.pt", "shard-0.prev.pt"):
        (tmp_path / name).write_bytes((tmp_path / name).read_bytes()[:50])
    with pytest.raises(CheckpointError) as err:
        ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint).resume(fresh(cfg))
    msg = str(err.value)
    assert str(tmp_path / "shard-0.pt") in msg and str(tmp_path / "shard-0.prev.pt") in msg and "\n" not in msg


def test_psgd_ctl_changes_survive_a_restart_and_replayed_pushes_use_their_rate(tmp_path):
    cfg = make_cfg("ssp", **{"consistency.staleness": 1})
    live = ShardState(cfg, 0, torch.linspace(-1, 1, NUMEL), run_token="t")
    ckpt = ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint)
    ckpt.resume(live)
    live.report_to(lambda event, **f: None, ckpt.log_setting)
    for r in range(3):
        live.register(r, 0.0)
        ckpt.log_join(r)
    gen = torch.Generator().manual_seed(3)

    def push_round(clock):
        for rank in range(3):
            grad = torch.randn(NUMEL, generator=gen)
            live.push(rank, clock, clock, live.version, grad, step_s=0.01)
            ckpt.log_push(rank, clock, clock, live.version - 1, grad, 0.01)

    push_round(0)
    ckpt.save(live)                                   # one change in the snapshot, one only in the log
    for change, clock in (({"optimizer.lr": "0.02"}, 2), ({"consistency.staleness": "4"}, 3)):
        live.live.control("prepare", "t", 0, change, now=0.0, owner="me")
        live.live.control("commit", "t", clock, change, now=0.0, owner="me")
        if clock == 2:
            ckpt.save(live)
    for clock in range(1, 5):
        push_round(clock)
    back = ShardState(cfg, 0, torch.linspace(-1, 1, NUMEL), run_token="t")
    ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint).resume(back)
    assert back.policy.settings.changes() == live.policy.settings.changes()
    assert [back.policy.setting_at(c) for c in range(6)] == [live.policy.setting_at(c) for c in range(6)]
    assert back.policy.setting_at(2).lr == 0.02 and back.policy.setting_at(3).bound == 4
    assert torch.equal(back.params, live.params)  # pushes after the change were replayed at its rate

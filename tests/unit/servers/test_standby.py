"""A backup shard (servers/standby.py) follows its primary's snapshot and push log as they
are written: after every read it holds the primary's state bit for bit, across snapshots,
dropped logs and a record still being written; taking over writes the next snapshot."""
import torch

from psgd.config import load_config
from psgd.servers.checkpoint import ShardCheckpoint
from psgd.servers.push_log import PushLogWriter, read_log_from
from psgd.servers.standby import ShardFollower
from psgd.servers.state import ShardState

NUMEL = 29


def make_cfg():
    return load_config(None, ["cluster.servers=1", "cluster.workers=2", "consistency.mode=asp",
                              "optimizer.name=momentum", "optimizer.lr=0.1", "checkpoint.every_updates=0",
                              "checkpoint.every_s=0"])


def fresh(cfg):
    return ShardState(cfg, 0, torch.linspace(-1, 1, NUMEL))


class Primary:
    """A shard's state changes and its checkpoint's records, in the live shard's order."""

    def __init__(self, cfg, directory):
        self.state, self.gen = fresh(cfg), torch.Generator().manual_seed(0)
        self.ckpt = ShardCheckpoint(directory, 0, "fp", cfg.checkpoint)
        self.ckpt.resume(self.state)
        for r in range(2):
            self.state.register(r, 0.0)
            self.ckpt.log_join(r)

    def push(self, n):
        for _ in range(n):
            rank = self.state.version % 2
            clock, read = self.state.board.clocks[rank], self.state.version
            grad = torch.randn(NUMEL, generator=self.gen)
            self.state.push(rank, clock, clock, read, grad)
            self.ckpt.log_push(rank, clock, clock, read, grad)


def same(a, b):
    return (torch.equal(a.params, b.params) and torch.equal(a.rule.state["momentum_buffer"],
                                                            b.rule.state["momentum_buffer"])
            and a.version == b.version and a.last_seq == b.last_seq and a.board.clocks == b.board.clocks)


def follower(cfg, directory):
    return ShardFollower(ShardCheckpoint(directory, 0, "fp", cfg.checkpoint), lambda: fresh(cfg))


def test_a_backup_holds_the_primary_state_after_each_read_across_snapshots(tmp_path):
    cfg = make_cfg()
    primary, backup = Primary(cfg, tmp_path), follower(cfg, tmp_path)
    primary.push(5)
    assert backup.catch_up() == 2 + 5 and same(backup.state, primary.state)  # two joins, five pushes
    primary.ckpt.save(primary.state)  # a snapshot: the log it reads is closed, the next one opened
    primary.push(3)
    assert backup.catch_up() == 3 and same(backup.state, primary.state)
    assert backup.reloads == 1  # it followed the logs: no snapshot loaded again


def test_a_backup_that_fell_behind_a_dropped_log_starts_again_from_the_newest_snapshot(tmp_path):
    cfg = make_cfg()
    primary, backup = Primary(cfg, tmp_path), follower(cfg, tmp_path)
    primary.push(2)
    backup.catch_up()
    for _ in range(3):  # the primary keeps two snapshots' logs: the backup's log is gone
        primary.push(2)
        primary.ckpt.save(primary.state)
    primary.push(1)
    assert not primary.ckpt.log_path(backup.generation).exists()
    backup.catch_up()
    assert same(backup.state, primary.state) and backup.reloads == 2


def test_a_record_still_being_written_is_read_once_it_is_whole(tmp_path):
    path = tmp_path / "log"
    writer = PushLogWriter(path)
    writer.join(0)
    writer.join(1)
    writer.close()
    whole = path.read_bytes()  # two records of one size each
    path.write_bytes(whole[:len(whole) * 3 // 4])  # the second record cut short
    records, offset = read_log_from(path, 0)
    assert [r.rank for r in records] == [0] and offset == len(whole) // 2
    path.write_bytes(whole)  # its writer finished it
    records, offset = read_log_from(path, offset)
    assert [r.rank for r in records] == [1] and offset == len(whole)


def test_taking_over_writes_the_next_snapshot_that_a_restart_resumes_from(tmp_path):
    cfg = make_cfg()
    primary, backup = Primary(cfg, tmp_path), follower(cfg, tmp_path)
    primary.push(4)
    backup.catch_up()
    primary.push(3)  # the primary dies after these: the backup has not read them yet
    state = backup.take_over()
    assert same(state, primary.state) and backup.checkpoint.generation == 2
    resumed = fresh(cfg)
    info = ShardCheckpoint(tmp_path, 0, "fp", cfg.checkpoint).resume(resumed)
    assert info["replayed"] == 0 and same(resumed, primary.state)

"""The shard's replay record: what is written is read back, and a record that
cannot be replayed (cut short, restarted, damaged, absent) says why."""
import pytest

from psgd.config import Mode
from psgd.servers.record import OpKind, RecordError, ShardRecorder, read_record, record_path


def _write(path, ended=True, restart=False):
    version = iter(range(100))
    rec = ShardRecorder(path, 1, 10, lambda: next(version))
    rec.log_join(0)
    rec.log_push(0, 0, 0, 0, grad=None, step_s=0.25)
    rec.log_pull(0, 1)
    rec.log_setting(3, "ctl", {"mode": Mode.SSP, "staleness": 2})
    rec.log_depart(0)
    rec.close(ended=ended)
    if restart:
        ShardRecorder(path, 1, 10, lambda: 7).close()


def test_every_change_is_read_back_in_order(tmp_path):
    path = record_path(tmp_path, 1)
    _write(path)
    record = read_record(path)
    assert (record.shard, record.numel, record.start_version, record.end_version) == (1, 10, 0, 3)
    assert [op.kind for op in record.ops] == [OpKind.JOIN, OpKind.PUSH, OpKind.PULL, OpKind.SETTING, OpKind.DEPART]
    push, pull, setting = record.ops[1], record.ops[2], record.ops[3]
    assert (push.rank, push.seq, push.clock, push.read_version, push.step_s, push.version) == (0, 0, 0, 0, 0.25, 1)
    assert (pull.rank, pull.clock, pull.version) == (0, 1, 2)
    assert setting.setting == (3, "ctl", {"mode": Mode.SSP, "staleness": 2})


def test_a_shard_that_did_not_stop_cleanly_cannot_be_replayed(tmp_path):
    path = record_path(tmp_path, 1)
    _write(path, ended=False)
    with pytest.raises(RecordError, match="did not stop cleanly"):
        read_record(path)


def test_a_restarted_shard_cannot_be_replayed(tmp_path):
    path = record_path(tmp_path, 1)
    _write(path, restart=True)
    with pytest.raises(RecordError, match="restarted"):
        read_record(path)


def test_a_record_cut_short_is_reported(tmp_path):
    path = record_path(tmp_path, 1)
    _write(path)
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(RecordError, match="no end"):
        read_record(path)


def test_a_damaged_record_is_reported(tmp_path):
    path = record_path(tmp_path, 1)
    _write(path)
    data = bytearray(path.read_bytes())
    data[20:24] = b"\xc1\xc1\xc1\xc1"  # 0xc1 is never used in msgpack
    path.write_bytes(bytes(data))
    with pytest.raises(RecordError, match="unreadable"):
        read_record(path)


def test_no_record_says_how_to_get_one(tmp_path):
    with pytest.raises(RecordError, match="run.record"):
        read_record(record_path(tmp_path, 0))

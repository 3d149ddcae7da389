"""The push log: dense and sparse records round-trip bit-exactly, a torn tail
is ignored, and damage anywhere else stops replay with an error."""
from __future__ import annotations

import errno
import os

import pytest
import torch

from psgd.servers.push_log import OP_DEPART, OP_JOIN, OP_PUSH, OP_PUSH_SPARSE, LogCorrupt, PushLogWriter, read_log


def write_sample(path):
    g = torch.randn(50)
    idx = torch.tensor([3, 7, 49], dtype=torch.int32)
    vals = torch.tensor([0.5, -1.25, 3.0])
    w = PushLogWriter(path)
    w.join(1)
    w.push(1, 0, 0, 0, g)
    w.push(1, 1, 1, 1, (idx, vals))
    w.push(1, 2, 2, 2, (torch.empty(0, dtype=torch.int32), torch.empty(0)))
    w.depart(1)
    w.close()
    return g, idx, vals


def test_records_round_trip_dense_and_sparse(tmp_path):
    path = tmp_path / "log"
    g, idx, vals = write_sample(path)
    recs = list(read_log(path))
    assert [r.op for r in recs] == [OP_JOIN, OP_PUSH, OP_PUSH_SPARSE, OP_PUSH_SPARSE, OP_DEPART]
    assert (recs[1].rank, recs[1].seq, recs[1].clock, recs[1].read_version) == (1, 0, 0, 0)
    assert torch.equal(recs[1].grad, g)
    ri, rv = recs[2].grad
    assert ri.dtype == torch.int32 and torch.equal(ri, idx) and torch.equal(rv, vals)
    assert recs[3].grad[0].numel() == 0 and recs[3].grad[1].numel() == 0


@pytest.mark.parametrize("cut", [1, 10, 17, 40])
def test_torn_tail_is_ignored(tmp_path, cut):
    path = tmp_path / "log"
    write_sample(path)
    data = path.read_bytes()
    path.write_bytes(data[:-cut])  # the last record (depart, 16 + a few bytes) or part of it
    recs = list(read_log(path))
    assert [r.op for r in recs][:3] == [OP_JOIN, OP_PUSH, OP_PUSH_SPARSE]
    assert len(recs) == (4 if cut < 40 else 3)


def test_flipped_byte_in_the_middle_raises_naming_file_and_offset(tmp_path):
    path = tmp_path / "log"
    write_sample(path)
    data = bytearray(path.read_bytes())
    for pos in range(len(data) - 30):  # every byte up to the last record
        broken = bytearray(data)
        broken[pos] ^= 0x10
        path.write_bytes(bytes(broken))
        with pytest.raises(LogCorrupt) as err:
            list(read_log(path))
        assert str(path) in str(err.value) and "byte" in str(err.value)


def test_failed_write_truncates_back_to_last_record(tmp_path, monkeypatch):
    path = tmp_path / "log"
    w = PushLogWriter(path)
    w.push(0, 0, 0, 0, torch.ones(8))
    good = path.stat().st_size
    calls = {"n": 0}
    real_write = w._f.write

    def failing_write(b):
        calls["n"] += 1
        if calls["n"] == 2:  # head went out, the payload hits a full disk
            real_write(b[: len(b) // 2])
            w._f.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(b)

    monkeypatch.setattr(w._f, "write", failing_write)
    with pytest.raises(OSError):
        w.push(0, 1, 1, 1, torch.ones(8))
    assert path.stat().st_size == good
    w.push(0, 2, 2, 2, torch.full((8,), 2.0))  # the writer goes on after the truncation
    w.close()
    assert [r.seq for r in read_log(path)] == [0, 2]

"""Checksummed snapshots: a flipped bit or a cut is detected (naming the file),
the previous generation is kept to fall back on, and failed writes leave no temp file."""
from __future__ import annotations

import pickle

import pytest
import torch

from psgd.servers.snapshot_file import SnapshotCorrupt, SnapshotFiles, read_snapshot, write_snapshot


def test_round_trip_is_exact(tmp_path):
    sd = {"params": torch.randn(100), "version": 7, "clocks": [1, 2]}
    write_snapshot(tmp_path / "s.pt", sd)
    back = read_snapshot(tmp_path / "s.pt")
    assert torch.equal(back["params"], sd["params"]) and back["version"] == 7 and back["clocks"] == [1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["s.pt"]


def test_every_single_bit_flip_in_the_parameters_is_detected(tmp_path):
    path = tmp_path / "s.pt"
    write_snapshot(path, {"params": torch.ones(16)})
    data = path.read_bytes()
    raw = torch.ones(16).numpy().tobytes()
    start = data.index(raw)
    for pos in range(start, start + len(raw)):
        for bit in (0, 6):  # a mantissa bit and an exponent bit
            broken = bytearray(data)
            broken[pos] ^= 1 << bit
            path.write_bytes(bytes(broken))
            with pytest.raises(SnapshotCorrupt, match="checksum mismatch"):
                read_snapshot(path)


@pytest.mark.parametrize("keep", [0, 10, 1000])
def test_truncated_snapshot_names_the_file(tmp_path, keep):
    path = tmp_path / "s.pt"
    write_snapshot(path, {"params": torch.randn(1000)})
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(SnapshotCorrupt) as err:
        read_snapshot(path)
    assert str(path) in str(err.value)


def test_files_fall_back_to_the_previous_generation(tmp_path):
    files = SnapshotFiles(tmp_path, "shard-0")
    files.save({"generation": 1})
    files.save({"generation": 2})
    assert [p.name for p in files.candidates()] == ["shard-0.pt", "shard-0.prev.pt"]
    sd, path, skipped = files.load_first_good()
    assert sd["generation"] == 2 and path == files.newest and skipped == []
    files.newest.write_bytes(files.newest.read_bytes()[:-3] + b"xyz")
    sd, path, skipped = files.load_first_good()
    assert sd["generation"] == 1 and path == files.previous
    assert len(skipped) == 1 and skipped[0].path == files.newest


def test_failed_write_leaves_no_temp_file_and_keeps_the_old_one(tmp_path):
    files = SnapshotFiles(tmp_path, "shard-0")
    files.save({"generation": 1})

    class Unpicklable:
        pass
    with pytest.raises((pickle.PicklingError, AttributeError)):
        files.save({"bad": Unpicklable()})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-0.pt"]
    assert read_snapshot(files.newest)["generation"] == 1

"""Snapshot files that say when they are damaged, and the previous one to fall back on.

A snapshot is ``torch.save`` bytes followed by a 20-byte trailer
``<b"PSGDSNP1", payload length, CRC32C(payload)>``: one flipped bit anywhere
fails the check before torch ever parses it (a flipped exponent bit in the
parameters would otherwise load and "work"). Writing is atomic (temp file,
fsync, rename, directory fsync) and a failed write removes its temp file.

`SnapshotFiles` keeps two generations, ``NAME.pt`` (newest) and
``NAME.prev.pt``: a save moves the newest to ``.prev`` before renaming the
new one in, so a crash between the two renames still leaves a good pair.
"""
from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Optional

import crc32c
import torch

from psgd.runtime.files import atomic_write

__all__ = ["SnapshotCorrupt", "SnapshotFiles", "write_snapshot", "read_snapshot"]

_TRAILER = struct.Struct("<8sQI")
_MAGIC = b"PSGDSNP1"


class SnapshotCorrupt(RuntimeError):
    """A snapshot file that fails its checksum or cannot be parsed."""

    def __init__(self, path: Path, why: str):
        self.path = Path(path)
        super().__init__(f"snapshot {path} is unusable: {why}")


def _write(path: Path, parts, keep_old_as: Optional[Path] = None) -> None:
    def write(f) -> None:
        for part in parts:
            f.write(part)
    atomic_write(path, write, keep_old_as=keep_old_as, sync_dir=True)  # survives a power loss


def write_snapshot(path: Path, state: dict) -> None:
    """Write `state` (tensors and plain values) to `path` atomically."""
    _write(Path(path), _encode(state))


def _encode(state: dict) -> tuple[memoryview, bytes]:
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getbuffer()
    return payload, _TRAILER.pack(_MAGIC, payload.nbytes, crc32c.crc32c(payload))


def read_snapshot(path: Path) -> dict:
    """The state stored at `path`, loaded with weights_only=True. Raises
    SnapshotCorrupt (naming the file) if it is short, damaged or unsafe."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SnapshotCorrupt(path, exc.strerror or str(exc)) from None
    if len(data) < _TRAILER.size:
        raise SnapshotCorrupt(path, f"only {len(data)} bytes (truncated)")
    magic, length, crc = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    if magic != _MAGIC:
        raise SnapshotCorrupt(path, "no psgd checksum trailer (truncated, or not a psgd snapshot)")
    payload = memoryview(data)[:len(data) - _TRAILER.size]
    if length != payload.nbytes:
        raise SnapshotCorrupt(path, f"trailer says {length} bytes, file holds {payload.nbytes}")
    if crc32c.crc32c(payload) != crc:
        raise SnapshotCorrupt(path, "checksum mismatch (the file was damaged after it was written)")
    try:
        return torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as exc:  # torch raises several types for a file it will not load
        raise SnapshotCorrupt(path, f"{type(exc).__name__}: {exc}") from None


class SnapshotFiles:
    """The newest and the previous snapshot of one shard."""

    def __init__(self, directory: Path, stem: str):
        self.dir = Path(directory)
        self.newest = self.dir / f"{stem}.pt"
        self.previous = self.dir / f"{stem}.prev.pt"

    def save(self, state: dict, rotate: bool = True) -> None:
        """Write a new newest snapshot; the old newest becomes the previous one
        (with `rotate` False it is replaced, e.g. because it is damaged)."""
        _write(self.newest, _encode(state), keep_old_as=self.previous if rotate else None)

    def candidates(self) -> list[Path]:
        """Existing snapshot files, newest first."""
        return [p for p in (self.newest, self.previous) if p.exists()]

    def load_first_good(self) -> tuple[Optional[dict], Optional[Path], list[SnapshotCorrupt]]:
        """(state, its path, the damaged files skipped on the way), newest first;
        state is None when no file exists or none is usable."""
        skipped = []
        for path in self.candidates():
            try:
                return read_snapshot(path), path, skipped
            except SnapshotCorrupt as exc:
                skipped.append(exc)
        return None, None, skipped

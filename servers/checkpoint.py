"""Durable shard state: checksummed snapshots plus an append-only log of what
changed since, so a killed shard loses nothing it acknowledged and damage on
disk is found instead of loaded.

Files under RUN_DIR/checkpoints/ for shard i:
- ``shard-i.pt`` (newest) and ``shard-i.prev.pt`` (the one before): each a
  snapshot (parameters, optimizer state, clocks, version, BSP aggregate,
  counters, histograms, the exactly-once seq table) with a CRC32C trailer,
  written atomically (see snapshot_file.py). Each names its generation G.
- ``shard-i.log.G``: every state-changing operation applied after snapshot G
  (pushes with their decoded gradient, dense or sparse, joins, departures,
  psgd ctl's setting changes),
  appended *before* the push is acknowledged; each record checksummed (see
  push_log.py). Logs are kept back to the previous snapshot's generation, so
  either snapshot plus the logs after it rebuilds the same state.

On start, `resume` loads the newest snapshot that passes its checksum (the
previous one if the newest is damaged), replays every log from its
generation on through the same ShardState methods (deterministic, so the
result is bit-identical), and writes a fresh snapshot. A damaged log record,
or no usable snapshot, is a CheckpointError naming the file: nothing is
silently dropped. Not covered: DC-ASGD's per-worker "parameters last read"
(a replayed DC-ASGD push is applied without compensation).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from psgd.config import CheckpointConfig
from psgd.runtime.safe_io import WriteFailed, describe_os_error
from psgd.servers.push_log import (
    OP_CLOSE,
    OP_DEPART,
    OP_JOIN,
    OP_PUSH,
    OP_PUSH_SPARSE,
    OP_SETTING,
    LogCorrupt,
    PushLogWriter,
    read_log,
)
from psgd.servers.snapshot_file import SnapshotFiles
from psgd.servers.state import PushStatus, ShardState

__all__ = ["CheckpointError", "ShardCheckpoint", "shard_state_dict", "load_shard_state", "read_log", "apply_record",
           "WriteFailed"]

SNAPSHOT_FORMAT = 2  # 2: CRC32C trailer, sparse log records, a previous snapshot kept


class CheckpointError(RuntimeError):
    """Checkpoints that cannot be used for this shard: damaged, or made for
    another model, shard count or mode. The message names the file."""


def shard_state_dict(state: ShardState, fingerprint: str) -> dict:
    """Everything a restarted shard needs, as tensors and plain values only
    (so it loads with weights_only=True)."""
    return {
        "format": SNAPSHOT_FORMAT,
        "fingerprint": fingerprint,
        "shard": state.shard,
        "mode": state.mode.value,
        "workers": state.workers,
        "params": state.params.clone(),
        "rule": state.rule.state_dict(),
        "version": state.version,
        "clocks": list(state.board.clocks),
        "departed": sorted(state.board.departed),
        "last_seq": list(state.last_seq),
        "registered": sorted(state.registered),
        "counters": dict(state.counters),
        "staleness": {int(k): int(v) for k, v in state.staleness_hist.counts.items()},
        "clock_gaps": {int(k): int(v) for k, v in state.clock_gaps.counts.items()},
        "bsp": state.policy.rule.state_dict(),  # the mode's clock in progress (bsp's aggregate; None for others)
        "live": state.policy.settings.state_dict(),  # psgd ctl's changes survive a restart
    }


def load_shard_state(state: ShardState, sd: dict, fingerprint: str, now: float) -> None:
    """Overwrite a fresh ShardState with a snapshot. Raises CheckpointError on a mismatch."""
    expect = {"format": SNAPSHOT_FORMAT, "fingerprint": fingerprint, "shard": state.shard,
              "mode": state.mode.value, "workers": state.workers}
    for key, want in expect.items():
        if sd.get(key) != want:
            raise CheckpointError(f"snapshot {key} is {sd.get(key)!r}, this shard has {want!r}")
    if sd["params"].shape != state.params.shape:
        raise CheckpointError(f"snapshot holds {sd['params'].numel()} parameters, shard has {state.numel}")
    _check_rule_state(state, sd["rule"])
    state.params.copy_(sd["params"])
    state.rule.load_state_dict(sd["rule"])
    state.version = int(sd["version"])
    state.board.clocks = [int(c) for c in sd["clocks"]]
    state.board.departed = set(sd["departed"])
    state.last_seq = [int(s) for s in sd["last_seq"]]
    state.registered = set(sd["registered"])
    # Restored members must show up again or time out, so the quorum cannot hang on them.
    state.last_seen = {r: now for r in state.registered if r not in state.board.departed}
    state.counters.clear()
    state.counters.update(sd["counters"])
    state.staleness_hist.counts.clear()
    state.staleness_hist.counts.update(sd["staleness"])
    state.clock_gaps.counts.clear()
    state.clock_gaps.counts.update(sd["clock_gaps"])
    state.policy.rule.load_state_dict(sd["bsp"])
    if "live" in sd:  # snapshots written before live settings were durable have none
        state.policy.settings.load_state_dict(sd["live"])


# Which optimizer leaves which state tensors: only to name, in the refusal, what made a snapshot.
_STATE_MADE_BY = {(): "sgd without momentum", ("momentum_buffer",): "momentum",
                  ("momentum_buffer", "period_sum"): "delayed-Nesterov momentum",
                  ("exp_avg", "exp_avg_sq"): "adam", ("sum",): "adagrad"}


def _rule_description(names: tuple[str, ...]) -> str:
    made_by = _STATE_MADE_BY.get(names, "another optimizer")
    return f"{made_by} state ({', '.join(names)})" if names else f"{made_by} (no state)"


def _check_rule_state(state: ShardState, saved: dict) -> None:
    """The snapshot's optimizer state must be the one this config's rule keeps: a run
    resumed with another optimizer (sgd -> adam, momentum added) would otherwise fail
    in load_state_dict with a bare KeyError, restarted until its retries are spent."""
    have = tuple(sorted(k for k in saved if k != "updates"))
    want = tuple(sorted(state.rule.state))
    if have != want:
        opt = state.rule.cfg
        momentum = opt.effective_momentum if opt.name in ("sgd", "momentum") else 0.0
        config = opt.name + (f" (momentum {momentum:g})" if momentum else "")
        raise CheckpointError(f"the checkpoint holds {_rule_description(have)}, the config's optimizer is "
                              f"{config} and keeps {_rule_description(want)}: resume with the optimizer "
                              "the run was started with, or start a new run")
    for name in want:
        if tuple(saved[name].shape) != tuple(state.rule.state[name].shape):
            raise CheckpointError(f"the checkpoint's optimizer state {name} has shape {tuple(saved[name].shape)}, "
                                  f"this shard's has {tuple(state.rule.state[name].shape)}")


def apply_record(state: ShardState, rec, now: float) -> None:
    """Apply one push-log record to `state` through the methods the live shard used
    (a resume's replay and a standby's following both come here)."""
    if rec.op in (OP_PUSH, OP_PUSH_SPARSE):
        result = state.push(rec.rank, rec.seq, rec.clock, rec.read_version, rec.grad, rec.step_s, rec.steps)
        if result.status is not PushStatus.DUPLICATE:
            state.counters[f"push_{result.status.value}"] += 1
    elif rec.op == OP_JOIN:
        state.register(rec.rank, now)
    elif rec.op == OP_DEPART:
        state.leave(rec.rank)
    elif rec.op == OP_CLOSE:
        state.close_round()
    elif rec.op == OP_SETTING:
        clock, origin, fields = rec.setting
        state.policy.settings.schedule(clock, fields, origin)


class ShardCheckpoint:
    """Snapshots and the operation log of one shard. Single-threaded, like the shard loop.
    A failed write (disk full) raises WriteFailed naming the file; the caller stops."""

    def __init__(self, directory: Path, shard: int, fingerprint: str, cfg: CheckpointConfig,
                 clock=time.monotonic):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.shard = shard
        self.fingerprint = fingerprint
        self.cfg = cfg
        self._clock = clock
        self.files = SnapshotFiles(self.dir, f"shard-{shard}")
        self.path = self.files.newest
        self.generation = 0                  # of the snapshot whose log is being written
        self._newest_gen: Optional[int] = None  # generation in the newest file (None: none usable)
        self._prev_gen: Optional[int] = None    # generation in the previous file, once known
        self._log: Optional[PushLogWriter] = None
        self._saved_version = 0
        self._saved_at = clock()

    @property
    def logged(self) -> int:
        return self._log.records if self._log is not None else 0

    @property
    def logged_bytes(self) -> int:
        return self._log.nbytes if self._log is not None else 0

    def log_path(self, generation: int) -> Path:
        return self.dir / f"shard-{self.shard}.log.{generation}"

    # ---- start --------------------------------------------------------------
    def resume(self, state: ShardState) -> Optional[dict]:
        """Load the newest good snapshot and replay the logs after it into `state`,
        then start a new generation. Returns {"snapshot_version", "replayed",
        "version", "skipped"} or None if there was no snapshot."""
        info = None
        sd, path, skipped = self.files.load_first_good()
        if skipped and sd is None:
            raise CheckpointError("; ".join(str(e) for e in skipped) + "; no snapshot left to resume from")
        if sd is not None:
            load_shard_state(state, sd, self.fingerprint, self._clock())
            loaded = gen = int(sd["generation"])
            snapshot_version, replayed = state.version, 0
            while self.log_path(gen).exists():
                replayed += self._replay(state, self.log_path(gen))
                gen += 1
            self.generation = max(loaded, gen - 1)  # the next snapshot starts a log no file has used
            if skipped:  # the damaged newest is replaced; the one just loaded stays the fallback
                self._prev_gen = loaded
            else:
                self._newest_gen = loaded
            info = {"snapshot_version": snapshot_version, "replayed": replayed, "version": state.version,
                    "skipped": [str(e.path) for e in skipped]}
        self.save(state, rotate=not skipped)
        return info

    def _replay(self, state: ShardState, path: Path) -> int:
        n = 0
        try:
            for rec in read_log(path):
                apply_record(state, rec, self._clock())
                n += 1
        except LogCorrupt as exc:
            raise CheckpointError(str(exc)) from None
        return n

    def adopt(self, state: ShardState, generation: int) -> None:
        """Take over this shard's files for a state rebuilt elsewhere (a standby that
        followed the primary's snapshot and logs through `generation`): the next
        snapshot is generation + 1, and the logs from `generation` on stay until it
        is the previous one. Writes that snapshot now, as `resume` does."""
        self.generation = self._newest_gen = generation
        self.save(state)

    # ---- while serving -------------------------------------------------------
    def due(self, state: ShardState) -> bool:
        if state.version == self._saved_version and self.logged == 0:
            return False
        by_count = self.cfg.every_updates and state.version - self._saved_version >= self.cfg.every_updates
        by_time = self.cfg.every_s and self._clock() - self._saved_at >= self.cfg.every_s
        by_size = self.logged_bytes >= self.cfg.max_log_mb << 20
        return bool(by_count or by_time or by_size)

    def save(self, state: ShardState, rotate: bool = True) -> None:
        """Write snapshot generation G+1 atomically (the newest becomes the previous
        one, unless `rotate` is False: a damaged newest is simply replaced), switch
        to its empty log and drop the logs older than the previous snapshot."""
        nxt = self.generation + 1
        sd = shard_state_dict(state, self.fingerprint)
        sd["generation"] = nxt
        try:
            self.files.save(sd, rotate=rotate)
            if self._log is not None:
                self._log.close()
            self._log = PushLogWriter(self.log_path(nxt), fsync=self.cfg.fsync_log)
        except OSError as exc:
            raise describe_os_error(exc, self.files.newest) from None
        if rotate and self._newest_gen is not None:
            self._prev_gen = self._newest_gen
        self._newest_gen = self.generation = nxt
        keep_from = self._prev_gen if self._prev_gen is not None else nxt
        for old in self.dir.glob(f"shard-{self.shard}.log.*"):
            suffix = old.name.rsplit(".", 1)[1]
            if suffix.isdigit() and int(suffix) < keep_from:
                old.unlink(missing_ok=True)
        self._saved_version = state.version
        self._saved_at = self._clock()

    def log_push(self, rank: int, seq: int, clock: int, read_version: int, grad, step_s: float = 0.0,
                 steps: int = 1) -> None:
        """Record a handled (non-duplicate) push, dense or (indices, values); call before acknowledging it."""
        self._write(self._log.push, rank, seq, clock, read_version, grad, step_s, steps)

    def log_close(self) -> None:
        """Record that a quorum's grace window closed (what follows depends on it)."""
        self._write(self._log.close_round)

    def log_setting(self, clock: int, origin: str, fields: dict) -> None:
        """Record a psgd ctl change; call before confirming it."""
        self._write(self._log.setting, clock, origin, fields)

    def log_join(self, rank: int) -> None:
        self._write(self._log.join, rank)

    def log_depart(self, rank: int) -> None:
        self._write(self._log.depart, rank)

    def _write(self, op, *args) -> None:
        try:
            op(*args)
        except OSError as exc:
            raise describe_os_error(exc, self._log.path) from None

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

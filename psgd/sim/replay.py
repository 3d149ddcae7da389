"""`psgd replay RUN_DIR`: re-execute a recorded real run in one process, bit for bit.

The shards' records (psgd.servers.record) give each shard's order of state
changes; every push names the version of each shard its gradient was computed
on. The replay walks the shards' records side by side through the simulator's
executor (the same ShardState, codecs and worker step the virtual cluster
runs): a push is applied when its gradient can be computed, i.e. when each
shard it read has reached the version the worker read, and a worker computes
its gradients in its own order (its data and its error-feedback state follow
that order). Time plays no part: the records fix every decision time made.

What it checks, in order of where a difference shows first: each worker's
loss at each step against metrics.jsonl, each shard's version after each push
and pull against the record, and the final parameters against model.pt.
"""
from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from psgd.config import Role, load_config
from psgd.core.local_methods import Schedule, method_for
from psgd.runtime.event_names import Event
from psgd.servers.record import Op, OpKind, RecordError, ShardRecord, read_record, record_path
from psgd.sim.executor import Executor
from psgd.wire.codecs import Gradient

__all__ = ["ReplayResult", "RecordError", "replay"]


@dataclass
class ReplayResult:
    pushes: int = 0                      # push records re-executed, over every shard
    gradients: int = 0                   # worker steps recomputed
    loss_mismatches: list[str] = field(default_factory=list)   # first few (rank, step) whose loss differs
    version_mismatch: Optional[str] = None                      # the first record whose version differs
    tensor_mismatches: list[str] = field(default_factory=list)  # model.pt entries that differ
    compared_model: bool = False         # model.pt was there to compare against
    wall_s: float = 0.0
    state_dict: dict = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return (self.compared_model and not self.tensor_mismatches and not self.loss_mismatches
                and self.version_mismatch is None)

    def as_dict(self) -> dict:
        return {"identical": self.identical, "pushes": self.pushes, "gradients": self.gradients,
                "loss_mismatches": self.loss_mismatches, "version_mismatch": self.version_mismatch,
                "tensor_mismatches": self.tensor_mismatches, "compared_model": self.compared_model,
                "wall_s": round(self.wall_s, 3)}


def _events(run_dir: Path) -> list[dict]:
    """metrics.jsonl, every line a whole event: the losses replay checks come from
    here, so a missing, torn or garbled file is damage, never "nothing to compare"."""
    path = run_dir / "metrics.jsonl"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RecordError(f"{path} is missing: the workers' losses cannot be compared") from None
    except OSError as exc:
        raise RecordError(f"{path} cannot be read: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"{path}: byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8 text") from None
    if text and not text.endswith("\n"):
        raise RecordError(f"{path}: the last line is torn (no newline at its end): the file was cut short")
    events = []
    for number, line in enumerate(text.split("\n")[:-1], start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RecordError(f"{path} line {number} is not JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(event, dict):
            raise RecordError(f"{path} line {number} is a JSON {type(event).__name__}, not an event object")
        events.append(event)
    return events


def _check_replayable(cfg, events: list[dict]) -> None:
    restarts = [e for e in events if e.get("event") == Event.RESTART]
    if restarts:
        e = restarts[0]
        raise RecordError(f"{e.get('process')} {e.get('process_index')} was restarted during the run: "
                          "replay covers runs without restarts")
    devices = {e.get("device") for e in events if e.get("event") == Event.READY and e.get("role") == Role.WORKER}
    if any(d and not str(d).startswith("cpu") for d in devices):
        raise RecordError(f"workers ran on {sorted(devices)}: the replay runs on CPU and would not be bit-identical")


class _Replay:
    def __init__(self, ex: Executor, records: list[ShardRecord]):
        self.ex, self.records = ex, records
        # (rank, seq) -> {shard: version the worker read}: what each gradient needs.
        self.reads: dict[tuple[int, int], dict[int, int]] = defaultdict(dict)
        self.steps: dict[tuple[int, int], int] = {}  # local updates: the steps of each round
        for rec in records:
            for op in rec.ops:
                if op.kind is OpKind.PUSH:
                    self.reads[(op.rank, op.seq)][rec.shard] = op.read_version
                    self.steps[(op.rank, op.seq)] = op.steps
        shards = len(records)
        for (rank, seq), versions in self.reads.items():
            if len(versions) != shards:
                missing = sorted(set(range(shards)) - set(versions))
                raise RecordError(f"worker {rank}'s push {seq} reached shards {sorted(versions)} but not {missing} "
                                  "(a worker stopped mid-send): its gradient cannot be recomputed")
        self.wanted = [Counter() for _ in records]  # shard -> version -> gradients still to compute on it
        for versions in self.reads.values():
            for s, v in versions.items():
                self.wanted[s][v] += 1
        self.kept: list[dict[int, torch.Tensor]] = [{} for _ in records]  # shard -> version -> parameters
        self.grads: dict[tuple[int, int], list[Gradient]] = {}
        self.next_seq = [0] * len(ex.workers)
        self.losses: dict[int, list[float]] = defaultdict(list)
        self.result = ReplayResult()
        for s in range(shards):
            self._keep(s)

    def _keep(self, s: int) -> None:
        shard = self.ex.shards[s]
        if self.wanted[s][shard.version] and shard.version not in self.kept[s]:
            pulled = self.ex.pulled_params(s, shard.params, shard.version)  # as the worker read them
            self.kept[s][shard.version] = pulled.clone() if pulled is shard.params else pulled

    def _compute(self, rank: int, seq: int) -> bool:
        """Compute worker `rank`'s gradients up to push `seq`, in its order; False
        while a shard has not yet reached a version one of them needs."""
        while self.next_seq[rank] <= seq:
            k = self.next_seq[rank]
            versions = self.reads.get((rank, k))
            if versions is None:
                raise RecordError(f"worker {rank}'s push {k} is in no shard's record, push {seq} is")
            if any(v not in self.kept[s] for s, v in versions.items()):
                return False
            w = self.ex.workers[rank]
            w.params = [self.kept[s][versions[s]] for s in range(len(versions))]
            w.versions = [versions[s] for s in range(len(versions))]
            w.seq = k
            pushes = None
            while pushes is None:  # one step, or under local updates the round's recorded steps
                pushes = self.ex.compute(rank, round_steps=self.steps[(rank, k)])
                self.losses[rank].append(w.last_loss)
                self.result.gradients += 1
            self.grads[(rank, k)] = [p.grad for p in pushes]
            for s, v in versions.items():
                self.wanted[s][v] -= 1
                if not self.wanted[s][v]:
                    self.kept[s].pop(v, None)
            self.next_seq[rank] += 1
        return True

    def _apply(self, s: int, i: int, op: Op) -> None:
        shard = self.ex.shards[s]
        if op.kind is OpKind.JOIN:
            shard.register(op.rank, 0.0)
        elif op.kind is OpKind.DEPART:
            shard.leave(op.rank)
        elif op.kind is OpKind.SETTING:
            clock, origin, fields = op.setting
            shard.policy.settings.schedule(clock, fields, origin)
        elif op.kind is OpKind.PULL:
            shard.answer_pull(op.rank, op.clock)
        elif op.kind is OpKind.CLOSE:
            shard.close_round()
        else:
            grads = self.grads[(op.rank, op.seq)]
            shard.push(op.rank, op.seq, op.clock, op.read_version, grads[s], op.step_s, op.steps)
            grads[s] = None  # each shard takes its part once
            if all(g is None for g in grads):
                del self.grads[(op.rank, op.seq)]
            self.result.pushes += 1
        if op.version >= 0 and shard.version != op.version and self.result.version_mismatch is None:
            self.result.version_mismatch = (f"shard {s} record {i} ({op.kind.value} of worker {op.rank}): "
                                            f"version {shard.version}, the run had {op.version}")
        self._keep(s)

    def run(self) -> None:
        pos = [0] * len(self.records)
        while any(p < len(r.ops) for p, r in zip(pos, self.records)):
            moved = False
            for s, rec in enumerate(self.records):
                while pos[s] < len(rec.ops):
                    op = rec.ops[pos[s]]
                    if op.kind is OpKind.PUSH and (op.rank, op.seq) not in self.grads \
                            and not self._compute(op.rank, op.seq):
                        break
                    self._apply(s, pos[s], op)
                    pos[s] += 1
                    moved = True
            if not moved:
                stuck = {r.shard: pos[r.shard] for r in self.records}
                raise RecordError(f"the records contradict each other: every shard waits on another (at {stuck})")
        for rec in self.records:
            version = self.ex.shards[rec.shard].version
            if version != rec.end_version and self.result.version_mismatch is None:
                self.result.version_mismatch = f"shard {rec.shard} ended at version {version}, the run at {rec.end_version}"


def _compare_losses(result: ReplayResult, replayed: dict[int, list[float]], events: list[dict]) -> None:
    recorded: dict[int, list[float]] = defaultdict(list)
    for e in events:
        if e.get("event") == Event.STEP and e.get("role") == Role.WORKER:
            rank, loss = e.get("rank"), e.get("loss")
            if type(rank) is not int or type(loss) not in (int, float, type(None)):
                raise RecordError(f"metrics.jsonl: a worker step event has rank {rank!r} and loss {loss!r}: "
                                  "expected an integer and a number")
            recorded[rank].append(loss)
    for rank in sorted(set(recorded) | set(replayed)):
        losses, got = recorded.get(rank, []), replayed.get(rank, [])
        for step, (want, loss) in enumerate(zip(losses, got)):
            if want != loss and not (want is None and not math.isfinite(loss)):  # events write NaN as null
                result.loss_mismatches.append(f"worker {rank} step {step}: loss {loss!r}, the run had {want!r}")
                break
        else:
            if len(losses) != len(got):
                result.loss_mismatches.append(f"worker {rank}: metrics.jsonl has {len(losses)} steps, "
                                              f"the replay computed {len(got)}")


def _saved_model(path: Path, expected: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """model.pt as a state_dict of this config's model: names, shapes and dtypes,
    or a RecordError saying how the file is damaged."""
    try:
        saved = torch.load(path, weights_only=True)
    except Exception as exc:  # torch raises a different type for each kind of damage
        reason = (str(exc).strip().splitlines() or [""])[0][:200]
        raise RecordError(f"{path} cannot be loaded ({type(exc).__name__}: {reason})") from None
    if not isinstance(saved, dict):
        raise RecordError(f"{path} holds a {type(saved).__name__}, not a state_dict")
    if set(saved) != set(expected):
        names = sorted(map(str, set(saved) ^ set(expected)))[:3]
        raise RecordError(f"{path} holds other parameters than this config's model (differing: {', '.join(names)})")
    for name, tensor in expected.items():
        got = saved[name]
        if not isinstance(got, torch.Tensor):
            raise RecordError(f"{path}: {name} is a {type(got).__name__}, not a tensor")
        if got.shape != tensor.shape or got.dtype != tensor.dtype:
            raise RecordError(f"{path}: {name} is {got.dtype} of shape {list(got.shape)}, "
                              f"this config's model has {tensor.dtype} of shape {list(tensor.shape)}")
    return saved


def replay(run_dir: Path, check_model: bool = True) -> ReplayResult:
    """Re-execute the recorded run in `run_dir`. Raises RecordError when it cannot be
    replayed (not recorded, a shard killed or restarted, local updates, a GPU run)."""
    started = time.perf_counter()
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise RecordError(f"{run_dir} is not a run directory (no config.yaml)")
    cfg = load_config(run_dir / "config.yaml")
    if not cfg.consistency.mode.on_servers:
        raise RecordError("an all-reduce run has no parameter servers to record: it is deterministic without one")
    if cfg.local.enabled and method_for(cfg).schedule is not Schedule.ROUNDS:
        raise RecordError(f"local.method {cfg.local.method}: its rounds do not end in one whole-model push whose "
                          "reply starts the next (fragments, or an outer update folded in later); the replay "
                          "re-executes whole-model rounds only")
    events = _events(run_dir)
    _check_replayable(cfg, events)
    records = [read_record(record_path(run_dir, s)) for s in range(cfg.cluster.num_servers)]
    torch.set_num_threads(cfg.run.threads)  # the workers' thread count: the same reduction order
    ex = Executor(cfg, run_dir, register=False)
    for rec in records:
        if rec.numel != ex.shards[rec.shard].numel or rec.start_version != 0:
            raise RecordError(f"shard {rec.shard}'s record does not start from this config's initial model")
    model = run_dir / "model.pt"
    saved = _saved_model(model, ex.state_dict()) if check_model and model.is_file() else None
    rp = _Replay(ex, records)
    rp.run()
    result = rp.result
    _compare_losses(result, rp.losses, events)
    result.state_dict = ex.state_dict()
    if saved is not None:
        result.compared_model = True
        for name, tensor in result.state_dict.items():
            if not torch.equal(saved[name], tensor):
                diff = (saved[name] - tensor).abs().max().item()
                result.tensor_mismatches.append(f"{name} (max abs difference {diff:.3g})")
    result.wall_s = time.perf_counter() - started
    return result

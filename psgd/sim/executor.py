"""What one step of the virtual cluster does, without time, sockets or processes.

The executor holds S `ShardState`s (the class real shards run) and W virtual
workers, and exposes the steps of a run as functions: a worker computes and
encodes its gradient (`compute`), a shard serves one push (`serve_push`),
a shard answers a pull when its consistency mode allows (`try_answer`), a
worker takes the replies (`receive`). Who runs next is decided elsewhere: by
the discrete-event clock (psgd.sim.engine) or, later, by a recorded log.

Memory: one model is shared by every worker (a worker's parameters are loaded
into it just before its step), and workers that read the same shard version
share one copy of it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

import torch

from psgd.config import Config
from psgd.core.heterogeneity import StragglerModel, straggler_for
from psgd.core.local_updates import StepSpeeds, inner_torch_optimizer
from psgd.core.sharding import layout_for_module
from psgd.servers.state import PushResult, ShardState
from psgd.tasks import build_model, load_task
from psgd.tasks.loaders import train_loader
from psgd.wire import protocol as P
from psgd.wire.codecs import Encoded, WireEncoder
from psgd.wire.payload import frame_to_tensor, frames_to_sparse
from psgd.workers.client import adopted_clock
from psgd.workers.local_rounds import LocalRounds
from psgd.workers.model_sync import ModelSync

__all__ = ["Executor", "Push", "Reply", "VirtualWorker", "decode_push"]

Gradient = Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]


def decode_push(enc: Encoded, numel: int) -> Gradient:
    """The gradient a shard decodes from an encoded push, owned by the caller
    (the encoder's buffers are reused at its next step). Same decoders and the
    same fp32 arithmetic as the shard's push handler."""
    if enc.encoding in P.SPARSE_ENCODINGS:
        idx, values = frames_to_sparse(enc.frames, enc.encoding, numel, enc.nnz)
        return idx.clone(), values.clone()
    wire = frame_to_tensor(enc.frames[0], enc.encoding, numel)
    grad = torch.empty(numel)
    grad.copy_(wire)
    return grad.mul_(enc.scale) if wire.dtype != torch.float32 and enc.scale != 1.0 else grad


@dataclass
class Push:
    """One worker's push to one shard, as the shard receives it."""
    rank: int
    shard: int
    seq: int
    clock: int
    read_version: int
    grad: Gradient
    wire_bytes: int
    step_s: float = 0.0
    steps: int = 1   # training steps behind it (a local-update round's)


@dataclass
class Reply:
    """A shard's answer to a worker's pull."""
    rank: int
    shard: int
    params: torch.Tensor  # shared by every worker that read this version
    version: int
    clock: int
    min_clock: int
    fastest_step_s: float = 0.0  # local.dynamic: the fastest worker's time per step, as the shard sees it


@dataclass
class VirtualWorker:
    rank: int
    batches: Iterator
    encoder: WireEncoder
    straggler: StragglerModel
    params: list[torch.Tensor]
    versions: list[int]
    clock: int = 0
    seq: int = 0
    steps: int = 0
    last_loss: float = float("nan")
    replies: dict[int, Reply] = field(default_factory=dict)
    local: Optional[LocalRounds] = None       # local updates: the worker's own rounds and inner optimizer
    own: Optional[list[torch.Tensor]] = None  # local updates: its parameters mid-round (None: a round starts)
    fastest_step_s: float = 0.0


class Executor:
    def __init__(self, cfg: Config, run_dir=None, register: bool = True):
        """`register`: every worker joins every shard now (a replay joins them as recorded)."""
        self.cfg = cfg
        self.task = load_task(cfg, run_dir, splits=("train", "test"))
        self.model = build_model(cfg, self.task)
        self.num_shards = cfg.cluster.num_servers
        self.layout = layout_for_module(self.model, self.num_shards)
        self.sync = ModelSync(self.model, self.layout, torch.device("cpu"), pin_memory=False)
        initial = self.layout.flatten([p.detach() for p in self.sync.params])
        self.shards = [ShardState(cfg, s, initial[s]) for s in range(self.num_shards)]
        self._shared: list[Optional[tuple[int, torch.Tensor]]] = [None] * self.num_shards
        self.now = 0.0  # the simulated time, set by whoever drives the executor (local rounds' pace)
        self.speeds = [StepSpeeds() for _ in range(self.num_shards)]  # each shard's view, as the real shard's
        self.gradient_s = 0.0  # real seconds in forward+backward (psgd bench sim's denominator)
        self.evaluate_s = 0.0  # real seconds scoring the test set
        train = self.task.train_data()
        self.workers: list[VirtualWorker] = []
        w = cfg.cluster.workers
        for rank in range(w):
            batches = train_loader(train, rank, w, cfg.task.batch_size, cfg.run.seed)
            enc = WireEncoder(cfg.wire.encoding, self.layout.shard_sizes, cfg.wire.topk_ratio)
            worker = VirtualWorker(rank, batches, enc, straggler_for(cfg.workers, rank, cfg.run.seed),
                                   [self._read(s) for s in range(self.num_shards)], [0] * self.num_shards)
            if register:
                worker.clock = min(shard.register(rank, 0.0) for shard in self.shards)
            if cfg.local.enabled:  # one inner optimizer per worker over the shared model: its own state
                inner = inner_torch_optimizer(cfg.optimizer, self.sync.params)
                speed = (lambda w=worker: w.fastest_step_s) if cfg.local.dynamic else None
                worker.local = LocalRounds(cfg.local.steps, self.sync, inner, speed, clock=lambda: self.now)
            self.workers.append(worker)

    # ---- memory -----------------------------------------------------------
    def _read(self, s: int) -> torch.Tensor:
        """Shard s's parameters at its current version, one copy per version."""
        shard = self.shards[s]
        cached = self._shared[s]
        if cached is None or cached[0] != shard.version:
            cached = self._shared[s] = (shard.version, shard.params.clone())
        return cached[1]

    # ---- steps ------------------------------------------------------------
    def compute(self, rank: int, step_s: float = 0.0, round_steps: Optional[int] = None) -> Optional[list[Push]]:
        """Worker `rank`'s forward/backward on its next batch at the parameters it
        holds, encoded per shard; its seq and clock move on as the client's do.
        Under local updates: one inner step, and the round's delta when it is
        complete (None while the round goes on: nothing to send). `round_steps`:
        a round that begins now takes that many steps (a replay's recorded rounds)."""
        w = self.workers[rank]
        if w.local is not None and w.own is None:  # a round starts from the parameters just pulled
            self.sync.load(w.params)
            w.local.begin()
            if round_steps is not None:
                w.local.round_steps = round_steps
            w.own = [t.clone() for t in w.local.start]
        self.sync.load(w.own if w.local is not None else w.params)
        x, y = next(w.batches)
        t0 = time.perf_counter()
        self.model.zero_grad(set_to_none=False)
        loss = self.task.loss(self.model(self.task.inputs(x)), self.task.targets(y))
        loss.backward()
        self.gradient_s += time.perf_counter() - t0
        w.last_loss = loss.item()
        w.steps += 1
        if w.local is None:
            return self._send(w, self.sync.gradients(), step_s)
        if not w.local.step():
            w.own = self.sync.flat_params(out=w.own)
            return None
        return self._send(w, w.local.delta(), step_s, w.local.taken)

    def flush(self, rank: int, step_s: float = 0.0) -> Optional[list[Push]]:
        """Under local updates, the shorter round of a worker whose budget ended
        (as psgd.Optimizer.flush); None when there is none."""
        w = self.workers[rank]
        if w.local is None or w.own is None or not w.local.taken:
            return None
        self.sync.load(w.own)
        return self._send(w, w.local.delta(), step_s, w.local.taken)

    def _send(self, w: VirtualWorker, grads: list[torch.Tensor], step_s: float, steps: int = 1) -> list[Push]:
        pushes = []
        for s, g in enumerate(grads):
            before = w.encoder.wire_bytes
            enc = w.encoder.encode(s, g)
            pushes.append(Push(w.rank, s, w.seq, w.clock, w.versions[s], decode_push(enc, g.numel()),
                               w.encoder.wire_bytes - before, step_s, steps))
        w.seq += 1
        w.clock += 1
        w.replies = {}
        if w.local is not None:
            w.own = None  # the reply starts the next round
        return pushes

    def serve_push(self, push: Push) -> PushResult:
        """Shard `push.shard` handles one push, exactly as the real shard does."""
        result = self.shards[push.shard].push(push.rank, push.seq, push.clock, push.read_version,
                                              push.grad, push.step_s)
        self.speeds[push.shard].observe(push.rank, push.step_s, push.steps)
        return result

    def try_answer(self, s: int, rank: int) -> Optional[Reply]:
        """Shard s answers worker `rank`'s pull for its next clock if the mode allows."""
        shard, clock = self.shards[s], self.workers[rank].clock
        if not shard.pull_ready(rank, clock):
            return None
        _, clock, low = shard.answer_pull(rank, clock)
        return Reply(rank, s, self._read(s), shard.version, clock, low, self.speeds[s].fastest())

    def receive(self, reply: Reply) -> bool:
        """Worker takes one shard's reply; True once it holds every shard's."""
        w = self.workers[reply.rank]
        w.replies[reply.shard] = reply
        if len(w.replies) < self.num_shards:
            return False
        for s, r in w.replies.items():
            w.params[s], w.versions[s] = r.params, r.version
            w.fastest_step_s = r.fastest_step_s or w.fastest_step_s
        w.clock = adopted_clock(w.clock, (r.clock for r in w.replies.values()))
        return True

    def leave(self, rank: int) -> None:
        for s, shard in enumerate(self.shards):
            shard.leave(rank)
            self.speeds[s].forget(rank)

    # ---- results ----------------------------------------------------------
    def server_params(self) -> list[torch.Tensor]:
        return [shard.params for shard in self.shards]

    def evaluate(self) -> dict:
        """Score the shards' current parameters (the evaluator's pull)."""
        t0 = time.perf_counter()
        self.sync.load(self.server_params())
        accuracy, loss = self.task.evaluate(self.model)
        self.evaluate_s += time.perf_counter() - t0
        versions = [shard.version for shard in self.shards]
        return {"accuracy": accuracy, "test_loss": loss, "updates": max(versions), "versions": versions}

    def state_dict(self) -> dict:
        self.sync.load(self.server_params())
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

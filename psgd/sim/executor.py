"""What one step of the virtual cluster does, without time, sockets or processes.

The executor holds S shards (`ShardService` over `ShardState`: the classes real
shards run, called the way the real shard calls them) and W virtual workers,
and exposes the steps of a run as functions: a worker computes and encodes its
gradient (`compute`), a shard serves one push (`serve_push`: the replies to
the parked pulls it released) and the pull the push carries (`try_answer`:
the reply, or None while it is parked), a worker takes the replies (`receive`). Who runs next is decided elsewhere: by
the discrete-event clock (psgd.sim.engine) or, later, by a recorded log.

Memory: one model is shared by every worker; its parameters are views of the
flat parameters a worker holds (psgd.sim.binding), so nothing is copied into
it. A reply hands out the shard's live parameters, and workers that read the
same version share that one tensor: the shard's own copy-on-write
(ShardState.sending) copies them only when it must update them while a
worker that read them has not yet used them. In a reply encoding
(wire.compression.replies) they share the version's decoded copy instead.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator, Optional

import torch

from psgd.config import Config
from psgd.core.heterogeneity import StragglerModel, straggler_for
from psgd.core.local_methods import method_for
from psgd.core.local_methods.streaming_diloco import StreamingDiLoCo
from psgd.core.local_updates import inner_torch_optimizer
from psgd.core.sharding import layout_for_module
from psgd.servers.service import Answer, Joined, PushFields, Served, ShardService
from psgd.servers.state import ShardState
from psgd.sim.batched import BatchedGradients, static_fallback
from psgd.sim.batched_steps import BatchedSteps
from psgd.sim.binding import ModelBinding
from psgd.sim.fault_steps import FaultSteps
from psgd.sim.fragment_steps import FragmentSteps
from psgd.sim.messages import PulledParams, Push, Read, Reply, decode_push
from psgd.tasks import build_model, load_task
from psgd.tasks.loaders import train_loader
from psgd.wire.codecs import WireEncoder, codec_named
from psgd.wire.codecs.runs import RUNS, plan_encoding, push_plans
from psgd.wire.replies import ReplyDecoder, reply_encoding
from psgd.workers.fragment_rounds import FragmentRounds
from psgd.workers.local_rounds import LocalRounds
from psgd.workers.model_sync import ModelSync
from psgd.workers.push_cursor import PushCursor
from psgd.workers.step import flush_outcome, forward_backward, step_outcome

__all__ = ["Executor", "VirtualWorker"]

@dataclass
class VirtualWorker(PushCursor):
    """One simulated worker: its batches, encoder, parameters and, as the client's
    (PushCursor), its clock and seq."""
    rank: int
    batches: Iterator
    encoder: WireEncoder
    straggler: StragglerModel
    params: list[torch.Tensor]
    versions: list[int]
    reads: list = field(default_factory=list)  # Read markers of `params`, done once stepped on
    steps: int = 0
    pushes: int = 0  # pushes this incarnation sent (`seq` counts a killed predecessor's too)
    last_loss: float = float("nan")
    replies: dict[int, Reply] = field(default_factory=dict)
    local: Optional[LocalRounds] = None       # local updates: the worker's own rounds and inner optimizer
    own: Optional[list[torch.Tensor]] = None  # local updates: its parameters mid-round (None: a round starts)
    fastest_step_s: float = 0.0
    peak_push_bytes: int = 0  # the most wire bytes one push (all its shards) carried
    # Streaming DiLoCo: its fragment rounds, and each shard's own seq and clock (as PSClient.shard_cursors)
    fragments: Optional[FragmentRounds] = None
    shard_cursors: list[PushCursor] = field(default_factory=list)
    # Counts the bytes its pulls' replies carried, as the client's does (it decodes nothing itself).
    pulled: ReplyDecoder = field(default_factory=lambda: ReplyDecoder([]))

    def pull_clock(self, s: int) -> int:
        """The clock a pull from shard s is for (a fragment push: that shard's own)."""
        return self.shard_cursors[s].clock if self.fragments is not None else self.clock

    @property
    def steps_taken(self) -> int:
        """Training steps as a real worker counts them (psgd.Optimizer.steps_taken): its
        budget and the index of its device time. Not `steps`, the gradients it computed:
        a BSP straggler whose clocks were dropped has taken the clocks it was moved past."""
        if self.fragments is not None:
            return self.fragments.steps_taken(min(c.clock for c in self.shard_cursors))
        if self.local is None:
            return self.clock
        # A pushed round's steps moved into steps_total; the next round begins at its first step
        # here (a real worker begins it as the reply comes), so until then none is under way.
        return self.local.steps_taken(self.seq) - (self.local.taken if self.own is None else 0)


class Executor(BatchedSteps, FaultSteps, FragmentSteps):
    def __init__(self, cfg: Config, run_dir=None, register: bool = True, batched: bool = False,
                 device: Optional[torch.device] = None):
        """`register`: every worker joins every shard now (a replay joins them as recorded).
        `batched`: `compute_together` may compute many workers' gradients in one
        vmapped call (psgd.sim.batched: equal to the exact path up to the last
        bits); off, and always in a replay, every gradient takes the exact path."""
        self.cfg = cfg
        self.task = load_task(cfg, run_dir, splits=("train", "test"))
        self.model = build_model(cfg, self.task)
        self.num_shards = cfg.cluster.num_servers
        self.layout = layout_for_module(self.model, self.num_shards)
        self.sync = ModelSync(self.model, self.layout, torch.device("cpu"), pin_memory=False)
        initial = self.layout.flatten([p.detach() for p in self.sync.params])
        self.initial = initial  # per shard: what a shard starts from (a restart without checkpoints too)
        self.shards = [ShardState(cfg, s, initial[s]) for s in range(self.num_shards)]
        self.services = [ShardService(shard) for shard in self.shards]  # what each request does, as on a real shard
        self.binding = None if cfg.local.enabled else ModelBinding(self.sync.params, self.layout)
        self.batcher: Optional[BatchedGradients] = None
        self.batch_fallback: Optional[str] = None  # why a batched run computes one by one
        self.device = device or torch.device("cpu")  # where the batcher computes; the exact path stays on the CPU
        if batched or self.device.type != "cpu":
            self.batch_fallback = ("local updates: each worker's inner optimizer steps on its own"
                                   if self.binding is None else static_fallback(self.model))
            if self.batch_fallback is None:
                self.batcher = BatchedGradients(self.model, self.binding, self.task, self.device,
                                                vectorize=batched)
        self._checked = False  # the batcher's first call is checked against the exact path
        self.batched_steps = 0  # worker steps whose gradient came from a batched call
        self._free: list[list[torch.Tensor]] = [[] for _ in range(self.num_shards)]  # fp32 gradient buffers
        self.plans = push_plans(cfg.wire, self.layout, cfg.local.enabled)  # each shard's push runs, as a real run's
        encodings = [plan_encoding(plan) for plan in self.plans]
        # Per shard: a push decodes to the very buffer it was encoded from (dense fp32).
        self._f32 = [e != RUNS and codec_named(e).dense and codec_named(e).wire_dtype == torch.float32
                     for e in encodings]
        self.now = 0.0  # the simulated time, set by whoever drives the executor (local rounds' pace)
        self.gradient_s = 0.0  # CPU seconds in forward+backward (psgd bench sim's denominator)
        self.evaluate_s = 0.0  # CPU seconds scoring the test set
        self.shard_s = 0.0     # CPU seconds in the shards' pushes and pulls (the servers' rules and updates)
        # What workers read (welcomes and pulls) in wire.compression.replies; None: the live fp32 parameters.
        self.reply_encoding = reply_encoding(cfg.wire)
        self._pulled = (None if self.reply_encoding == "f32"
                        else [PulledParams(self.reply_encoding) for _ in range(self.num_shards)])
        self._train = self.task.train_data()
        self.recycling = True  # served gradient buffers are reused (off when a push may be resent: sim.faults)
        self.workers: list[VirtualWorker] = []
        for rank in range(cfg.cluster.workers):
            worker = self._new_worker(rank)
            if register:
                clocks = [self._joined(s, service.register(rank, 0.0)) for s, service in enumerate(self.services)]
                worker.adopt(clocks)
                for cursor, clock in zip(worker.shard_cursors, clocks):
                    cursor.adopt([clock])
            self.workers.append(worker)

    def _new_worker(self, rank: int) -> VirtualWorker:
        """Worker `rank` as its process starts: its loader from the top, a fresh encoder,
        its straggler model, and reads of the shards' current parameters."""
        cfg, w = self.cfg, self.cfg.cluster.workers
        batches = train_loader(self._train, rank, w, cfg.task.batch_size, cfg.run.seed)
        enc = WireEncoder.from_plans(self.plans, cfg.wire.topk_ratio)
        reads = [self._read(s) for s in range(self.num_shards)]
        worker = VirtualWorker(rank, batches, enc, straggler_for(cfg.workers, rank, cfg.run.seed),
                               [p for p, _ in reads], [0] * self.num_shards, [r for _, r in reads])
        worker.shard_cursors = [PushCursor() for _ in range(self.num_shards)]
        if cfg.local.enabled:  # one inner optimizer per worker over the shared model: its own state
            inner = inner_torch_optimizer(cfg.optimizer, self.sync.params)
            method = method_for(cfg.local, w)
            if isinstance(method, StreamingDiLoCo):
                self.sync.load(worker.params)
                worker.fragments = FragmentRounds(method, self.sync, inner, self.num_shards)
                worker.own = self.sync.flat_params()
            else:
                worker.local = LocalRounds(method, self.sync, inner, lambda w=worker: w.fastest_step_s,
                                           clock=lambda: self.now)
        return worker

    # ---- memory -----------------------------------------------------------
    def _read(self, s: int) -> tuple[torch.Tensor, Read]:
        """Shard s's live parameters, marked as read until the worker steps on them; in a
        reply encoding, their decoded copy (no mark: the live ones may change)."""
        read = Read()
        if self._pulled is not None:
            return self.pulled_params(s, self.shards[s].live_params(), self.shards[s].version), read
        self.shards[s].sending(read)
        return self.shards[s].live_params(), read

    def restart_replies(self, s: int) -> None:
        """Shard s's process started again: nothing it encoded before is reused."""
        if self._pulled is not None:
            self._pulled[s] = PulledParams(self.reply_encoding)

    def pulled_params(self, s: int, params: torch.Tensor, version: int) -> torch.Tensor:
        """Shard s's `params` at `version` as a worker receives them (not to be written to)."""
        return params if self._pulled is None else self._pulled[s](params, version)

    def _gradient_buffers(self) -> list[torch.Tensor]:
        """Zeroed flat gradients, one per shard, reused once their push is served."""
        out = []
        for free, n in zip(self._free, self.layout.shard_sizes):
            out.append(free.pop().zero_() if free else torch.zeros(n))
        return out

    def recycle(self, push: Push) -> None:
        """A served push's gradient buffer is free again (the shard never keeps it)."""
        if self._f32[push.shard] and self.binding is not None and self.recycling:
            self._free[push.shard].append(push.grad)

    # ---- steps ------------------------------------------------------------
    def compute(self, rank: int, step_s: float = 0.0, round_steps: Optional[int] = None) -> Optional[list[Push]]:
        """Worker `rank`'s forward/backward on its next batch at the parameters it
        holds, encoded per shard; its seq and clock move on as the client's do.
        Under local updates: one inner step, and the round's delta when it is
        complete (None while the round goes on: nothing to send). `round_steps`:
        a round that begins now takes that many steps (a replay's recorded rounds)."""
        w = self.workers[rank]
        if self.binding is not None:
            return self._step(w, step_s)
        if w.fragments is not None:  # streaming DiLoCo: the engine sends and lands its fragments
            self._fragment_step(w)
            return None
        if w.local is not None and w.own is None:  # a round starts from the parameters just pulled
            self.sync.load(w.params)
            w.local.begin()
            if round_steps is not None:
                w.local.round_steps = round_steps
            w.own = [t.clone() for t in w.local.start]
        self.sync.load(w.own if w.local is not None else w.params)
        batch = next(w.batches)
        t0 = time.process_time()
        self.model.zero_grad(set_to_none=False)
        loss = forward_backward(self.task, self.model, batch)
        self.gradient_s += time.process_time() - t0
        w.last_loss = loss.item()
        w.steps += 1
        self._stepped_on(w)
        out = step_outcome(w.local, self.sync.gradients)  # the inner step, as psgd.Optimizer.step takes it
        if out is None:
            w.own = self.sync.flat_params(out=w.own)
            return None
        return self._send(w, out.tensors, step_s, out.steps)

    def _step(self, w: VirtualWorker, step_s: float, batch: Optional[tuple] = None) -> list[Push]:
        """One plain step: the model reads `w.params` in place and backward
        writes into the flat gradients the pushes carry."""
        batch = batch if batch is not None else next(w.batches)
        t0 = time.process_time()  # zeroing the gradients counts as compute, as zero_grad does
        grads = self._gradient_buffers()
        self.binding.bind(w.params)
        self.binding.bind_grads(grads)
        loss = forward_backward(self.task, self.model, batch)  # the worker role's step
        self.gradient_s += time.process_time() - t0
        self.binding.gather_split(grads)
        self._stepped_on(w)
        w.last_loss = loss.item()
        w.steps += 1
        out = step_outcome(None, lambda: grads)  # a plain step sends its gradients, as psgd.Optimizer.step
        return self._send(w, out.tensors, step_s, out.steps, owned=True)

    @staticmethod
    def _stepped_on(w: VirtualWorker) -> None:
        for read in w.reads:
            read.done = True
        w.reads = []

    def flush(self, rank: int, step_s: float = 0.0) -> Optional[list[Push]]:
        """Under local updates, the shorter round of a worker whose budget ended
        (as psgd.Optimizer.flush); None when there is none."""
        w = self.workers[rank]
        if w.local is None or w.own is None:
            return None
        self.sync.load(w.own)
        out = flush_outcome(w.local)
        return None if out is None else self._send(w, out.tensors, step_s, out.steps)

    def _send(self, w: VirtualWorker, grads: list[torch.Tensor], step_s: float, steps: int = 1,
              owned: bool = False) -> list[Push]:
        pushes = []
        for s, g in enumerate(grads):
            before = w.encoder.wire_bytes
            enc = w.encoder.encode(s, g)
            grad = decode_push(enc, g.numel(), g if owned else None, self.plans[s])
            if owned and grad is not g:
                self._free[s].append(g)  # encoded into the encoder's own buffer: free now
            pushes.append(Push(w.rank, s, w.seq, w.clock, w.versions[s], grad,
                               w.encoder.wire_bytes - before, step_s, steps))
        w.pushed(w.seq, w.clock)
        w.peak_push_bytes = max(w.peak_push_bytes, sum(p.wire_bytes for p in pushes))
        w.pushes += 1
        w.replies = {}
        if w.local is not None:
            w.own = None  # the reply starts the next round
        return pushes

    def _encoded_push(self, w: VirtualWorker, s: int, g: torch.Tensor, seq: int, clock: int, step_s: float,
                      steps: int) -> Push:
        """Shard s's push of `g` (not owned: a delta buffer that is reused), as the shard decodes it."""
        before = w.encoder.wire_bytes
        grad = decode_push(w.encoder.encode(s, g), g.numel(), plan=self.plans[s])
        return Push(w.rank, s, seq, clock, w.versions[s], grad, w.encoder.wire_bytes - before, step_s, steps)

    def serve_push(self, push: Push) -> list[Reply]:
        """Shard `push.shard` handles one push exactly as the real shard does, at simulated
        time self.now; returns the replies it sends now: to the parked pulls the push
        released, in their order."""
        t0 = time.process_time()
        fields = PushFields(push.rank, push.seq, push.clock, push.read_version, self.layout.shard_sizes[push.shard],
                            step_s=push.step_s, steps=push.steps)
        pushed = self.services[push.shard].push(fields, self.now, lambda: push.grad)
        self.shard_s += time.process_time() - t0
        return self._replies(push.shard, pushed)

    def tick(self, s: int, now: float) -> list[Reply]:
        """Shard s at simulated time `now`: a quorum's grace window that has passed closes
        (psgd.servers.service.ShardService.tick); returns the replies that released."""
        t0 = time.process_time()
        ticked = self.services[s].tick(now)
        self.shard_s += time.process_time() - t0
        return self._replies(s, ticked)

    def deadlines(self) -> list[tuple[int, float]]:
        """(shard, when) of every open grace window."""
        return [(s, d) for s, d in ((s, svc.deadline()) for s, svc in enumerate(self.services)) if d is not None]

    def try_answer(self, s: int, rank: int, clock: Optional[int] = None) -> Optional[Reply]:
        """Worker `rank` pulls its next clock from shard s (the pull its push carries): the
        reply if the mode allows it now, else None (the shard parks the pull; a later
        request's replies include it). `clock`: the pull's (default: the worker's own)."""
        t0 = time.process_time()
        served = self.services[s].pull(rank, self.workers[rank].pull_clock(s) if clock is None else clock, rank, self.now)
        self.shard_s += time.process_time() - t0
        replies = self._replies(s, served)
        return replies[0] if replies else None

    def _replies(self, s: int, served: Served) -> list[Reply]:
        return [self._reply(s, answer) for answer in served.answers]

    def _reply(self, s: int, answer: Answer) -> Reply:
        params, read = self._read(s)
        return Reply(answer.rank, s, params, answer.version, answer.clock, answer.min_clock,
                     answer.fastest_step_s, read, encoding=self.reply_encoding)

    def _welcome(self, s: int, rank: int, clock: int) -> Reply:
        """A registration's answer: shard s's current parameters and the clock to continue from."""
        params, read = self._read(s)
        return Reply(rank, s, params, self.shards[s].version, clock, clock, read=read, encoding=self.reply_encoding,
                     welcome=True)

    @staticmethod
    def _joined(s: int, served: Joined) -> int:
        if served.answers:  # every worker joins before any pulls: nothing can be parked yet
            raise RuntimeError(f"shard {s} answered pulls parked before the workers joined")
        return served.clock

    def receive(self, reply: Reply) -> bool:
        """Worker takes one shard's reply; True once it holds every shard's."""
        w = self.workers[reply.rank]
        w.replies[reply.shard] = reply
        if not reply.welcome:
            w.pulled.count(reply.encoding, reply.params.numel())
        if w.fragments is not None:
            return self.fragment_landed(reply.rank)
        if len(w.replies) < self.num_shards:
            return False
        for s, r in w.replies.items():
            w.params[s], w.versions[s] = r.params, r.version
            w.reads.append(r.read)
            w.fastest_step_s = r.fastest_step_s or w.fastest_step_s
        w.adopt(r.clock for r in w.replies.values())
        return True

    def leave(self, rank: int, now: Optional[float] = None) -> list[Reply]:
        """Worker `rank` leaves every shard (as opt.close()) at simulated time `now` (default:
        self.now); returns the replies to the parked pulls its leaving released, shard by shard."""
        replies = []
        for s, service in enumerate(self.services):
            left = service.leave(rank, self.now if now is None else now)
            if left.refused:  # a worker leaves when it is done: it waits on no pull
                raise RuntimeError(f"worker {rank} left shard {s} with a pull still parked")
            replies += self._replies(s, left)
        return replies

    # ---- results ----------------------------------------------------------
    def server_params(self) -> list[torch.Tensor]:
        return [shard.params for shard in self.shards]

    def evaluate(self) -> dict:
        """Score the shards' current parameters (the evaluator's pull)."""
        t0 = time.process_time()
        self._load(self.server_params())
        accuracy, loss = self.task.evaluate(self.model)
        self.evaluate_s += time.process_time() - t0
        versions = [shard.version for shard in self.shards]
        return {"accuracy": accuracy, "test_loss": loss, "updates": max(versions), "versions": versions}

    def _load(self, params: list[torch.Tensor]) -> None:
        if self.binding is not None:
            self.binding.bind(params)
        else:
            self.sync.load(params)

    def state_dict(self) -> dict:
        self._load(self.server_params())
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

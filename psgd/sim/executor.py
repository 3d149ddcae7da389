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
from typing import Any, Iterator, Optional

import torch

from psgd.config import Config, ConfigError
from psgd.core.heterogeneity import StragglerModel, straggler_for
from psgd.core.local_methods import Schedule, method_for
from psgd.core.local_methods.optimizers import inner_torch_optimizer
from psgd.core.sharding import layout_for_module
from psgd.servers.service import Answer, Joined, PushFields, Served, ShardService
from psgd.servers.state import ShardState
from psgd.sim.batched import BatchedGradients, static_fallback
from psgd.sim.batched_steps import BatchedSteps
from psgd.sim.binding import ModelBinding
from psgd.sim.fault_steps import FaultSteps
from psgd.sim.fragment_steps import FragmentSteps
from psgd.sim.messages import PulledParams, Push, Read, Reply, decode_push
from psgd.sim.round_steps import RoundSteps
from psgd.tasks import build_model, load_task
from psgd.tasks.loaders import train_loader
from psgd.wire.codecs import WireEncoder, codec_named
from psgd.wire.codecs.registry import DeltaCodecs
from psgd.wire.codecs.runs import RUNS, plan_encoding, push_plans
from psgd.wire.replies import ReplyDecoder, reply_encoding
from psgd.workers.fragment_rounds import FragmentRounds
from psgd.workers.local_rounds import LocalRounds
from psgd.workers.model_sync import ModelSync
from psgd.workers.push_cursor import PushCursor
from psgd.workers.step import forward_backward, step_outcome

__all__ = ["Executor", "VirtualWorker"]

# Each local method's schedule (LocalMethod.schedule) as the simulated workers step it
# (plain training: ROUNDS). EAGER is not modelled: its config is refused below.
STEPS = {Schedule.ROUNDS: RoundSteps, Schedule.FRAGMENTS: FragmentSteps}

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
    schedule: Any = RoundSteps  # its method's schedule as the executor steps it (STEPS)

    def pull_clock(self, s: int) -> int:
        """The clock a pull from shard s is for (a fragment push: that shard's own)."""
        return self.schedule.pull_clock(self, s)

    @property
    def round_clock(self) -> int:
        """Rounds completed, as psgd.Optimizer.clock reports them."""
        return self.schedule.clock(self)

    @property
    def seqs(self) -> int:
        """Seqs used, as psgd.Optimizer.stats reports them."""
        return self.schedule.seqs(self)

    @property
    def steps_taken(self) -> int:
        """Training steps as a real worker counts them (psgd.Optimizer.steps_taken): its
        budget and the index of its device time. Not `steps`, the gradients it computed:
        a BSP straggler whose clocks were dropped has taken the clocks it was moved past."""
        return self.schedule.steps_taken(self)


class Executor:
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
        batcher, fallback = None, None  # fallback: why a batched run computes one by one
        self.device = device or torch.device("cpu")  # where the batcher computes; the exact path stays on the CPU
        if batched or self.device.type != "cpu":
            fallback = ("local updates: each worker's inner optimizer steps on its own"
                        if self.binding is None else static_fallback(self.model))
            if fallback is None:
                batcher = BatchedGradients(self.model, self.binding, self.task, self.device, vectorize=batched)
        self.batched = BatchedSteps(self, batcher, fallback)
        self.fault_steps = FaultSteps(self)  # kills and restarts (sim.faults)
        self._free: list[list[torch.Tensor]] = [[] for _ in range(self.num_shards)]  # fp32 gradient buffers
        self.plans = push_plans(cfg.wire, self.layout, cfg.local.enabled)  # each shard's push runs, as a real run's
        self.codecs = DeltaCodecs(cfg.wire, self.layout.shard_sizes)  # as a local method applies them to deltas
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
        self._pulled = (None if self.reply_encoding == "none"
                        else [PulledParams(self.reply_encoding) for _ in range(self.num_shards)])
        self._train = self.task.train_data()
        self.recycling = True  # served gradient buffers are reused (off when a push may be resent: sim.faults)
        self.schedule = method_for(cfg).schedule if cfg.local.enabled else Schedule.ROUNDS
        if self.schedule not in STEPS:
            raise ConfigError("local.method", f"{cfg.local.method} is not modelled on the virtual cluster: "
                              "run it with --on local")
        self.steps = STEPS[self.schedule](self)
        self.workers: list[VirtualWorker] = []
        for rank in range(cfg.cluster.workers):
            worker = self.new_worker(rank)
            if register:
                clocks = [self._joined(s, service.register(rank, 0.0)) for s, service in enumerate(self.services)]
                worker.adopt(clocks)
                for cursor, clock in zip(worker.shard_cursors, clocks):
                    cursor.adopt([clock])
            self.workers.append(worker)

    def new_worker(self, rank: int) -> VirtualWorker:
        """Worker `rank` as its process starts: its loader from the top, a fresh encoder,
        its straggler model, and reads of the shards' current parameters."""
        cfg, w = self.cfg, self.cfg.cluster.workers
        batches = train_loader(self._train, rank, w, cfg.task.batch_size, cfg.run.seed)
        enc = WireEncoder.from_plans(self.plans, cfg.wire.topk_ratio)
        reads = [self._read(s) for s in range(self.num_shards)]
        worker = VirtualWorker(rank, batches, enc, straggler_for(cfg.workers, rank, cfg.run.seed),
                               [p for p, _ in reads], [0] * self.num_shards, [r for _, r in reads])
        worker.shard_cursors = [PushCursor() for _ in range(self.num_shards)]
        worker.schedule = self.steps
        if cfg.local.enabled:  # one inner optimizer and method object per worker: its own state
            inner = inner_torch_optimizer(cfg.optimizer, self.sync.params)
            self.steps.attach(worker, method_for(cfg), inner)
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

    @property
    def batcher(self) -> Optional[BatchedGradients]:
        return self.batched.batcher

    @batcher.setter
    def batcher(self, batcher: Optional[BatchedGradients]) -> None:
        self.batched.batcher = batcher

    @property
    def batch_fallback(self) -> Optional[str]:
        return self.batched.fallback

    @property
    def batched_steps(self) -> int:
        return self.batched.steps

    def compute_together(self, steps: dict[int, float]) -> dict[int, list[Push]]:
        """The plain steps of the workers `steps` names (psgd.sim.batched_steps)."""
        return self.batched.compute_together(steps)

    def free(self, s: int, grad: torch.Tensor) -> None:
        """Shard s's fp32 gradient buffer `grad` may be reused."""
        self._free[s].append(grad)

    def gradient_buffers(self) -> list[torch.Tensor]:
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
            return self.step(w, step_s)
        return self.steps.compute(w, step_s, round_steps)  # the method's schedule (STEPS)

    def step(self, w: VirtualWorker, step_s: float, batch: Optional[tuple] = None) -> list[Push]:
        """One plain step: the model reads `w.params` in place and backward
        writes into the flat gradients the pushes carry."""
        batch = batch if batch is not None else next(w.batches)
        t0 = time.process_time()  # zeroing the gradients counts as compute, as zero_grad does
        grads = self.gradient_buffers()
        self.binding.bind(w.params)
        self.binding.bind_grads(grads)
        loss = forward_backward(self.task, self.model, batch)  # the worker role's step
        self.gradient_s += time.process_time() - t0
        self.binding.gather_split(grads)
        self.stepped_on(w)
        w.last_loss = loss.item()
        w.steps += 1
        out = step_outcome(None, lambda: grads)  # a plain step sends its gradients, as psgd.Optimizer.step
        return self.send(w, out.tensors, step_s, out.steps, owned=True)

    @staticmethod
    def stepped_on(w: VirtualWorker) -> None:
        for read in w.reads:
            read.done = True
        w.reads = []

    def flush(self, rank: int, step_s: float = 0.0) -> Optional[list[Push]]:
        """Under local updates, the shorter round of a worker whose budget ended
        (as psgd.Optimizer.flush); None when there is none."""
        return self.steps.flush(self.workers[rank], step_s)

    def send(self, w: VirtualWorker, grads: list[torch.Tensor], step_s: float, steps: int = 1,
              owned: bool = False) -> list[Push]:
        pushes = []
        for s, g in enumerate(grads):
            before = w.encoder.wire_bytes
            enc = w.encoder.encode(s, g)
            grad = decode_push(enc, g.numel(), g if owned else None, self.plans[s])
            if owned and grad is not g:
                self.free(s, g)  # encoded into the encoder's own buffer: free now
            pushes.append(Push(w.rank, s, w.seq, w.clock, w.versions[s], grad,
                               w.encoder.wire_bytes - before, step_s, steps))
        w.pushed(w.seq, w.clock)
        w.peak_push_bytes = max(w.peak_push_bytes, sum(p.wire_bytes for p in pushes))
        w.pushes += 1
        w.replies = {}
        if w.local is not None:
            w.own = None  # the reply starts the next round
        return pushes

    def encoded_push(self, w: VirtualWorker, s: int, g: torch.Tensor, seq: int, clock: int, step_s: float,
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
        pushed = self.services[push.shard].push(fields, self.now, push.grad)
        self.shard_s += time.process_time() - t0
        return self.replies(push.shard, pushed)

    def tick(self, s: int, now: float) -> list[Reply]:
        """Shard s at simulated time `now`: a quorum's grace window that has passed closes
        (psgd.servers.service.ShardService.tick); returns the replies that released."""
        t0 = time.process_time()
        ticked = self.services[s].tick(now)
        self.shard_s += time.process_time() - t0
        return self.replies(s, ticked)

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
        replies = self.replies(s, served)
        return replies[0] if replies else None

    def replies(self, s: int, served: Served) -> list[Reply]:
        return [self._reply(s, answer) for answer in served.answers]

    def _reply(self, s: int, answer: Answer) -> Reply:
        params, read = self._read(s)
        return Reply(answer.rank, s, params, answer.version, answer.clock, answer.min_clock,
                     answer.fastest_step_s, read, encoding=self.reply_encoding, held_s=answer.held_s)

    def welcome(self, s: int, rank: int, clock: int) -> Reply:
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
        return self.steps.receive(w)

    def leave(self, rank: int, now: Optional[float] = None) -> list[Reply]:
        """Worker `rank` leaves every shard (as opt.close()) at simulated time `now` (default:
        self.now); returns the replies to the parked pulls its leaving released, shard by shard."""
        replies = []
        for s, service in enumerate(self.services):
            left = service.leave(rank, self.now if now is None else now)
            if left.refused:  # a worker leaves when it is done: it waits on no pull
                raise RuntimeError(f"worker {rank} left shard {s} with a pull still parked")
            replies += self.replies(s, left)
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

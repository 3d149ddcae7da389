"""`psgd.Optimizer`: the parameter servers behind a torch.optim-style optimizer.

    model = MyNet()
    opt = psgd.Optimizer(model, "job.yaml", optimizer=torch.optim.Adam(model.parameters(), lr=1e-3))
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()          # push the gradients, pull the parameters, copy them into the model
    print(opt.stats)        # OptimizerStats: pushes, resends, bytes sent, compression ratio, ...
    opt.close()

The servers own the optimizer state and apply the update; `step` sends the
model's gradients to every shard at once and copies the parameters the
consistency mode allows back into the model's own tensors, in place (through
pinned host buffers on CUDA, see model_sync.py). A torch optimizer given as
`optimizer=` is never stepped: its hyperparameters are translated into the
servers' rule (psgd.core.torch_optim) and must agree with the config's
`optimizer` section, which is what the servers were started with. The
built-in worker role trains through this class too.

With `workers.device_ms` set, each step lasts at least its stated device time
(workers/device_time.py): a step begins at `zero_grad()` (or, without one,
when the previous `step()` returned) and `step()` waits out what is left of
the device time before it pushes; a loop that times its steps itself calls
`hold_device(started)` after backward.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

import torch
from torch import nn

from psgd.config import Config, ConfigError, ConfigLike, load_config
from psgd.config.modes import Overlap
from psgd.core.local_methods import Schedule, method_for
from psgd.core.local_methods.optimizers import inner_torch_optimizer
from psgd.core.sharding import layout_for_module
from psgd.core.torch_optim import UnsupportedOptimizer, rule_differences, rule_from_torch
from psgd.wire.codecs.registry import DeltaCodecs
from psgd.workers.client import Interrupted, RequestFailed
from psgd.workers.client_factory import ClientSettings
from psgd.workers.device_time import DeviceClock
from psgd.workers.eager import EagerRounds
from psgd.workers.fragment_rounds import StreamingRounds
from psgd.workers.model_sync import ModelSync
from psgd.workers.overlap import BackwardPushes, Pipeline
from psgd.workers.rounds import WholeRounds, WorkerRounds
from psgd.workers.step import step_outcome

__all__ = ["Optimizer", "OptimizerStats", "rank_from_env"]

# Each local method's schedule (LocalMethod.schedule) as the real worker runs it.
ROUNDS: dict[Schedule, type[WorkerRounds]] = {Schedule.ROUNDS: WholeRounds, Schedule.FRAGMENTS: StreamingRounds,
                                              Schedule.EAGER: EagerRounds}


@dataclass(frozen=True)
class OptimizerStats:
    """What this worker has sent so far, read through `Optimizer.stats`."""
    clock: int           # pushes completed (continues across re-registration)
    pushes: int          # pushes this process completed (every shard acknowledged them)
    seqs: int            # seqs this rank has used, its predecessors' included (a restart continues after them)
    resends: int         # requests sent again after a timeout
    bytes_sent: int      # gradient bytes of the pushes that completed
    peak_push_bytes: int  # the most bytes one push carried (streaming DiLoCo: one fragment's)
    fp32_bytes: int      # what every gradient encoded so far costs as fp32
    compression_ratio: float  # encoded bytes / fp32 bytes over every gradient encoded (1.0 before any)
    encode_s: float      # seconds the codec spent encoding this worker's pushes
    pull_bytes: int      # parameter bytes its pulls' replies carried, as encoded (wire.compression.replies)
    pull_fp32_bytes: int  # what the same replies cost as fp32
    reply_decode_s: float  # seconds the codec spent decoding them (0 for fp32 replies)
    slowest_clock: int   # the slowest worker's clock, as the shards last reported it
    pull_wait_s: float = 0.0  # seconds its pulls stayed parked on the shards (barrier or bound), summed


def rank_from_env(cfg: Config) -> int:
    """This process's worker rank from torchrun's or SLURM's environment."""
    from psgd.runtime.cluster_env import ClusterEnvError, detect
    try:
        env = detect()
    except ClusterEnvError as exc:
        raise ValueError(f"rank=None takes the rank from torchrun or SLURM, but {exc}; pass rank=") from None
    if cfg.cluster.worker_range is not None:
        raise ConfigError("cluster.workers", f"{env.launcher} starts a fixed number of processes: give an int "
                          "(a range runs with psgd launch, locally or on Ray), or pass rank=")
    if env.world_size != cfg.cluster.workers:
        raise ConfigError("cluster.workers", f"{env.launcher} started {env.world_size} processes but the config "
                          f"has {cfg.cluster.workers} workers: every process of the job is one worker")
    return env.rank


class Optimizer:
    """Joins the servers of `cfg` as worker `rank` and trains `model` through them.

    The model's parameters are replaced by the servers' current ones at once
    (every worker starts from the same point). Not thread-safe."""

    def __init__(self, model: nn.Module, cfg: ConfigLike, optimizer: Optional[torch.optim.Optimizer] = None,
                 rank: Optional[int] = None, *, should_stop: Optional[Callable[[], bool]] = None,
                 token: Optional[str] = None):
        self.cfg = load_config(cfg)
        self.model = model
        self.torch_optimizer = optimizer
        if optimizer is not None and not self.cfg.local.enabled:  # local updates step it here instead
            self._check_rule(rule_from_torch(optimizer, model.parameters(), self.cfg.optimizer))
            self._lrs = [g["lr"] for g in optimizer.param_groups]
        self.rank = rank_from_env(self.cfg) if rank is None else rank
        if not 0 <= self.rank < self.cfg.cluster.workers:
            raise ConfigError("cluster.workers", f"no worker rank {self.rank} (there are {self.cfg.cluster.workers})")
        client_settings = ClientSettings.from_config(self.cfg)  # fails here, before the model is touched
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the model has no trainable parameters")
        self.device = params[0].device
        self.layout = layout_for_module(model, self.cfg.cluster.num_servers)
        self.sync = ModelSync(model, self.layout, self.device, self.cfg.workers.pin_memory)
        # Built before joining: a first torch optimizer can take seconds (lazy imports), which a
        # registered worker would spend holding back a BSP round. It steps the model's own tensors,
        # into which the servers' parameters are loaded in place.
        inner = None
        if self.cfg.local.enabled:
            inner = optimizer or inner_torch_optimizer(self.cfg.optimizer, self.sync.params)
        # token: the run token lets a restarted worker take its rank over from its dead predecessor
        # A pipelined CPU worker trains on one reply while the next lands: two reply slots.
        slots = 2 if self.cfg.workers.overlap is Overlap.PIPELINE and self.device.type == "cpu" else 1
        self.client = client_settings.connect(self.layout, self.rank, "worker", should_stop, token, slots)
        self.sync.gradient_buffers = self.client.gradient_buffers  # flatten into shared memory, no copy to send
        self._closed = False
        try:
            self.sync.load(self.client.register())
        except BaseException:
            self.client.close()
            raise
        self.overlap: Optional[Pipeline | BackwardPushes] = None
        if self.cfg.workers.overlap is Overlap.PIPELINE:
            self.overlap = Pipeline(self.client, self.sync)
        elif self.cfg.workers.overlap is Overlap.BACKWARD:
            self.overlap = BackwardPushes(self.client, self.sync, self.cfg.workers.piece_kb * 256)  # fp32 elements
        # Local updates: the method's schedule (None: every step pushes its gradient)
        self.rounds: Optional[WorkerRounds] = None
        if inner is not None:
            method = method_for(self.cfg)
            self.rounds = ROUNDS[method.schedule].build(method, self.client, self.sync, inner,
                                                        DeltaCodecs(self.cfg.wire, self.layout.shard_sizes))
        self.device_clock = DeviceClock.from_config(self.cfg, self.rank)
        self._step_started = time.perf_counter()  # when the step under way began
        self._held = False  # whether this step has waited out its device time

    # ---- torch.optim surface ---------------------------------------------
    @property
    def param_groups(self) -> list[dict]:
        """The wrapped optimizer's groups (read-only in effect: the servers' rule decides)."""
        if self.torch_optimizer is not None:
            return self.torch_optimizer.param_groups
        return [{"params": list(self.sync.params), "lr": self.cfg.optimizer.lr}]

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.model.zero_grad(set_to_none=set_to_none)
        if not self._held:
            self._step_started = time.perf_counter()

    def hold_device(self, started: Optional[float] = None,
                    wait: Optional[Callable[[float], bool]] = None) -> float:
        """Blocks until this step's device time (`workers.device_ms`, none: no
        wait) has passed since `started` (a time.perf_counter() reading; default:
        the step's beginning, see the module's docstring) and returns the step's
        compute seconds. `step()` calls it when the loop has not. `wait(s)`: how
        to sleep s seconds (True cuts it short)."""
        started = self._step_started if started is None else started
        self._held = True
        if self.device_clock is None:
            return time.perf_counter() - started
        return self.device_clock.hold(started, self.steps_taken, *([wait] if wait else []))

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """Push the model's gradients to every shard, then copy the parameters of
        the next clock (as the consistency mode allows) into the model. Under local
        updates: one step of the worker's own optimizer, and at the end of a round
        the push of the round's parameter delta and the pull of the next start."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.device_clock is not None and not self._held:
            self.hold_device()
        try:
            self._step()
        finally:
            self._held = False
            self._step_started = time.perf_counter()
        return loss

    def _step(self) -> None:
        if self.rounds is not None:  # local updates: the method's schedule (workers/rounds.py)
            self.rounds.step()
            return
        self._check_lr_unchanged()
        if self.overlap is not None:
            self.overlap.step()
            return
        out = step_outcome(None, self.sync.gradients)  # the simulator's workers run it too
        self.sync.load(self.client.push_pull(out.tensors, steps=out.steps))

    def flush(self) -> None:
        """Under local updates: push the steps not yet sent, however few (a worker whose
        budget ends mid-round), and take the reply. `close` does not: it drops such steps."""
        if self.rounds is not None:
            self.rounds.flush()

    @property
    def clock(self) -> int:
        """Pushes this worker has completed (continues across re-registration); under
        local updates a push ends a round. Pipelined: those step() has collected."""
        if isinstance(self.overlap, Pipeline):
            return self.overlap.clock
        return self.client.clock if self.rounds is None else self.rounds.clock

    @property
    def steps_taken(self) -> int:
        """Training steps of this rank: its clock (one per push, and the clocks a BSP
        shard moved a dropped straggler past), or under local updates as
        the method's schedule counts them. The simulator counts the same
        (psgd.sim.executor.VirtualWorker.steps_taken)."""
        if self.rounds is not None:
            return self.rounds.steps_taken
        in_flight = isinstance(self.overlap, Pipeline) and self.overlap.in_flight  # its step is done
        return self.clock + int(in_flight)

    @property
    def stats(self) -> OptimizerStats:
        """A read-only snapshot of what this worker has sent (pushes, bytes, ...)."""
        c = self.client
        seqs = c.seq if self.rounds is None else self.rounds.seqs
        return OptimizerStats(clock=self.clock, pushes=c.pushes, seqs=seqs, resends=c.resends, bytes_sent=c.bytes_sent,
                              peak_push_bytes=c.peak_push_bytes,
                              fp32_bytes=c.encoder.fp32_bytes, compression_ratio=c.encoder.compression_ratio,
                              encode_s=c.encoder.encode_s,
                              slowest_clock=min(c.min_clocks), pull_bytes=c.replies.wire_bytes,
                              pull_fp32_bytes=c.replies.fp32_bytes, reply_decode_s=c.replies.decode_s,
                              pull_wait_s=c.pull_wait_s)

    def state_dict(self) -> dict:
        """This worker's position and the servers' rule. The optimizer state itself
        (moments, step counts) lives on the servers, which checkpoint it."""
        state = {"rank": self.rank, "clock": self.clock, "seq": self.client.seq,
                 "optimizer": dataclasses.asdict(self.cfg.optimizer)}
        if self.rounds is not None:  # the inner optimizer's state lives here, not on the servers
            state.update(self.rounds.state_dict())
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Checks that `state` was saved against the same rule; the clock continues
        from the servers' record of this rank, as after any re-registration."""
        saved = state.get("optimizer")
        if not isinstance(saved, Mapping) or "name" not in saved:
            raise ValueError("not a psgd.Optimizer state_dict (no 'optimizer' entry)")
        known = {f.name for f in dataclasses.fields(self.cfg.optimizer)}
        fields = {k: v for k, v in saved.items() if k in known and k not in ("schedule", "dc_asgd")}
        differences = rule_differences(dataclasses.replace(self.cfg.optimizer, **fields), self.cfg.optimizer)
        if differences:
            raise ValueError("the state_dict was saved with another server rule: " + "; ".join(differences))
        if int(state.get("rank", self.rank)) != self.rank:
            raise ValueError(f"the state_dict belongs to rank {state['rank']}, this is rank {self.rank}")
        if self.rounds is not None:
            self.rounds.load_state_dict(state)

    def close(self) -> None:
        """Leave the servers (nobody waits for this worker any more) and close the sockets."""
        if self._closed:
            return
        self._closed = True
        try:
            if isinstance(self.overlap, Pipeline):
                self.overlap.drain()  # the push in flight is acknowledged before this worker leaves
            if self.rounds is not None:  # a local method's exchange in flight too
                self.rounds.drain()
        except (Interrupted, RequestFailed):
            pass  # stopping, or the shards are gone: the push's seq makes a later resend harmless
        if self.overlap is not None:
            self.overlap.close()
        try:
            self.client.leave()
        finally:
            self.client.close()

    def __enter__(self) -> "Optimizer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- internals --------------------------------------------------------
    def _check_rule(self, wanted) -> None:
        differences = rule_differences(wanted, self.cfg.optimizer)
        if differences:
            raise UnsupportedOptimizer(
                "the torch optimizer differs from the config's optimizer section, which the servers apply: "
                + "; ".join(differences) + " (set the same values in the config)")

    def _check_lr_unchanged(self) -> None:
        if self.torch_optimizer is None:
            return
        lrs = [g["lr"] for g in self.torch_optimizer.param_groups]
        if lrs != self._lrs:
            raise UnsupportedOptimizer("the torch optimizer's lr changed (a torch lr scheduler?): the servers "
                                       "apply the rate, so use the config's optimizer.schedule instead")

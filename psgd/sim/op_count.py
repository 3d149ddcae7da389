"""The work of one training step, counted once: its tensor operations and each matrix product's FLOPs.

Counted like the FLOPs (psgd.sim.flops), on the run's own model and rank 0's
first batch, with torch.utils.flop_counter's dispatch mode: every operation
that reaches the dispatcher is one operation (one kernel launch on an
accelerator, one dispatch on a CPU), except views and metadata, which launch
nothing. A matrix product or convolution also records its FLOPs, so a host
profile can time each at the rate it measured for its kind and size.
A pure function of the config, never of this machine.
"""
from __future__ import annotations

from dataclasses import dataclass

from psgd.config import Config
from psgd.sim.host_profile import HostProfile

__all__ = ["StepWork", "step_work", "work_of"]

# Operations that only make a new view of a tensor or read its metadata: no kernel runs.
_VIEWS = frozenset({"view", "_unsafe_view", "t", "transpose", "expand", "as_strided", "detach", "alias",
                    "permute", "unsqueeze", "squeeze", "reshape", "slice", "select", "split", "split_with_sizes",
                    "unbind", "lift_fresh", "_reshape_alias", "view_as", "expand_as", "numpy_T"})


@dataclass(frozen=True)
class StepWork:
    ops: int                       # operations dispatched (views excluded)
    flops: int                     # FLOPs in all (as FlopCounterMode counts them)
    products: tuple[int, ...]      # each matrix product's FLOPs (attention's included), in call order
    convolutions: tuple[int, ...] = ()  # each convolution's FLOPs (forward or backward), in call order

    def host_s(self, profile: HostProfile) -> float:
        """This work on the profile's host: every operation's dispatch cost, and each
        product at the rate measured for its size."""
        return (self.ops * profile.dispatch_us / 1e6 + sum(profile.matmul_s(f) for f in self.products)
                + sum(profile.conv_s(f) for f in self.convolutions))


def work_of(fn) -> StepWork:
    """The operations and products `fn()` dispatches (it runs once)."""
    from torch.utils.flop_counter import FlopCounterMode

    class _Counting(FlopCounterMode):
        def __init__(self):
            super().__init__(display=False)
            self.ops, self.products, self.convolutions = 0, [], []

        def _count_flops(self, func_packet, out, args, kwargs):
            if func_packet.__name__ not in _VIEWS:
                self.ops += 1
            if func_packet in self.flop_registry:
                flops = int(self.flop_registry[func_packet](*args, **kwargs, out_val=out))
                (self.convolutions if "convolution" in func_packet.__name__ else self.products).append(flops)
            return super()._count_flops(func_packet, out, args, kwargs)

    counter = _Counting()
    with counter:
        fn()
    return StepWork(counter.ops, int(counter.get_total_flops()), tuple(counter.products), tuple(counter.convolutions))


def step_work(cfg: Config, task) -> StepWork:
    """One worker step's work: forward + backward of one `cfg.task.batch_size` batch, as psgd.sim.flops."""
    from psgd.tasks import build_model
    from psgd.tasks.loaders import train_loader
    from psgd.workers.step import forward_backward
    model = build_model(cfg, task)
    batch = next(train_loader(task.train_data(), 0, cfg.cluster.workers, cfg.task.batch_size, cfg.run.seed))
    return work_of(lambda: forward_backward(task, model, batch))

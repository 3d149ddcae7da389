"""The work of one training step, counted once: its operations, each kernel's FLOPs and each other operation's bytes.

Counted with torch.utils.flop_counter's dispatch mode on the run's own model
and rank 0's first batch, in the steady state a worker is in: after one step
has made the gradients, `zero_grad(set_to_none=False)` then forward and
backward (so the gradients' zeroing and accumulation are counted, as every
step after the first runs them). Every operation that reaches the dispatcher is
one operation (one kernel launch on an accelerator, one dispatch on a CPU),
except views and metadata, which launch nothing. The kernels a host profile
times by size record their FLOPs (matrix products; forward convolutions; each
gradient a convolution's backward computes, the input's and the weight's apart; attention, forward
and backward);
every other operation records the bytes it reads and writes, which a CPU
streams from memory (a step's activations were written long before they are
read). A pure function of the config, never of this machine.
"""
from __future__ import annotations

from dataclasses import dataclass

from psgd.config import Config
from psgd.sim.host_profile import HostProfile

__all__ = ["StepWork", "step_work", "work_of", "training_step_work"]

# Operations that only make a new view of a tensor or read its metadata: no kernel runs.
_VIEWS = frozenset({"view", "_unsafe_view", "t", "transpose", "expand", "as_strided", "detach", "alias",
                    "permute", "unsqueeze", "squeeze", "reshape", "slice", "select", "split", "split_with_sizes",
                    "unbind", "lift_fresh", "_reshape_alias", "view_as", "expand_as", "numpy_T"})
# CPU attention kernels that torch's FLOP registry does not know (its CUDA ones it does).
_CPU_ATTENTION = "_scaled_dot_product_flash_attention_for_cpu"


@dataclass(frozen=True)
class StepWork:
    ops: int                       # operations dispatched (views excluded)
    flops: int                     # FLOPs of every kernel below
    products: tuple[int, ...]      # each matrix product's FLOPs, in call order
    # Each forward convolution's (FLOPs, output positions: batch x output length), and each input's and
    # weight's gradient a convolution's backward computes, the same (the two run different kernels).
    convolutions: tuple[tuple[int, int], ...] = ()
    conv_input_gradients: tuple[tuple[int, int], ...] = ()
    conv_weight_gradients: tuple[tuple[int, int], ...] = ()
    attention: tuple[int, ...] = ()       # each attention's FLOPs, forward
    attention_backward: tuple[int, ...] = ()
    memory: tuple[int, ...] = ()          # every other operation's bytes read and written
    passes: int = 0                       # training passes (one forward and its backward) in the work

    def host_terms(self, profile: HostProfile) -> dict[str, float]:
        """This work's seconds on the profile's host, by term: each pass's own cost, every operation's
        dispatch, each kernel at the rate measured for its kind and size, each other operation's bytes
        at the memory rate measured for its size."""
        return {"pass": self.passes * profile.pass_us / 1e6, "dispatch": self.ops * profile.dispatch_us / 1e6,
                "products": sum(profile.matmul_s(f) for f in self.products),
                "convolutions": sum(profile.conv_s(f, p) for f, p in self.convolutions)
                + sum(profile.conv_input_gradient_s(f, p) for f, p in self.conv_input_gradients)
                + sum(profile.conv_weight_gradient_s(f, p) for f, p in self.conv_weight_gradients),
                "attention": sum(profile.attention_s(f) for f in self.attention)
                + sum(profile.attention_backward_s(f) for f in self.attention_backward),
                "memory": sum(profile.memory_s(b) for b in self.memory)}

    def host_s(self, profile: HostProfile) -> float:
        """This work on the profile's host: the sum of its terms (host_terms)."""
        return sum(self.host_terms(profile).values())


def _nbytes(x) -> int:
    import torch
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(y) for y in x)
    return 0


def _positions(t) -> int:
    """A convolution's output (or output gradient) positions: its elements over its channels."""
    return t.numel() // max(t.shape[1], 1) if t.dim() > 1 else t.numel()


def work_of(fn, passes: int = 0) -> StepWork:
    """The operations, kernels and bytes `fn()` dispatches (it runs once); `passes`: the training
    passes it makes."""
    from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

    class _Counting(FlopCounterMode):
        def __init__(self):
            super().__init__(display=False)
            self.ops = 0
            self.kinds = {k: [] for k in ("products", "convolutions", "conv_input_gradients",
                                          "conv_weight_gradients", "attention", "attention_backward", "memory")}

        def _count_flops(self, func_packet, out, args, kwargs):
            name = func_packet.__name__
            if name in _VIEWS:
                return super()._count_flops(func_packet, out, args, kwargs)
            self.ops += 1
            if name == _CPU_ATTENTION:
                self.kinds["attention"].append(int(sdpa_flop_count(args[0].shape, args[1].shape, args[2].shape)))
            elif name == _CPU_ATTENTION + "_backward":
                self.kinds["attention_backward"].append(
                    int(sdpa_backward_flop_count(args[0].shape, args[1].shape, args[2].shape, args[3].shape)))
            elif func_packet in self.flop_registry:
                flops = int(self.flop_registry[func_packet](*args, **kwargs, out_val=out))
                if name == "convolution_backward":
                    wanted = [bool(m) for m in args[-1][:2]]  # output_mask: the input's, the weight's
                    each = (flops // max(1, sum(wanted)), _positions(args[0]))
                    for kind, want in zip(("conv_input_gradients", "conv_weight_gradients"), wanted):
                        self.kinds[kind] += [each] * want
                elif "convolution" in name:
                    self.kinds["convolutions"].append((flops, _positions(out)))
                elif "attention" in name:
                    self.kinds["attention_backward" if "backward" in name else "attention"].append(flops)
                else:
                    self.kinds["products"].append(flops)
            else:
                self.kinds["memory"].append(int(_nbytes(args) + _nbytes(list(kwargs.values())) + _nbytes(out)))
            return super()._count_flops(func_packet, out, args, kwargs)

    counter = _Counting()
    with counter:
        fn()
    k = {name: tuple(values) for name, values in counter.kinds.items()}
    flops = (sum(k["products"]) + sum(k["attention"]) + sum(k["attention_backward"])
             + sum(f for f, _ in k["convolutions"] + k["conv_input_gradients"] + k["conv_weight_gradients"]))
    return StepWork(counter.ops, flops, passes=passes, **k)


def training_step_work(task, model, batch) -> StepWork:
    """One steady-state step of `model` on `batch`: a step is taken first (the gradients exist, as
    after a worker's first step), then `zero_grad(set_to_none=False)`, forward and backward are
    counted, as psgd's worker loop runs them. The global random state is left as it was."""
    import torch

    from psgd.workers.step import forward_backward

    def step():
        model.zero_grad(set_to_none=False)
        forward_backward(task, model, batch)
    with torch.random.fork_rng(devices=[]):
        step()
        return work_of(step, passes=1)


def step_work(cfg: Config, task) -> StepWork:
    """One worker step's work: forward + backward of one `cfg.task.batch_size` batch, as psgd.sim.flops."""
    from psgd.tasks import build_model
    from psgd.tasks.loaders import train_loader
    model = build_model(cfg, task)
    batch = next(train_loader(task.train_data(), 0, cfg.cluster.workers, cfg.task.batch_size, cfg.run.seed))
    return training_step_work(task, model, batch)

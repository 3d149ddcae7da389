"""`psgd sim profile`'s compute probes: what a training step's kinds of work cost on this host, by size.

A training step reads each operand long after it was written (the backward
reads what the forward wrote a whole pass earlier), so every kernel is timed
on cold operands: each call takes the next of several copies of its inputs,
together larger than the caches (ROTATE_BYTES). Each probe is a generic
shape of its kind, never a user's model:
- matrix products, square, by size;
- one-dimensional convolutions by width and by length, forward, and each
  gradient of their backward apart (the input's and the weight's run
  different kernels: at equal FLOPs the input's takes about half the time);
- attention (scaled dot product), forward and backward, by sequence length;
- a fixed mix of the other operations a step runs (elementwise arithmetic,
  activations, a reduction, a transposing copy, softmax, layer norm, zeroing)
  by size: their bytes' rate beyond a call's own dispatch;
- the dispatch cost per operation and a training pass's own cost: a stack of
  tiny layers at two depths, forward and backward in the steady state, the
  slope and intercept of its time over its operations.
CPU figures are CPU time of this thread; cuda ones wall time, synchronized.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

__all__ = ["cpu_seconds", "cuda_seconds", "measure_compute"]

ROTATE_BYTES = 64 << 20  # operands cycled through per probe: more than a CPU's caches hold
MATMUL_SIZES = (16, 32, 64, 128, 256, 512, 1024)
CONV_WIDTHS = (4, 16, 64, 256)      # channels in and out
CONV_LENGTHS = (4, 8, 16, 64)       # output positions per signal, batch 32
ATTENTION_LENGTHS = (16, 64, 256)   # batch x heads 32, head width 32
MEMORY_NUMELS = (1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22)
DEPTHS = (1, 2, 4, 8, 16)           # the dispatch probe's layers


def cpu_seconds(fn: Callable[[], object], min_s: float, repeats: int = 5,
                clock: Callable[[], float] = time.thread_time) -> float:
    """Median over `repeats` of the CPU seconds one call takes on `clock` (each repeat loops >= `min_s`)."""
    fn()  # first call: allocations, kernel choice
    out = []
    for _ in range(repeats):
        n, t0 = 0, clock()
        while (elapsed := clock() - t0) < min_s:
            fn()
            n += 1
        out.append(elapsed / n)
    return statistics.median(out)


def cuda_seconds(fn: Callable[[], object], calls: int = 100) -> float:
    """Wall seconds per call of a kernel issued `calls` times, synchronized at the end."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls


def _call_s(device: torch.device, fn: Callable[[], object], min_s: float = 0.03) -> float:
    return cuda_seconds(fn) if device.type == "cuda" else cpu_seconds(fn, min_s)


def _rotating(make: Callable[[], tuple]) -> Callable[[], tuple]:
    """Each call, the next of enough copies of `make()`'s operands that together they exceed
    ROTATE_BYTES."""
    first = make()
    size = max(sum(t.numel() * t.element_size() for t in first if isinstance(t, torch.Tensor)), 1)
    sets = [first] + [tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in first)
                      for _ in range(max(1, ROTATE_BYTES // size) - 1)]
    at = [0]

    def next_set() -> tuple:
        at[0] = (at[0] + 1) % len(sets)
        return sets[at[0]]
    return next_set


def _cold_s(device: torch.device, make: Callable[[], tuple], call: Callable, min_s: float = 0.03) -> float:
    """Seconds of `call(*operands)` on cold operands (_rotating)."""
    operands = _rotating(make)
    return _call_s(device, lambda: call(*operands()), min_s)


Table = tuple[tuple[int, ...], tuple[float, ...]]


def _table(points: list[tuple[int, float]]) -> Table:
    """(size, seconds) points as ascending sizes and their rates."""
    points = sorted(points)
    return tuple(p for p, _ in points), tuple(round(p / max(s, 1e-12), 1) for p, s in points)


def _matmul(dev: torch.device) -> Table:
    return _table([(2 * n ** 3, _cold_s(dev, lambda n=n: (torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)),
                                        torch.mm)) for n in MATMUL_SIZES])


def _conv(dev: torch.device) -> tuple[Table, Table, Table, tuple[int, ...]]:
    """Conv1d(c, c, 3) on a batch of 32 signals, at every width and length: the forward's, the input
    gradient's and the weight gradient's tables, each probe's output positions beside them (in the
    same order). The three are timed on one set of cold operands."""
    forward, input_gradient, weight_gradient = [], [], []
    for length in CONV_LENGTHS:
        for c in CONV_WIDTHS:
            def make(c=c, length=length):
                return (torch.randn(32, c, length, device=dev), torch.randn(32, c, length, device=dev),
                        torch.randn(c, c, 3, device=dev))

            def backward(mask):
                return lambda g, x, w: torch.ops.aten.convolution_backward(
                    g, x, w, None, [1], [1], [1], False, [0], 1, mask)
            flops, positions = 2 * 32 * length * c * c * 3, 32 * length
            operands = _rotating(make)
            for probes, call in ((forward, lambda g, x, w: torch.nn.functional.conv1d(x, w, padding=1)),
                                 (input_gradient, backward([True, False, False])),
                                 (weight_gradient, backward([False, True, False]))):
                # three probes a shape: shorter loops than other kernels' keep the profile's time
                seconds = _call_s(dev, lambda call=call, operands=operands: call(*operands()), min_s=0.02)
                probes.append((positions, flops, seconds))
    positions = tuple(p for p, _, _ in forward)
    return _rates(forward), _rates(input_gradient), _rates(weight_gradient), positions


def _rates(probes: list[tuple[int, int, float]]) -> Table:
    """(positions, size, seconds) probes as their sizes and rates, in probe order."""
    return tuple(f for _, f, _ in probes), tuple(round(f / max(s, 1e-12), 1) for _, f, s in probes)


def _attention(dev: torch.device) -> tuple[Table, Table]:
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count
    sdpa = torch.nn.functional.scaled_dot_product_attention
    forward, backward = [], []
    for length in ATTENTION_LENGTHS:
        shape = (1, 32, length, 32)

        def make(shape=shape):
            return tuple(torch.randn(shape, device=dev, requires_grad=True) for _ in range(3)) + (
                torch.randn(shape, device=dev),)

        def both(q, k, v, g):
            return torch.autograd.grad(sdpa(q, k, v), (q, k, v), g)
        fwd = _cold_s(dev, make, lambda q, k, v, g: sdpa(q.detach(), k.detach(), v.detach()))
        forward.append((sdpa_flop_count(shape, shape, shape), fwd))
        backward.append((sdpa_backward_flop_count(shape, shape, shape, shape),
                         max(_cold_s(dev, make, both) - fwd, 1e-9)))
    return _table(forward), _table(backward)


def _memory_mix(a: torch.Tensor, b: torch.Tensor) -> int:
    """The other operations' mix on two (n, 64) tensors, each run once; returns the tensors they read
    and write together."""
    a + b
    a.mul_(1.0)
    torch.relu(a)
    a.sum(-1)
    a.t().contiguous()
    torch.softmax(a, -1)
    torch.nn.functional.layer_norm(a, (a.shape[-1],))
    b.zero_()
    return 3 + 2 + 2 + 1 + 2 + 2 + 2 + 2


MIX_CALLS = 8


def _memory(dev: torch.device) -> Table:
    """Bytes per call of the mix and their rate beyond a call's dispatch (the mix's time at 64
    elements, where bytes cost nothing, is taken off)."""
    def make(numel: int):
        return lambda: (torch.randn(numel // 64, 64, device=dev), torch.randn(numel // 64, 64, device=dev))
    tiny = make(64)()
    tensors = _memory_mix(*tiny)
    dispatch_s = _call_s(dev, lambda: _memory_mix(*tiny), min_s=0.01)
    points = []
    for numel in MEMORY_NUMELS:
        seconds = _cold_s(dev, make(numel), _memory_mix, min_s=0.02)
        points.append((tensors * numel * 4 // MIX_CALLS, max(seconds - dispatch_s, 1e-9) / MIX_CALLS))
    return _table(points)


def _dispatch(dev: torch.device) -> tuple[float, float]:
    """(per operation, per pass) seconds: a stack of Linear(4, 4) + ReLU layers trained one step at
    each of DEPTHS, in the steady state and counted as psgd.sim.op_count counts a step; the
    least-squares line of its time over its operations (slope, intercept)."""
    from psgd.sim.op_count import work_of
    points = []
    for depth in DEPTHS:
        layers = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
                                       for _ in range(depth)]).to(dev)
        x = torch.randn(2, 4, device=dev)

        def step(layers=layers, x=x):
            layers.zero_grad(set_to_none=False)
            layers(x).sum().backward()
        step()
        points.append((work_of(step).ops, _call_s(dev, step, min_s=0.05)))
    mean_n, mean_s = statistics.fmean(n for n, _ in points), statistics.fmean(s for _, s in points)
    per_op = max(sum((n - mean_n) * (s - mean_s) for n, s in points)
                 / sum((n - mean_n) ** 2 for n, _ in points), 0.0)
    return per_op, max(mean_s - per_op * mean_n, 0.0)


def measure_compute(device: str = "cpu") -> dict:
    """The HostProfile fields the compute probes fill, by name."""
    dev = torch.device(device)
    per_op, per_pass = _dispatch(dev)
    mm, (conv, input_gradient, weight_gradient, positions), (att, att_back), memory = (
        _matmul(dev), _conv(dev), _attention(dev), _memory(dev))
    out = dict(dispatch_us=round(per_op * 1e6, 3), pass_us=round(per_pass * 1e6, 3), conv_positions=positions)
    for name, (sizes, rates) in (("matmul_flops", mm), ("conv_flops", conv),
                                 ("conv_input_gradient_flops", input_gradient),
                                 ("conv_weight_gradient_flops", weight_gradient), ("attention_flops", att),
                                 ("attention_backward_flops", att_back), ("memory_bytes", memory)):
        out[name], out[name + "_per_s"] = sizes, rates
    return out

"""The simulator's batched-gradient path (psgd.sim.batched.BatchedGradients) on cuda
against the same path on the CPU, where `--on sim` runs it.

K virtual workers at K different parameter versions, each on its own batch of the
MNIST-1D study's CNN: one vmapped call on each device, TF32 off, so both sides compute
in fp32. A worker's gradients agree when every tensor is within GRAD_RTOL of its
largest element. Not every worker can: where one ReLU unit's input lies within rounding
of zero, two correct fp32 computations put it on different sides and hundreds of
elements differ by up to about 1% (found at 256 workers on an H200, and reproduced on
the CPU between the one-by-one and the batched path, with float64 siding with one of
them). So the check asks that WITHIN_SHARE of the workers agree, and for the worker that
differs most it says which device float64 agrees with. The timings are medians of repeated calls: cuda after
a synchronize, the CPU at one thread, as every psgd process runs.
"""
from __future__ import annotations

import copy
from functools import partial
from pathlib import Path

import torch
from check_kit import median_s  # beside this script

GRAD_RTOL = 1e-4  # cuda against cpu, fp32 both: kernels sum in another order
WITHIN_SHARE = 0.95  # of the workers: the rest may sit on a ReLU kink (above)
SIZES = {"cuda": {"ks": (16, 64, 256), "sets": [], "repeats": 10},
         "cpu": {"ks": (4,), "sets": ["task.model_args.channels=16", "task.dataset_args={num_samples: 400}"],
                 "repeats": 2}}
HOST_REPEATS = 3  # the CPU side at K = 256 takes seconds a call


def _call(batcher, versions, xs, ys, out) -> None:
    for flat in out:  # compute() adds into zeroed buffers
        for t in flat:
            t.zero_()
    batcher.compute(versions, xs, ys, out)


def _float64_gradient(model, layout, task, version, x, y) -> list[torch.Tensor]:
    """One worker's gradient on the CPU in float64, as flat fp32 per-shard tensors."""
    from psgd.sim.binding import ModelBinding
    m = copy.deepcopy(model).double()
    params = [p for p in m.parameters() if p.requires_grad]
    with torch.no_grad():
        for p, v in zip(params, ModelBinding(params, layout).tensors([t.double() for t in version])):
            p.copy_(v)
    task.loss(m(task.inputs(x).double()), task.targets(y)).backward()
    return layout.flatten([p.grad.float() for p in params])


def measure(config: Path, device: str, work: Path) -> dict:
    """Per K: the largest relative difference between the devices' gradients and each
    device's median seconds per batched call (with cuda absent, cpu against cpu)."""
    from psgd.config import load_config
    from psgd.core.sharding import layout_for_module
    from psgd.sim.batched import BatchedGradients, max_relative_error
    from psgd.sim.binding import ModelBinding
    from psgd.tasks import build_model, load_task
    from psgd.tasks.loaders import train_loader

    size = SIZES[device]
    torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cfg = load_config(config, size["sets"])
    task = load_task(cfg, work, splits=("train",))
    model = build_model(cfg, task)
    layout = layout_for_module(model, cfg.cluster.num_servers)

    def batcher(dev: str):  # the path sim.gradient_device takes: the batcher copies the model to the device
        params = [p for p in model.parameters() if p.requires_grad]
        return BatchedGradients(model, ModelBinding(params, layout), task, torch.device(dev))

    host, other = batcher("cpu"), batcher(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    base = layout.flatten([p.detach() for p in model.parameters() if p.requires_grad])
    gen = torch.Generator().manual_seed(cfg.run.seed)
    rows = []
    for k in size["ks"]:
        versions = [[s + 0.05 * torch.randn(s.shape, generator=gen) for s in base] for _ in range(k)]
        batches = [next(iter(train_loader(task.train_data(), r, k, cfg.task.batch_size, cfg.run.seed)))
                   for r in range(k)]
        xs, ys = [b[0] for b in batches], [b[1] for b in batches]
        out_host = [[torch.zeros_like(s) for s in base] for _ in range(k)]
        out_dev = [[torch.zeros_like(s, device=device) for s in base] for _ in range(k)]
        v_dev = [[s.to(device) for s in v] for v in versions]
        x_dev, y_dev = [x.to(device) for x in xs], [y.to(device) for y in ys]

        host_s = median_s(partial(_call, host, versions, xs, ys, out_host), min(HOST_REPEATS, size["repeats"]),
                           lambda: None)
        device_s = median_s(partial(_call, other, v_dev, x_dev, y_dev, out_dev), size["repeats"], sync)
        errs = [max_relative_error([t.cpu() for t in d], h) for d, h in zip(out_dev, out_host)]
        worst = max(range(k), key=errs.__getitem__)
        # Which side is right where they differ most: that worker's gradient in float64.
        exact = _float64_gradient(model, layout, task, versions[worst], xs[worst], ys[worst])
        rows.append({"workers": k, "max_relative_error": errs[worst], "within_rtol": sum(e <= GRAD_RTOL for e in errs),
                     "worst_worker": worst, "worst_cpu_vs_float64": max_relative_error(out_host[worst], exact),
                     "worst_device_vs_float64": max_relative_error([t.cpu() for t in out_dev[worst]], exact),
                     "cpu_s": host_s, "device_s": device_s, "cpu_over_device": host_s / device_s})
    return {"model": cfg.task.model, "model_args": dict(cfg.task.model_args), "batch_size": cfg.task.batch_size,
            "parameters": sum(layout.shard_sizes), "grad_rtol": GRAD_RTOL, "within_share": WITHIN_SHARE, "cpu_threads": 1, "tf32": False,
            "rows": rows}

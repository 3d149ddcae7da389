"""Device profiles for the virtual cluster's compute time (`sim.device`).

A step takes step_overhead_us + operations x launch_us + FLOPs / (peak_tflops x efficiency): the FLOPs
of one worker's forward + backward (psgd.sim.flops), at the achieved fraction
of the device's dense peak, after a fixed per-step cost (kernel launches and
Python: what a small model spends most of its step on). An accelerator also
copies the gradient to the host before a push and the parameters to the
device after a pull, at `host_gbytes_per_s`.

Peaks are the vendors' published dense figures (no structured sparsity):
- V100 SXM2: FP32 15.7, FP16 tensor 125 TFLOPS (NVIDIA V100 datasheet); PCIe 3.0 x16.
- A100 SXM: FP32 19.5, TF32 156, BF16/FP16 312 TFLOPS (NVIDIA A100 datasheet,
  dense = half the "with sparsity" figure); PCIe 4.0 x16.
- H100 SXM: FP32 67, TF32 494.5, BF16/FP16 989.5 TFLOPS (NVIDIA H100 datasheet,
  dense); PCIe 5.0 x16.
- H200 SXM: the H100's compute (NVIDIA H200 datasheet: same TFLOPS, more and
  faster memory); PCIe 5.0 x16.
- L4: FP32 30.3, TF32 60, BF16/FP16 121 TFLOPS (NVIDIA L4 datasheet, dense); PCIe 4.0 x16.
Host copy rates are about 80% of the PCIe generation's 16/32/64 GB/s per direction.
The accelerators' `efficiency` (0.5) and `step_overhead_us` (100) are stated
assumptions, not measurements: a large dense model reaches about half of peak,
a small one far less. Set sim.efficiency (or sim.compute_ms) for your model.

`cpu` is one thread of this project's reference machine (AMD EPYC, as every
psgd process runs with torch.set_num_threads(1)): an fp32 512x512 matrix
product runs at 93-99 GFLOP/s there, so peak 0.1 TFLOPS; the quickstart MLP
(0.65 MFLOP per step at batch 32, 5.2 at batch 256) measured 0.23 and 0.35 ms,
which efficiency 0.4 and 200 us per step reproduce within 5%.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from psgd.config.loader import check as _check

__all__ = ["DeviceProfile", "DEVICES"]


@dataclass(frozen=True)
class DeviceProfile:
    peak_tflops: float               # dense peak at the precision the model runs in, 10^12 FLOP/s
    efficiency: float = 0.5          # achieved fraction of that peak
    step_overhead_us: float = 0.0    # fixed time per step on top of the FLOPs
    # Per operation of the step (psgd.sim.op_count: a kernel launch on an accelerator): the step's
    # operations x this, on top of the FLOPs. 0: none (the shipped profiles: step_overhead_us stands for it).
    launch_us: float = 0.0
    # Host <-> device copy rate, gigabytes/s each way; null: the device computes in host memory.
    host_gbytes_per_s: Optional[float] = None

    def __post_init__(self):
        _check(self.peak_tflops > 0, "peak_tflops", f"must be > 0, got {self.peak_tflops}")
        _check(0 < self.efficiency <= 1, "efficiency", f"must be in (0, 1], got {self.efficiency}")
        _check(self.step_overhead_us >= 0, "step_overhead_us", f"must be >= 0, got {self.step_overhead_us}")
        _check(self.launch_us >= 0, "launch_us", f"must be >= 0, got {self.launch_us}")
        _check(self.host_gbytes_per_s is None or self.host_gbytes_per_s > 0, "host_gbytes_per_s",
               f"must be > 0 (or null for a device in host memory), got {self.host_gbytes_per_s}")


def _gpu(peak_tflops: float, host_gbytes_per_s: float) -> DeviceProfile:
    return DeviceProfile(peak_tflops, efficiency=0.5, step_overhead_us=100.0, host_gbytes_per_s=host_gbytes_per_s)


_PCIE3, _PCIE4, _PCIE5 = 12.8, 25.6, 51.2  # GB/s per direction, ~80% of 16 / 32 / 64

DEVICES: dict[str, DeviceProfile] = {
    "cpu": DeviceProfile(0.1, efficiency=0.4, step_overhead_us=200.0),
    "v100": _gpu(15.7, _PCIE3), "v100-fp16": _gpu(125.0, _PCIE3),
    "a100": _gpu(19.5, _PCIE4), "a100-tf32": _gpu(156.0, _PCIE4),
    "a100-bf16": _gpu(312.0, _PCIE4), "a100-fp16": _gpu(312.0, _PCIE4),
    "h100": _gpu(67.0, _PCIE5), "h100-tf32": _gpu(494.5, _PCIE5),
    "h100-bf16": _gpu(989.5, _PCIE5), "h100-fp16": _gpu(989.5, _PCIE5),
    "h200": _gpu(67.0, _PCIE5), "h200-tf32": _gpu(494.5, _PCIE5),
    "h200-bf16": _gpu(989.5, _PCIE5), "h200-fp16": _gpu(989.5, _PCIE5),
    "l4": _gpu(30.3, _PCIE4), "l4-tf32": _gpu(60.0, _PCIE4),
    "l4-bf16": _gpu(121.0, _PCIE4), "l4-fp16": _gpu(121.0, _PCIE4),
}

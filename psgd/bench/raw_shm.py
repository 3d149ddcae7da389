"""The shared-memory floor: what any same-host parameter server must do per
push+pull when the bytes travel through shared memory, with no protocol.

One round trip copies the gradient into a segment's request region, checks
it is finite (one pass), applies plain SGD in place from the region, and
copies the parameters into the reply region. Everything runs in the calling
process: no message, no wake-up, no second core, so it bounds from below
what psgd's shared-memory path can reach with the same copies and the same
arithmetic.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Optional

import torch

from psgd.wire.shm import Segment

__all__ = ["ShmSgdFloor", "time_shm_floor"]


class ShmSgdFloor:
    """Holds a flat fp32 parameter vector and one segment sized for it."""

    def __init__(self, numel: int, lr: float = 1e-6, directory: Optional[Path] = None):
        self.params = torch.zeros(numel)
        self.lr = lr
        self.numel = numel
        self.skipped = 0  # non-finite gradients refused
        self._segment = Segment.create(4 * numel, 4 * numel, directory)
        self._segment.unlink()  # the mapping is all this process needs
        self._req = 0

    def round_trip(self, grad: torch.Tensor) -> torch.Tensor:
        """One push+pull of `grad` (fp32, `numel` elements); returns the
        parameters as they lie in the reply region (valid until the next call)."""
        gen, nbytes = self._segment.put_request(grad)
        g = self._segment.request_view(gen, nbytes).view(torch.float32)
        if math.isfinite(g.sum().item()):
            self.params.add_(g, alpha=-self.lr)
        else:
            self.skipped += 1
        self._req += 1
        self._segment.put_reply(self._req, self.params)
        return self._segment.reply_view(self._req, nbytes).view(torch.float32)

    def close(self) -> None:
        self._segment.close()


def time_shm_floor(numel: int, warmup: int, repeats: int) -> list[float]:
    """Seconds per floor round trip, after `warmup` untimed ones."""
    floor = ShmSgdFloor(numel)
    grad = torch.randn(numel) * 1e-3
    times = []
    try:
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            floor.round_trip(grad)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    finally:
        floor.close()
    return times

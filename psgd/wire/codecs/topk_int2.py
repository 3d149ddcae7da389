"""Top-k coordinates with 2-bit values, as SparseLoCo sends a delta (Sarfi et al. 2025):
the k = topk_ratio share of largest magnitudes (the top-k codec's choice, indices
ascending), their values in int2_ef's ternary block codes (-1, 0, +1 times the block's
largest magnitude, one fp32 scale per 64 of the k values). Three frames: int32
indices, packed codes, scales; 4 + 0.25 + 4/64 bytes per coordinate sent.

It keeps no residual: what one push leaves out is lost unless the sender keeps it, as
SparseLoCo's own error feedback does (psgd.core.local_methods.sparseloco). Without one,
encoding is a function of the gradient alone, so the sender can know exactly what a
shard will decode. One push's error: the coordinates left out are whole (none larger
than the k-th largest magnitude); a sent one is off by at most int2_ef's bound for its block."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from psgd.wire.codecs._blocks import block_amax, blocks_nbytes, decode_blocks, error_bound, pack, quantize
from psgd.wire.codecs._sparse import SparseCodec, largest, topk_count
from psgd.wire.codecs.base import DEV_MACHINE, CodecCost, CodecOptions, Encoded, codec
from psgd.wire.codecs.int2_ef import Int2EF
from psgd.wire.frames import tensor_frame

__all__ = ["TopKInt2"]

BITS = Int2EF.bits


@codec
class TopKInt2(SparseCodec):
    name = "topk_int2"
    # at topk_ratio 0.01; measured while the machine ran other jobs (the top-k codec's encode
    # measured there and then at 0.22, against its 0.42 on the reference machine)
    cost = CodecCost(encode_gbytes_per_s=0.24, decode_gbytes_per_s=8.5, measured_on=DEV_MACHINE + ", under load")
    frames = 3
    frame_words = "an index, a code and a scale frame"
    wire_dtype = torch.uint8
    error_feedback = False

    @classmethod
    def bytes_per_element(cls, options: CodecOptions) -> float:
        return options.topk_ratio * (4 + BITS / 8 + 4 / 64)  # an int32 index, 2 bits and a share of a scale

    @classmethod
    def wire_nbytes(cls, numel: int, nnz: int = 0) -> int:
        return 4 * nnz + blocks_nbytes(nnz, BITS)

    @classmethod
    def round_trip_bound(cls, x: torch.Tensor, options: CodecOptions) -> torch.Tensor:
        flat = x.reshape(-1)
        k = topk_count(flat.numel(), options.topk_ratio)
        if k == 0:
            return torch.zeros(0, dtype=torch.float64, device=x.device)
        bound = flat.double().abs().topk(k).values[-1].expand(flat.numel()).clone()  # a coordinate left out
        sent = largest(flat, k)
        bound[sent] = error_bound(block_amax(flat[sent]), BITS)
        return bound

    def encode_sparse(self, shard: int, flat: torch.Tensor) -> Encoded:
        k = self.k[shard]
        indices = largest(flat, k) if k else torch.empty(0, dtype=torch.long, device=flat.device)
        codes, scales = quantize(flat[indices], BITS)
        frames = [tensor_frame(indices.to(torch.int32).cpu()), tensor_frame(pack(codes, BITS).cpu()),
                  tensor_frame(scales.cpu())]
        return Encoded(frames, self.name, nnz=k)

    @classmethod
    def decode_values(cls, frames: Sequence[Any], nnz: int, scale: float) -> torch.Tensor:
        """int2_ef's ternary codes and block scales, checked as int2_ef's are."""
        return decode_blocks(cls.name, BITS, frames, nnz, scale, None)

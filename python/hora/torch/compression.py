"""hora.torch.compression -- gradient compression for allreduce (Horovod's
Compression.none and Compression.fp16, and Compression.bf16).

A compressor whose `wire16` is true also asks horad to send the values
between hosts in the 16-bit type (HORA_REQ_WIRE16, hora(3)): each hop of
the ring between hosts rounds the partial sum to 16 bits, as NCCL and MPI
do for a float16 allreduce, instead of carrying float32 and rounding once.
Within a host the sum is formed in float32 either way."""

import torch


class Compressor:
    """Interface: compress(tensor) -> (tensor, ctx) before the collective;
    decompress(tensor, ctx) -> tensor after it; wire16: 16-bit values
    between hosts."""

    wire16 = False

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16 (between hosts too) and come
    back in their own dtype; other tensors are sent as they are."""

    wire16 = True
    wire_dtype = torch.float16

    @classmethod
    def compress(cls, tensor):
        dtype = tensor.dtype
        if dtype.is_floating_point and dtype != cls.wire_dtype:
            return tensor.type(cls.wire_dtype), dtype
        return tensor, dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and ctx.is_floating_point and tensor.dtype != ctx:
            return tensor.type(ctx)
        return tensor


class BF16Compressor(FP16Compressor):
    """As FP16Compressor, in bfloat16: float32's range, 8 bits of
    precision."""

    wire_dtype = torch.bfloat16


class Compression:
    """The compression algorithms for allreduce and DistributedOptimizer."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor

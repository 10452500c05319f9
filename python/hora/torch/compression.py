"""hora.torch.compression -- gradient compression for allreduce (Horovod's
Compression.none and Compression.fp16)."""

import torch


class Compressor:
    """Interface: compress(tensor) -> (tensor, ctx) before the collective;
    decompress(tensor, ctx) -> tensor after it."""

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
    """Floating-point tensors travel as float16 and come back in their own
    dtype; other tensors are sent as they are."""

    @staticmethod
    def compress(tensor):
        dtype = tensor.dtype
        if dtype.is_floating_point and dtype != torch.float16:
            return tensor.type(torch.float16), dtype
        return tensor, dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and ctx.is_floating_point and tensor.dtype != ctx:
            return tensor.type(ctx)
        return tensor


class Compression:
    """The compression algorithms for allreduce and DistributedOptimizer."""
    none = NoneCompressor
    fp16 = FP16Compressor

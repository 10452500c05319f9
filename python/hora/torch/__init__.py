"""hora.torch -- a drop-in for horovod.torch on top of libhora.

    import hora.torch as hvd
    hvd.init()
    model = ...
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Plain Python over ctypes: it works with any PyTorch version. CPU tensors
only until hora's GPU engine exists. Errors from the runtime (ranks that
disagree about an operation, a rank that is gone, a stall) raise
HoraInternalError (also importable as HorovodInternalError), a RuntimeError
with the runtime's message naming the ranks and the tensor.
"""

from hora import __version__
from hora.torch.compression import Compression
from hora.torch.mpi_ops import (
    HoraInternalError, HorovodInternalError,
    init, shutdown, is_initialized, rank, size, local_rank, local_size,
    cross_rank, cross_size, is_homogeneous,
    mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled, gloo_built,
    nccl_built, ddl_built, ccl_built, cuda_built, rocm_built,
    Average, Sum, Adasum, Min, Max, Product,
    ProcessSet, global_process_set,
    allreduce, allreduce_, allreduce_async, allreduce_async_,
    broadcast, broadcast_, broadcast_async, broadcast_async_,
    allgather, barrier, poll, synchronize,
    HoraAllreduce, HoraBroadcast,
)
from hora.torch.optimizer import DistributedOptimizer
from hora.torch.functions import (broadcast_parameters,
                                  broadcast_optimizer_state, broadcast_object,
                                  allgather_object)

__all__ = [
    "__version__", "Compression", "HoraInternalError", "HorovodInternalError",
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank",
    "local_size", "cross_rank", "cross_size", "is_homogeneous",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled",
    "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
    "rocm_built",
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "ProcessSet", "global_process_set", "HoraAllreduce", "HoraBroadcast",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "allgather", "barrier", "poll", "synchronize",
    "DistributedOptimizer", "broadcast_parameters",
    "broadcast_optimizer_state", "broadcast_object", "allgather_object",
]

"""hora.torch -- a drop-in for horovod.torch on top of libhora.

    import hora.torch as hvd
    hvd.init()
    model = ...
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Plain Python over ctypes: it works with any PyTorch version. CPU and CUDA
tensors (CUDA ones staged through shared memory by libhora until horad
has its GPU engine). Every collective takes process_set=
(static sets: init(process_sets=[...]); dynamic ones: add_process_set()).
Errors from the runtime (ranks that disagree about an operation, a rank that is gone, a stall) raise
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
    start_timeline, stop_timeline,
    Average, Sum, Adasum, Min, Max, Product,
    ProcessSet, global_process_set, add_process_set, remove_process_set,
    allreduce, allreduce_, allreduce_async, allreduce_async_,
    grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
    grouped_allreduce_async_, sparse_allreduce_async,
    broadcast, broadcast_, broadcast_async, broadcast_async_,
    allgather, allgather_async, grouped_allgather, grouped_allgather_async,
    alltoall, alltoall_async,
    reducescatter, reducescatter_async, grouped_reducescatter,
    grouped_reducescatter_async,
    barrier, join, poll, synchronize,
    HoraAllreduce, HoraGroupedAllreduce, HoraBroadcast, HoraAllgather,
    HoraGroupedAllgather, HoraAlltoall, HoraReducescatter,
    HoraGroupedReducescatter, priority,
)
from hora.torch.optimizer import DistributedOptimizer
from hora.torch.ddp import DistributedDataParallel
from hora.torch.functions import (broadcast_parameters,
                                  broadcast_optimizer_state, broadcast_object,
                                  allgather_object)
from hora.torch.sync_batch_norm import SyncBatchNorm
from hora.torch.arena import arena_empty, arena_zeros, arena_size, in_arena
from hora.torch import elastic

__all__ = [
    "__version__", "Compression", "HoraInternalError", "HorovodInternalError",
    "arena_empty", "arena_zeros", "arena_size", "in_arena",
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank",
    "local_size", "cross_rank", "cross_size", "is_homogeneous",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled",
    "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
    "rocm_built", "start_timeline", "stop_timeline",
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "sparse_allreduce_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "allgather", "allgather_async", "grouped_allgather",
    "grouped_allgather_async", "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter",
    "grouped_reducescatter_async", "barrier", "join", "poll", "synchronize",
    "HoraAllreduce", "HoraGroupedAllreduce", "HoraBroadcast",
    "HoraAllgather", "HoraGroupedAllgather", "HoraAlltoall",
    "HoraReducescatter", "HoraGroupedReducescatter", "priority",
    "DistributedOptimizer", "DistributedDataParallel", "broadcast_parameters",
    "broadcast_optimizer_state", "broadcast_object", "allgather_object",
    "SyncBatchNorm", "elastic",
]

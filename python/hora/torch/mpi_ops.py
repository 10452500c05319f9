"""hora.torch.mpi_ops -- collectives on torch tensors, with Horovod's names,
arguments and semantics, over libhora through ctypes.

Tensors are handed to libhora by address (tensor.data_ptr()): no copy is
made of a contiguous tensor. A non-contiguous tensor is reduced through a
contiguous copy (and, in place, copied back). Every tensor the library may
touch is kept alive until its handle is synchronized.
"""

import torch

import hora as _core
from hora import (HoraInternalError, Average, Sum, Adasum, Min, Max, Product,
                  init, shutdown, is_initialized, rank, size, local_rank,
                  local_size, cross_rank, cross_size, is_homogeneous, poll,
                  synchronize)
from hora.torch.compression import Compression

HorovodInternalError = HoraInternalError

__all__ = [
    "HoraInternalError", "HorovodInternalError", "init", "shutdown",
    "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "Average", "Sum", "Adasum",
    "Min", "Max", "Product", "ProcessSet", "global_process_set",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled",
    "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
    "rocm_built", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "allgather", "barrier", "poll", "synchronize",
    "HoraAllreduce", "HoraBroadcast", "HoraAllgather", "Compression",
]

_DTYPES = {
    torch.uint8: _core.UINT8,
    torch.int8: _core.INT8,
    torch.int16: _core.INT16,
    torch.int32: _core.INT32,
    torch.int64: _core.INT64,
    torch.float16: _core.FLOAT16,
    torch.bfloat16: _core.BFLOAT16,
    torch.float32: _core.FLOAT32,
    torch.float64: _core.FLOAT64,
}


class ProcessSet:
    """The global process set (every rank of the job); hora has no other
    process sets yet."""
    process_set_id = 0

    def size(self):
        return size()

    def rank(self):
        return rank()

    def included(self):
        return True

    @property
    def ranks(self):
        return list(range(size()))

    def __repr__(self):
        return "ProcessSet(process_set_id=0, global)"


global_process_set = ProcessSet()


def _check_process_set(process_set):
    if process_set is None or process_set is global_process_set:
        return
    if getattr(process_set, "process_set_id", None) != 0:
        raise NotImplementedError("hora supports only the global process set")


# Capability probes of horovod.torch
def mpi_threads_supported():
    return False


def mpi_enabled():
    return False


def mpi_built():
    return False


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


def _dtype_code(tensor, what):
    """Checks that libhora can take `tensor`; returns its hora dtype."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("hora.torch.%s: expected a torch.Tensor, got %s"
                        % (what, type(tensor).__name__))
    device = tensor.device
    if device.type != "cpu":
        if device.type == "cuda":
            raise ValueError(
                "hora.torch.%s: the tensor is a CUDA tensor (on %s), but hora "
                "has no GPU engine yet: only CPU tensors can be used. Move it "
                "to the CPU first (tensor.cpu())." % (what, device))
        raise ValueError("hora.torch.%s: the tensor is on device %s; hora "
                         "supports CPU tensors only" % (what, device))
    if tensor.layout != torch.strided:
        raise ValueError("hora.torch.%s: %s tensors are not supported; use a "
                         "dense tensor (tensor.to_dense())"
                         % (what, tensor.layout))
    code = _DTYPES.get(tensor.dtype)
    if code is None:
        raise ValueError("Tensor type %s is not supported. hora.torch "
                         "supports uint8, int8, int16, int32, int64, float16, "
                         "bfloat16, float32 and float64 tensors."
                         % tensor.type())
    return code


def _contig(t):
    return t if t.is_contiguous() else t.contiguous()


def _scale_(buf, factor, is_int):
    # Integer tensors are scaled the way Horovod scales them: in double
    # precision, truncated toward zero.
    if is_int:
        buf.copy_(buf.double().mul_(factor).to(buf.dtype))
    else:
        buf.mul_(factor)


def _allreduce_async(tensor, name, op, prescale_factor, postscale_factor,
                     process_set, inplace):
    _check_process_set(process_set)
    code = _dtype_code(tensor, "allreduce")
    is_int = code in _core._INT_DTYPES
    c_op, pre, post = _core._plan_allreduce(op, is_int, prescale_factor,
                                            postscale_factor)
    with torch.no_grad():
        t = tensor.detach()
        if inplace:
            buf = _contig(t)
            if pre != 1.0:
                _scale_(buf, pre, is_int)
            src = out = buf
        elif pre != 1.0:
            src = out = t.clone(memory_format=torch.contiguous_format)
            _scale_(out, pre, is_int)
        else:
            src = _contig(t)
            out = torch.empty(t.shape, dtype=t.dtype)

    def finish():
        with torch.no_grad():
            if post != 1.0:
                _scale_(out, post, is_int)
            if inplace:
                if out is not t:
                    t.copy_(out)
                return tensor
            return out

    return _core._allreduce_raw(name, src.data_ptr(), out.data_ptr(),
                                out.numel(), code, c_op,
                                (tensor, t, src, out), finish)


def allreduce_async(tensor, average=None, name=None, op=None,
                    prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an allreduce of `tensor` over every rank; the input is not
    modified. Returns a handle for poll() and synchronize(); synchronize()
    returns a new tensor of the input's shape and dtype.

    op: Average (default), Sum, Min, Max or Product. prescale_factor and
    postscale_factor multiply the input before and the result after the
    reduction. Operations are matched across ranks by name, or by call order
    when no name is given ("allreduce.noname.<n>")."""
    op = _core._resolve_op(op, average)
    return _allreduce_async(tensor, name, op, prescale_factor,
                            postscale_factor, process_set, False)


def allreduce_async_(tensor, average=None, name=None, op=None,
                     prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """In-place allreduce_async: synchronize() returns `tensor`, which then
    holds the result."""
    op = _core._resolve_op(op, average)
    return _allreduce_async(tensor, name, op, prescale_factor,
                            postscale_factor, process_set, True)


class HoraAllreduce(torch.autograd.Function):
    """allreduce as an autograd function: its gradient is the allreduce (with
    the same op and factors) of the incoming gradient."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor,
                process_set):
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        return synchronize(_allreduce_async(tensor, name, op, prescale_factor,
                                            postscale_factor, process_set,
                                            False))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=ctx.op,
                         prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor,
                         process_set=ctx.process_set)
        return grad, None, None, None, None, None


HorovodAllreduce = HoraAllreduce


def allreduce(tensor, average=None, name=None, compression=Compression.none,
              op=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """Reduces `tensor` over every rank and returns the result as a new
    tensor; the input is not modified. Autograd-aware: if `tensor` requires
    grad, the gradient flows back through an allreduce of the gradient.

    op: Average (default), Sum, Min, Max or Product. compression:
    Compression.none or Compression.fp16 (floating tensors travel as float16
    and come back in their own dtype). prescale_factor/postscale_factor
    multiply the input before and the result after the reduction."""
    op = _core._resolve_op(op, average)
    _dtype_code(tensor, "allreduce")  # refuse early, before autograd
    compressed, ctx = compression.compress(tensor)
    out = HoraAllreduce.apply(compressed, name, op, prescale_factor,
                              postscale_factor, process_set)
    return compression.decompress(out, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over every rank in place; returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op,
                                        prescale_factor, postscale_factor,
                                        process_set))


def _broadcast_async(tensor, root_rank, name, process_set, inplace):
    _check_process_set(process_set)
    code = _dtype_code(tensor, "broadcast")
    root_rank = int(root_rank)
    with torch.no_grad():
        t = tensor.detach()
        if inplace:
            buf = _contig(t)
        elif rank() == root_rank:
            buf = t.clone(memory_format=torch.contiguous_format)
        else:
            buf = torch.empty(t.shape, dtype=t.dtype)

    def finish():
        if inplace:
            if buf is not t:
                with torch.no_grad():
                    t.copy_(buf)
            return tensor
        return buf

    return _core._broadcast_raw(name, buf.data_ptr(), buf.numel(), code,
                                root_rank, (tensor, t, buf), finish)


def broadcast_async(tensor, root_rank, name=None,
                    process_set=global_process_set):
    """Starts a broadcast of root_rank's `tensor` to every rank; the input is
    not modified and synchronize() returns a new tensor."""
    return _broadcast_async(tensor, root_rank, name, process_set, False)


def broadcast_async_(tensor, root_rank, name=None,
                     process_set=global_process_set):
    """In-place broadcast_async: `tensor` receives root_rank's values."""
    return _broadcast_async(tensor, root_rank, name, process_set, True)


class HoraBroadcast(torch.autograd.Function):
    """broadcast as an autograd function (as in Horovod: the gradient is the
    average of every rank's gradient on the root, zero elsewhere)."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(_broadcast_async(tensor, root_rank, name,
                                            process_set, False))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


HorovodBroadcast = HoraBroadcast


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's `tensor` on every rank, as a new tensor; the input
    is not modified. Autograd-aware."""
    _dtype_code(tensor, "broadcast")  # refuse early, before autograd
    return HoraBroadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` with root_rank's on every rank; returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def _sub_name(name, suffix):
    return None if name is None or name == "" else "%s.%s" % (name, suffix)


def _allgather(tensor, name, process_set):
    _check_process_set(process_set)
    _dtype_code(tensor, "allgather")
    if tensor.dim() == 0:
        raise ValueError("hora.torch.allgather: the tensor needs at least one "
                         "dimension")
    n, me = size(), rank()
    counts = torch.zeros(n, dtype=torch.int64)
    counts[me] = tensor.shape[0]
    allreduce_(counts, op=Sum, name=_sub_name(name, "sizes"))
    counts = counts.tolist()
    out = torch.empty((sum(counts),) + tuple(tensor.shape[1:]),
                      dtype=tensor.dtype)
    handles, off = [], 0
    with torch.no_grad():
        for r in range(n):
            part = out.narrow(0, off, counts[r])
            if r == me:
                part.copy_(tensor.detach())
            handles.append(broadcast_async_(part, r, _sub_name(name, r)))
            off += counts[r]
    for h in handles:
        synchronize(h)
    return out, counts


class HoraAllgather(torch.autograd.Function):
    """allgather as an autograd function (Horovod's gradient: this rank's
    slice of the averaged incoming gradient)."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        out, counts = _allgather(tensor, name, process_set)
        ctx.offset = sum(counts[:rank()])
        ctx.dim = counts[rank()]
        ctx.process_set = process_set
        return out

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        return grad.narrow(0, ctx.offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's `tensor` along dimension 0, in rank order;
    dimension 0 may differ between ranks. (Built from an allreduce of the
    sizes and one broadcast per rank until libhora has an allgather.)"""
    _dtype_code(tensor, "allgather")  # refuse early, before autograd
    return HoraAllgather.apply(tensor, name, process_set)


def barrier(process_set=global_process_set):
    """Returns once every rank of the job has entered barrier()."""
    _check_process_set(process_set)
    _core.barrier()

"""hora.torch.mpi_ops -- collectives on torch tensors, with Horovod's names,
arguments and semantics, over libhora through ctypes.

Tensors are handed to libhora by address (tensor.data_ptr()): no copy is
made of a contiguous tensor. A non-contiguous tensor goes through a
contiguous copy (and, in place, is copied back). Every tensor the library
may touch is kept alive until its handle is synchronized.
"""

import torch

import hora as _core
from hora import (HoraInternalError, HorovodInternalError, Average, Sum,
                  Adasum, Min, Max, Product, init, shutdown, is_initialized,
                  rank, size, local_rank, local_size, cross_rank, cross_size,
                  is_homogeneous, poll, synchronize, ProcessSet,
                  global_process_set, add_process_set, remove_process_set,
                  barrier, join)
from hora.torch.compression import Compression

__all__ = [
    "HoraInternalError", "HorovodInternalError", "init", "shutdown",
    "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "Average", "Sum", "Adasum",
    "Min", "Max", "Product", "ProcessSet", "global_process_set",
    "add_process_set", "remove_process_set",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled",
    "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
    "rocm_built", "start_timeline", "stop_timeline",
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
    "HoraReducescatter", "HoraGroupedReducescatter", "Compression",
    "priority",
]

# torch dtype -> libhora dtype name (the code comes from the library)
_DTYPES = {
    torch.uint8: "uint8",
    torch.int8: "int8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float32: "float32",
    torch.float64: "float64",
}


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
    return 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    """True: CUDA tensors are taken by every op in every build of hora
    (libhora finds the CUDA driver a program has loaded; it links none).
    Until horad has its GPU engine (nccl_built()), they are staged through
    the rank's shared memory and reduced by the CPU engine."""
    return True


def rocm_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    """Horovod's start_timeline (hora.start_timeline): host 0's horad
    writes a Chrome trace of every operation into file_path from now on,
    with CYCLE_START markers when mark_cycles."""
    _core.start_timeline(file_path, mark_cycles)


def stop_timeline():
    """Horovod's stop_timeline: returns once the file is complete."""
    _core.stop_timeline()


def _dtype_code(tensor, what):
    """Checks that libhora can take `tensor`; returns its hora dtype."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("hora.torch.%s: expected a torch.Tensor, got %s"
                        % (what, type(tensor).__name__))
    device = tensor.device
    if device.type not in ("cpu", "cuda"):
        raise ValueError("hora.torch.%s: the tensor is on device %s; hora "
                         "takes CPU and CUDA tensors" % (what, device))
    if tensor.layout != torch.strided:
        raise ValueError("hora.torch.%s: %s tensors are not supported; use a "
                         "dense tensor (tensor.to_dense())"
                         % (what, tensor.layout))
    name = _DTYPES.get(tensor.dtype)
    if name is None:
        raise ValueError("Tensor type %s is not supported. hora.torch "
                         "supports uint8, int8, int16, int32, int64, float16, "
                         "bfloat16, float32 and float64 tensors."
                         % tensor.type())
    return _core.dtype_code(name)


def _contig(t):
    return t if t.is_contiguous() else t.contiguous()


def _stream(t):
    """The CUDA stream that orders the work on t (its device's current
    stream), or None for a CPU tensor."""
    if t.device.type != "cuda":
        return None
    return torch.cuda.current_stream(t.device).cuda_stream


def _buf(t, code):
    return _core._Buf(t.data_ptr(), t.shape, code, _stream(t))


def _alloc_like(t):
    def alloc(i, shape):
        out = torch.empty(shape, dtype=t.dtype, device=t.device)
        return out, out.data_ptr()
    return alloc


# ---- allreduce -------------------------------------------------------------


def _wire16(compression):
    """Whether the compressor asks for 16-bit values between hosts."""
    return bool(getattr(compression, "wire16", False))


def _allreduce_group(tensors, name, op, prescale_factor, postscale_factor,
                     process_set, inplace, grouped, wire16=False):
    pairs, works = [], []
    with torch.no_grad():
        for tensor in tensors:
            code = _dtype_code(tensor, "allreduce")
            t = tensor.detach()
            src = _contig(t)
            out = src if inplace else torch.empty(t.shape, dtype=t.dtype,
                                                  device=t.device)
            works.append((tensor, t, src, out))
            pairs.append((_buf(src, code), _buf(out, code)))

    def finish():
        res = []
        with torch.no_grad():
            for tensor, t, src, out in works:
                if inplace:
                    if out is not t:
                        t.copy_(out)
                    res.append(tensor)
                else:
                    res.append(out)
        return res if grouped else res[0]

    return _core._start_allreduce(pairs, op, prescale_factor,
                                  postscale_factor, name, process_set, works,
                                  finish, grouped, wire16)


def allreduce_async(tensor, average=None, name=None, op=None,
                    prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an allreduce of `tensor` over the process set; the input is not
    modified. Returns a handle for poll() and synchronize(); synchronize()
    returns a new tensor of the input's shape and dtype.

    op: Average (default), Sum, Adasum, Min, Max or Product.
    prescale_factor and postscale_factor multiply the input before and the
    result after the reduction (horad applies them). Ranks must agree on
    dtype and shape.
    Operations are matched across ranks by name, or by call order when no
    name is given."""
    op = _core._resolve_op(op, average)
    return _allreduce_group([tensor], name, op, prescale_factor,
                            postscale_factor, process_set, False, False)


def allreduce_async_(tensor, average=None, name=None, op=None,
                     prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """In-place allreduce_async: synchronize() returns `tensor`, which then
    holds the result."""
    op = _core._resolve_op(op, average)
    return _allreduce_group([tensor], name, op, prescale_factor,
                            postscale_factor, process_set, True, False)


class HoraAllreduce(torch.autograd.Function):
    """allreduce as an autograd function: its gradient is the allreduce (with
    the same op and factors) of the incoming gradient."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor,
                process_set, *wire16):
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        ctx.nextra = len(wire16)  # (wire16,): the compressors' request
        return synchronize(_allreduce_group([tensor], name, op,
                                            prescale_factor, postscale_factor,
                                            process_set, False, False,
                                            bool(wire16 and wire16[0])))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=ctx.op,
                         prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor,
                         process_set=ctx.process_set)
        return (grad, None, None, None, None, None) + (None,) * ctx.nextra


HorovodAllreduce = HoraAllreduce


def allreduce(tensor, average=None, name=None, compression=Compression.none,
              op=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """Reduces `tensor` over the process set and returns the result as a new
    tensor; the input is not modified. Autograd-aware: if `tensor` requires
    grad, the gradient flows back through an allreduce of the gradient.

    op: Average (default), Sum, Adasum, Min, Max or Product. compression:
    Compression.none, Compression.fp16 or Compression.bf16 (floating
    tensors travel as float16 or bfloat16, between hosts too, and come back
    in their own dtype; see hora.torch.compression).
    prescale_factor/postscale_factor multiply the input before and the
    result after the reduction."""
    op = _core._resolve_op(op, average)
    _dtype_code(tensor, "allreduce")  # refuse early, before autograd
    compressed, cctx = compression.compress(tensor)
    out = HoraAllreduce.apply(compressed, name, op, prescale_factor,
                              postscale_factor, process_set,
                              _wire16(compression))
    return compression.decompress(out, cctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over the process set in place; returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op,
                                        prescale_factor, postscale_factor,
                                        process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None,
                            prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Starts an allreduce of every tensor of the list (out of place);
    synchronize() returns the list of results."""
    op = _core._resolve_op(op, average)
    return _allreduce_group(list(tensors), name, op, prescale_factor,
                            postscale_factor, process_set, False, True)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None,
                             prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    """In-place grouped_allreduce_async."""
    op = _core._resolve_op(op, average)
    return _allreduce_group(list(tensors), name, op, prescale_factor,
                            postscale_factor, process_set, True, True)


class HoraGroupedAllreduce(torch.autograd.Function):
    """grouped_allreduce as an autograd function."""

    wire16 = False  # _HoraGroupedAllreduce16: 16-bit values between hosts

    @classmethod
    def forward(cls, ctx, name, op, prescale_factor, postscale_factor,
                process_set, *tensors):
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        return tuple(synchronize(_allreduce_group(
            list(tensors), name, op, prescale_factor, postscale_factor,
            process_set, False, True, cls.wire16)))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = grouped_allreduce(list(grad_output), op=ctx.op,
                                  prescale_factor=ctx.prescale_factor,
                                  postscale_factor=ctx.postscale_factor,
                                  process_set=ctx.process_set)
        return (None, None, None, None, None) + tuple(grads)


class _HoraGroupedAllreduce16(HoraGroupedAllreduce):
    """HoraGroupedAllreduce for a compressor that asks for 16 bits between
    hosts (Compression.fp16, .bf16)."""
    wire16 = True


def grouped_allreduce(tensors, average=None, name=None,
                      compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Reduces every tensor of the list over the process set; returns the
    list of results (new tensors). Autograd-aware."""
    op = _core._resolve_op(op, average)
    tensors = list(tensors)
    for t in tensors:
        _dtype_code(t, "grouped_allreduce")
    pairs = [compression.compress(t) for t in tensors]
    fn = _HoraGroupedAllreduce16 if _wire16(compression) \
        else HoraGroupedAllreduce
    outs = fn.apply(name, op, prescale_factor, postscale_factor, process_set,
                    *[p[0] for p in pairs])
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None,
                       prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """Reduces every tensor of the list in place; returns the list."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op,
                                                prescale_factor,
                                                postscale_factor,
                                                process_set))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Starts the reduction of a sparse (COO) tensor: its indices and values
    are allgathered (so the result holds every rank's entries; duplicates
    add up when coalesced), values divided by the set's size for Average.
    Returns a function that waits and returns the sparse result (Horovod's
    sparse allreduce)."""
    t = tensor
    indices_handle = allgather_async(
        t._indices().transpose(0, 1).contiguous(),
        name=_core._sub_name(name, "indices"), process_set=process_set)
    values_handle = allgather_async(t._values().contiguous(),
                                    name=_core._sub_name(name, "values"),
                                    process_set=process_set)

    def handle():
        values = synchronize(values_handle)
        indices = synchronize(indices_handle)
        if op == Average:
            values = values / process_set.size()
        if indices.dim() == 0 or values.dim() == 0:
            return t.new().resize_as_(t)
        return torch.sparse_coo_tensor(indices.transpose(0, 1), values,
                                       t.size())
    return handle


# ---- broadcast -------------------------------------------------------------


def _broadcast_async(tensor, root_rank, name, process_set, inplace):
    code = _dtype_code(tensor, "broadcast")
    root_rank = int(root_rank)
    with torch.no_grad():
        t = tensor.detach()
        if inplace:
            buf = _contig(t)
        elif rank() == root_rank:
            buf = t.clone(memory_format=torch.contiguous_format)
        else:
            buf = torch.empty(t.shape, dtype=t.dtype, device=t.device)

    def finish():
        if inplace:
            if buf is not t:
                with torch.no_grad():
                    t.copy_(buf)
            return tensor
        return buf

    return _core._start_broadcast([_buf(buf, code)], root_rank, name,
                                  process_set, (tensor, t, buf), finish)


def broadcast_async(tensor, root_rank, name=None,
                    process_set=global_process_set):
    """Starts a broadcast of root_rank's `tensor` to every rank of the
    process set; the input is not modified and synchronize() returns a new
    tensor. root_rank is a global rank."""
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


# ---- allgather -------------------------------------------------------------


def _allgather_async(tensors, name, process_set, grouped, with_counts):
    bufs, works = [], []
    with torch.no_grad():
        for tensor in tensors:
            code = _dtype_code(tensor, "allgather")
            t = _contig(tensor.detach())
            works.append(t)
            bufs.append(_buf(t, code))
    outs_keep = []

    def alloc(i, shape):
        out = torch.empty(shape, dtype=works[i].dtype,
                          device=works[i].device)
        outs_keep.append(out)
        return out, out.data_ptr()

    def finish(outs, rows):
        res = list(outs) if grouped else outs[0]
        return (res, rows) if with_counts else res

    return _core._start_allgather(bufs, alloc, name, process_set,
                                  (works, outs_keep), finish, grouped)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts an allgather of `tensor`; synchronize() returns the
    concatenation of every member's tensor along dimension 0."""
    return _allgather_async([tensor], name, process_set, False, False)


def _offset(rows, ps):
    r = ps.rank() if ps is not None else rank()
    return sum(rows[:r]), rows[r]


class HoraAllgather(torch.autograd.Function):
    """allgather as an autograd function (Horovod's gradient: this rank's
    slice of the averaged incoming gradient)."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        out, rows = synchronize(_allgather_async([tensor], name, process_set,
                                                 False, True))
        ctx.offset, ctx.dim = _offset(rows[0], process_set)
        ctx.process_set = process_set
        return out

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        return grad.narrow(0, ctx.offset, ctx.dim), None, None


HorovodAllgather = HoraAllgather


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every member's `tensor` along dimension 0, in rank order;
    dimension 0 may differ between ranks, the others must agree. The input
    is not modified. Autograd-aware."""
    _dtype_code(tensor, "allgather")  # refuse early, before autograd
    return HoraAllgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None,
                            process_set=global_process_set):
    """Starts an allgather of every tensor of the list; synchronize()
    returns the list of results."""
    return _allgather_async(list(tensors), name, process_set, True, False)


class HoraGroupedAllgather(torch.autograd.Function):
    """grouped_allgather as an autograd function."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        outs, rows = synchronize(_allgather_async(list(tensors), name,
                                                  process_set, True, True))
        ctx.slices = [_offset(r, process_set) for r in rows]
        ctx.process_set = process_set
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grad_output):
        grads = grouped_allreduce(list(grad_output), op=Average,
                                  process_set=ctx.process_set)
        return (None, None) + tuple(g.narrow(0, off, n) for g, (off, n)
                                    in zip(grads, ctx.slices))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers every tensor of the list; returns the list of results.
    Autograd-aware."""
    tensors = list(tensors)
    for t in tensors:
        _dtype_code(t, "grouped_allgather")
    return list(HoraGroupedAllgather.apply(name, process_set, *tensors))


# ---- alltoall --------------------------------------------------------------


def _splits_list(splits):
    """The splits as a list, and the dtype and device of received_splits:
    those of a splits tensor (on the GPU when splits is), else int32 on the
    CPU."""
    if splits is None:
        return None, torch.int32, "cpu"
    if isinstance(splits, torch.Tensor):
        if splits.dtype not in (torch.int32, torch.int64):
            raise ValueError("Alltoall: splits must be a tensor of 32-bit "
                             "integers, not %s" % splits.dtype)
        return ([int(s) for s in splits.reshape(-1).tolist()], splits.dtype,
                splits.device)
    values = list(splits)
    if any(not isinstance(s, int) or isinstance(s, bool) for s in values):
        raise ValueError("Alltoall: splits must be integers: %r" % (splits,))
    return values, torch.int32, "cpu"


def alltoall_async(tensor, splits=None, name=None,
                   process_set=global_process_set):
    """Starts an alltoall of `tensor` along dimension 0 (splits[j] rows to
    member j; equal parts when None). synchronize() returns (tensor,
    received_splits); received_splits has the dtype and device of a splits
    tensor (int32 on the CPU otherwise)."""
    code = _dtype_code(tensor, "alltoall")
    values, sdtype, sdevice = _splits_list(splits)
    with torch.no_grad():
        t = _contig(tensor.detach())
    keep = []

    def alloc(i, shape):
        out = torch.empty(shape, dtype=t.dtype, device=t.device)
        keep.append(out)
        return out, out.data_ptr()

    def finish(out, recv):
        return out, torch.tensor(recv, dtype=sdtype, device=sdevice)

    return _core._start_alltoall(_buf(t, code), values, alloc, name,
                                 process_set, (tensor, t, keep), finish)


class HoraAlltoall(torch.autograd.Function):
    """alltoall as an autograd function: the gradient goes back through an
    alltoall with the received splits."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, recv = synchronize(alltoall_async(tensor, splits, name,
                                               process_set))
        ctx.process_set = process_set
        ctx.recvsplits = recv
        if splits is None:
            return out
        ctx.mark_non_differentiable(recv)
        return out, recv

    @staticmethod
    def backward(ctx, grad_output, *dead_gradients):
        grad, _ = alltoall(grad_output, splits=ctx.recvsplits,
                           process_set=ctx.process_set)
        return grad, None, None, None


HorovodAlltoall = HoraAlltoall


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[j] rows of `tensor` (dimension 0) to member j of the
    process set (equal parts when splits is None) and concatenates what
    every member sent this rank. Returns the tensor, and with splits given
    (tensor, received_splits), as Horovod does. Autograd-aware. ValueError
    for splits of the wrong length, negative, or not adding up to
    dimension 0, and for a dimension 0 that equal parts cannot split."""
    _dtype_code(tensor, "alltoall")  # refuse early, before autograd
    return HoraAlltoall.apply(tensor, splits, name, process_set)


# ---- reducescatter ---------------------------------------------------------


def _reducescatter_async(tensors, name, op, process_set, prescale_factor,
                         postscale_factor, grouped):
    bufs, works = [], []
    with torch.no_grad():
        for tensor in tensors:
            code = _dtype_code(tensor, "reducescatter")
            t = _contig(tensor.detach())
            works.append(t)
            bufs.append(_buf(t, code))

    def alloc(i, shape):
        out = torch.empty(shape, dtype=works[i].dtype,
                          device=works[i].device)
        return out, out.data_ptr()

    def finish(outs):
        return list(outs) if grouped else outs[0]

    return _core._start_reducescatter(bufs, alloc, op, prescale_factor,
                                      postscale_factor, name, process_set,
                                      works, finish, grouped)


def reducescatter_async(tensor, name=None, op=Average,
                        process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts a reducescatter; synchronize() returns this rank's block."""
    return _reducescatter_async([tensor], name, op, process_set,
                                prescale_factor, postscale_factor, False)


def _scale_grads(ctx, grads):
    f = 1.0
    if ctx.op == Sum:
        f *= ctx.process_set.size()
    f *= ctx.prescale_factor * ctx.postscale_factor
    return [g * f if f != 1.0 else g for g in grads]


class HoraReducescatter(torch.autograd.Function):
    """reducescatter as an autograd function (Horovod's gradient: the
    allgather of the incoming gradients, scaled by the set's size for Sum
    and by the factors)."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor,
                postscale_factor):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return synchronize(_reducescatter_async([tensor], name, op,
                                                process_set, prescale_factor,
                                                postscale_factor, False))

    @staticmethod
    def backward(ctx, grad_output):
        g = _scale_grads(ctx, [grad_output])[0]
        return (allgather(g, process_set=ctx.process_set), None, None, None,
                None, None)


HorovodReducescatter = HoraReducescatter


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces `tensor` over the process set (Average or Sum) and returns
    this rank's block of dimension 0: rows // size rows, one more for the
    first rows % size ranks. The input is not modified. Autograd-aware."""
    _dtype_code(tensor, "reducescatter")
    compressed, cctx = compression.compress(tensor)
    out = HoraReducescatter.apply(compressed, name, op, process_set,
                                  prescale_factor, postscale_factor)
    return compression.decompress(out, cctx)


def grouped_reducescatter_async(tensors, name=None, op=Average,
                                process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reducescatter of every tensor of the list."""
    return _reducescatter_async(list(tensors), name, op, process_set,
                                prescale_factor, postscale_factor, True)


class HoraGroupedReducescatter(torch.autograd.Function):
    """grouped_reducescatter as an autograd function."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor,
                *tensors):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return tuple(synchronize(_reducescatter_async(
            list(tensors), name, op, process_set, prescale_factor,
            postscale_factor, True)))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = _scale_grads(ctx, list(grad_output))
        return (None, None, None, None, None) + tuple(
            grouped_allgather(grads, process_set=ctx.process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none,
                          op=Average, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatters every tensor of the list; returns the list of this
    rank's blocks. Autograd-aware."""
    tensors = list(tensors)
    for t in tensors:
        _dtype_code(t, "grouped_reducescatter")
    pairs = [compression.compress(t) for t in tensors]
    outs = HoraGroupedReducescatter.apply(name, op, process_set,
                                          prescale_factor, postscale_factor,
                                          *[p[0] for p in pairs])
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]


priority = _core.priority
_core._add_priority(globals())

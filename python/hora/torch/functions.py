"""hora.torch.functions -- broadcasting model and optimizer state, and
Python objects, from one rank to the others (Horovod's helpers)."""

import ctypes
import pickle

import torch

import hora as _core
from hora.torch.mpi_ops import (rank, size, broadcast_, broadcast_async_,
                                synchronize, global_process_set,
                                _check_process_set, _allgather, _DTYPES)


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites every rank's parameters with root_rank's.

    params: a dict such as model.state_dict() (broadcast sorted by name,
    each under its name), or a list/iterable of parameters or of (name,
    parameter) tuples such as model.named_parameters()."""
    _check_process_set(process_set)
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, (list, tuple)) or hasattr(params, "__iter__"):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    handles = [broadcast_async_(p, root_rank, name)
               for name, p in items if p is not None]
    for h in handles:
        synchronize(h)


class _Slot:
    """Stands for a tensor of the state while its skeleton is pickled."""
    __slots__ = ("index", "shape", "dtype")

    def __init__(self, index, shape, dtype):
        self.index = index
        self.shape = shape
        self.dtype = dtype

    def __getstate__(self):
        return (self.index, self.shape, self.dtype)

    def __setstate__(self, state):
        self.index, self.shape, self.dtype = state


def _strip(x, tensors):
    """x with every CPU tensor hora can broadcast replaced by a _Slot
    (appended to tensors); other values stay and travel pickled."""
    if isinstance(x, torch.Tensor):
        if x.device.type == "cpu" and x.layout == torch.strided and \
                x.dtype in _DTYPES:
            tensors.append(x)
            return _Slot(len(tensors) - 1, tuple(x.shape), x.dtype)
        return x
    if isinstance(x, dict):
        return {k: _strip(v, tensors) for k, v in x.items()}
    if isinstance(x, list):
        return [_strip(v, tensors) for v in x]
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(_strip(v, tensors) for v in x)
    return x


def _slots(x, out):
    if isinstance(x, _Slot):
        out.append(x)
    elif isinstance(x, dict):
        for v in x.values():
            _slots(v, out)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _slots(v, out)
    return out


def _fill(x, tensors):
    if isinstance(x, _Slot):
        return tensors[x.index]
    if isinstance(x, dict):
        return {k: _fill(v, tensors) for k, v in x.items()}
    if isinstance(x, list):
        return [_fill(v, tensors) for v in x]
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(_fill(v, tensors) for v in x)
    return x


def broadcast_optimizer_state(optimizer, root_rank, model=None,
                              process_set=global_process_set):
    """Makes every rank's optimizer state (state tensors, step counts and
    the options of each parameter group, such as the learning rate) equal to
    root_rank's.

    The layout of root's state_dict travels pickled; its tensors are then
    broadcast as tensors, and the other ranks load the result with
    optimizer.load_state_dict(). Unlike Horovod, no dummy step is taken to
    create an empty state: when root's state is empty, every rank's state
    becomes empty, and parameters are never touched. `model` is accepted for
    compatibility and unused."""
    _check_process_set(process_set)
    root_rank = int(root_rank)
    prefix = "broadcast_optimizer_state.%d" % next(_core._object_seq)
    is_root = rank() == root_rank
    tensors = []
    skel = _strip(optimizer.state_dict(), tensors) if is_root else None
    skel = broadcast_object(skel, root_rank, name=prefix + ".layout")
    if not is_root:
        slots = _slots(skel, [])
        tensors = [None] * len(slots)
        for s in slots:
            tensors[s.index] = torch.empty(s.shape, dtype=s.dtype)
    handles = [broadcast_async_(t, root_rank, "%s.%d" % (prefix, i))
               for i, t in enumerate(tensors)]
    for h in handles:
        synchronize(h)
    if not is_root:
        optimizer.load_state_dict(_fill(skel, tensors))


def _dumps(obj):
    return _core._pickler.dumps(obj)


def _bytes_tensor(data):
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data \
        else torch.empty(0, dtype=torch.uint8)


def _tensor_bytes(t):
    t = t.contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel()) if t.numel() else b""


def broadcast_object(obj, root_rank=0, name=None,
                     process_set=global_process_set):
    """Pickles `obj` on root_rank and returns it, unpickled, on every rank;
    the other ranks' `obj` is ignored (it may be None). Without a name the
    operations are named by call order, never by the object, so
    broadcast_object(state if hvd.rank() == 0 else None) works."""
    _check_process_set(process_set)
    if name is None or name == "":
        name = "broadcast_object.%d" % next(_core._object_seq)
    root_rank = int(root_rank)
    if rank() == root_rank:
        t = _bytes_tensor(_dumps(obj))
        sz = torch.tensor([t.numel()], dtype=torch.int64)
        broadcast_(sz, root_rank, name + ".sz")
    else:
        sz = torch.zeros(1, dtype=torch.int64)
        broadcast_(sz, root_rank, name + ".sz")
        t = torch.empty(int(sz.item()), dtype=torch.uint8)
    broadcast_(t, root_rank, name + ".t")
    if rank() == root_rank:
        return obj
    return pickle.loads(_tensor_bytes(t))


def allgather_object(obj, name=None, process_set=global_process_set):
    """Pickles `obj` on every rank; returns the list of every rank's object,
    in rank order."""
    _check_process_set(process_set)
    if name is None or name == "":
        name = "allgather_object.%d" % next(_core._object_seq)
    gathered, counts = _allgather(_bytes_tensor(_dumps(obj)), name,
                                  process_set)
    out, off = [], 0
    for r in range(size()):
        out.append(pickle.loads(_tensor_bytes(gathered[off:off + counts[r]])))
        off += counts[r]
    return out

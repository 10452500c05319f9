"""hora.torch.functions -- broadcasting model and optimizer state, and
Python objects, from one rank to the others (Horovod's helpers)."""

import torch

import hora as _core
from hora.torch.mpi_ops import (rank, broadcast_async_, synchronize,
                                global_process_set, _DTYPES)


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites every rank's parameters with root_rank's.

    params: a dict such as model.state_dict() (broadcast sorted by name,
    each under its name), or a list/iterable of parameters or of (name,
    parameter) tuples such as model.named_parameters()."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, (list, tuple)) or hasattr(params, "__iter__"):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    handles = [broadcast_async_(p, root_rank, name, process_set=process_set)
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


def _init_empty_state(optimizer):
    """Horovod's initialization of a new optimizer's state: zero gradients
    for the parameters that require one, then one step of the wrapped
    optimizer (not DistributedOptimizer's, which would allreduce)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p.detach())
    from hora.torch.optimizer import _DistributedOptimizer
    if isinstance(optimizer, _DistributedOptimizer):
        super(_DistributedOptimizer, optimizer).step()
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank, model=None,
                              process_set=global_process_set):
    """Makes every rank's optimizer state (state tensors, step counts and
    the options of each parameter group, such as the learning rate) equal to
    root_rank's.

    As in Horovod, a rank whose optimizer has no state yet first creates it
    with zero gradients and one step of the wrapped optimizer. The layout of
    root's state_dict then travels pickled, its tensors are broadcast as
    tensors, and the other ranks load the result with
    optimizer.load_state_dict(). torch.optim.LBFGS is refused (ValueError),
    as in Horovod. `model` is accepted for compatibility."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    root_rank = int(root_rank)
    if not optimizer.state_dict()["state"]:
        _init_empty_state(optimizer)
    prefix = _core._object_name("broadcast_optimizer_state", None,
                                process_set)
    is_root = rank() == root_rank
    tensors = []
    skel = _strip(optimizer.state_dict(), tensors) if is_root else None
    skel = broadcast_object(skel, root_rank, name=prefix + ".layout",
                            process_set=process_set)
    if not is_root:
        slots = _slots(skel, [])
        tensors = [None] * len(slots)
        for s in slots:
            tensors[s.index] = torch.empty(s.shape, dtype=s.dtype)
    handles = [broadcast_async_(t, root_rank, "%s.%d" % (prefix, i),
                                process_set=process_set)
               for i, t in enumerate(tensors)]
    for h in handles:
        synchronize(h)
    if not is_root:
        optimizer.load_state_dict(_fill(skel, tensors))


def broadcast_object(obj, root_rank=0, name=None,
                     process_set=global_process_set):
    """Pickles `obj` on root_rank and returns it, unpickled, on every rank
    of the process set; the other ranks' `obj` is ignored (it may be None).
    Without a name the operations are named by call order, never by the
    object, so broadcast_object(state if hvd.rank() == 0 else None)
    works."""
    return _core.broadcast_object(obj, root_rank, name, process_set)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Pickles `obj` on every rank; returns the list of every member's
    object, in rank order."""
    return _core.allgather_object(obj, name, process_set)


_core._add_priority(globals())

"""hora.torch.arena -- torch tensors whose memory lies in libhora's shared
arena.

horad reads and writes a rank's arena directly, so a collective on an arena
tensor moves its data once, where it lies. An ordinary tensor of 64 KiB or
more is adopted by libhora at its second collective (its pages mapped into
the rank's shared segment, --adopt-size) and is then reduced where it lies
too; a smaller one, or one adoption cannot take, is copied into the arena
and its result copied back (or, when it does not fit, streamed through the
staging area in chunks), which takes five to six times as long at 16 and
64 MiB on two ranks of one host (benchmarks/torch_allreduce.sh).

    buf = hvd.arena_empty(4 << 20)        # 4M float32 in the arena
    buf.normal_()
    hvd.allreduce_(buf)                   # reduced in place, no copy
    hvd.in_arena(buf)                     # True

The arena is HORA_ARENA_SIZE (--arena-size, 128 MiB by default) per rank and
also holds the copies of ordinary tensors while their collectives run: a
tensor kept there for long takes that room from them. Its block goes back
to the arena when the last tensor sharing its memory is gone. Blocks still
in use at shutdown() stay valid until the process exits.
"""

import ctypes
import weakref

import torch

import hora as _core

__all__ = ["arena_empty", "arena_zeros", "in_arena", "arena_size"]


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    shape = tuple(int(s) for s in size)
    for s in shape:
        if s < 0:
            raise ValueError("hora.torch.arena_empty: negative dimension %d "
                             "in size %s" % (s, shape))
    return shape


def arena_empty(*size, dtype=None):
    """A new contiguous CPU tensor of the given size (ints, or one tuple,
    list or torch.Size) and dtype (torch's default dtype when None) whose
    memory is a block of this rank's shared arena, left uninitialized (in
    a job of one, which has no arena, ordinary memory). Before hora.init()
    raises ValueError, as every query does; RuntimeError, with libhora's
    reason, when the arena has no free block of that size."""
    lib = _core._require_init()
    shape = _shape(size)
    dtype = torch.get_default_dtype() if dtype is None else dtype
    es = torch.empty((), dtype=dtype).element_size()
    count = 1
    for s in shape:
        count *= s
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    addr = lib.hora_alloc(count * es)
    if not addr:
        raise RuntimeError("hora.torch.arena_empty(%s, dtype=%s): %s"
                           % (shape, dtype, _core._last_error(-1)))
    raw = (ctypes.c_char * (count * es)).from_address(addr)
    # torch.frombuffer holds `raw` until the storage goes; its finalizer
    # then gives the block back (libhora ignores a block of a session that
    # has ended)
    fin = weakref.finalize(raw, lib.hora_free, addr)
    fin.atexit = False
    return torch.frombuffer(raw, dtype=dtype).view(shape)


def arena_zeros(*size, dtype=None):
    """arena_empty(), filled with zeros."""
    return arena_empty(*size, dtype=dtype).zero_()


def arena_size():
    """Bytes of this rank's arena (--arena-size, HORA_ARENA_SIZE); 0 before
    hora.init() and in a job of one, which has none."""
    return int(_core._lib().hora_arena_size())


def in_arena(tensor):
    """True when the tensor is contiguous and its memory lies in this
    rank's arena of the current session (a collective on it then makes no
    copy)."""
    n = tensor.numel() * tensor.element_size()
    if n == 0 or tensor.device.type != "cpu" or not tensor.is_contiguous():
        return False
    lib = _core._lib()
    return bool(lib.hora_in_arena(tensor.data_ptr(), n))

"""hora -- Python binding of libhora, the collective library of hora jobs.

This module is plain ctypes over libhora.so: no extension module is compiled,
so one installed hora works with any Python 3 and, through hora.torch, with
any PyTorch version.  It offers the job layout queries, numpy collectives
(allreduce, broadcast, barrier, with async handles) and the machinery that
hora.torch builds on.

libhora.so is found, in this order: the path in HORA_LIBRARY; a libhora.so
shipped inside this package directory; the dynamic loader's search path
(ctypes.util.find_library, then "libhora.so.0" and "libhora.so"); the build
tree when the package is used from a source checkout
(<repo>/build/lib/libhora.so).

A program started by horarun is one rank of a job; started on its own it is
a job of one rank whose collectives are local copies.

    import numpy as np, hora
    hora.init()
    total = hora.allreduce(np.arange(4.0), op=hora.Sum)
"""

import atexit
import ctypes
import ctypes.util
import itertools
import os
import pickle
import sys
import threading
import warnings

__version__ = "0.1.0"

__all__ = [
    "HoraInternalError", "init", "shutdown", "is_initialized", "rank", "size",
    "local_rank", "local_size", "cross_rank", "cross_size", "is_homogeneous",
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "allgather", "broadcast_object", "allgather_object",
    "barrier", "poll", "synchronize", "library_path", "library_version",
]


class HoraInternalError(RuntimeError):
    """An operation failed in the runtime: ranks disagreed about it (mismatch),
    a rank or daemon of the job is gone, it stalled, or hora was shut down.
    The message is the runtime's, naming the ranks, host and tensor.
    `code` holds the negative HORA_E* value and `code_name` its name."""

    def __init__(self, message, code=None, code_name=None):
        super().__init__(message)
        self.code = code
        self.code_name = code_name


# Reduction ops: Horovod's values (common/message.h), so code that compares
# or stores them keeps working.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min",
             Max: "Max", Product: "Product"}
# Python op -> hora_op_t
_C_OP = {Average: 0, Sum: 1, Min: 2, Max: 3, Product: 4}

# hora_dtype_t values
(UINT8, INT8, INT16, INT32, INT64, FLOAT16, BFLOAT16, FLOAT32,
 FLOAT64) = range(9)
_INT_DTYPES = frozenset((UINT8, INT8, INT16, INT32, INT64))

# hora_errno_t values this module looks at
_EINVAL = -22
_ENOTINIT = -2001
_ESHUTDOWN = -2005

_NOT_INIT_MSG = "hora has not been initialized; use hvd.init()."

# ---------------------------------------------------------------------------
# Loading libhora


class _State:
    lib = None
    path = None
    homogeneous = None


_state = _State()
_load_lock = threading.Lock()
_init_lock = threading.RLock()


def _candidates():
    env = os.environ.get("HORA_LIBRARY")
    if env:
        return [env], True
    here = os.path.dirname(os.path.abspath(__file__))
    names = []
    for n in ("libhora.so", "libhora.so.0"):
        p = os.path.join(here, n)
        if os.path.exists(p):
            names.append(p)
    found = ctypes.util.find_library("hora")
    if found:
        names.append(found)
    names += ["libhora.so.0", "libhora.so"]
    repo = os.path.dirname(os.path.dirname(here))
    names.append(os.path.join(repo, "build", "lib", "libhora.so"))
    return names, False


def _declare(lib):
    c_int, c_char_p, c_void_p = ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p
    c_size_t, c_int64 = ctypes.c_size_t, ctypes.c_int64
    sigs = {
        "hora_init": ([], c_int), "hora_shutdown": ([], c_int),
        "hora_is_initialized": ([], c_int), "hora_rank": ([], c_int),
        "hora_size": ([], c_int), "hora_local_rank": ([], c_int),
        "hora_local_size": ([], c_int), "hora_cross_rank": ([], c_int),
        "hora_cross_size": ([], c_int),
        "hora_allreduce": ([c_char_p, c_void_p, c_void_p, c_size_t, c_int,
                            c_int], c_int),
        "hora_broadcast": ([c_char_p, c_void_p, c_size_t, c_int, c_int],
                           c_int),
        "hora_barrier": ([], c_int),
        "hora_allreduce_async": ([c_char_p, c_void_p, c_void_p, c_size_t,
                                  c_int, c_int, ctypes.POINTER(c_int64)],
                                 c_int),
        "hora_broadcast_async": ([c_char_p, c_void_p, c_size_t, c_int, c_int,
                                  ctypes.POINTER(c_int64)], c_int),
        "hora_wait": ([c_int64], c_int),
        "hora_test": ([c_int64, ctypes.POINTER(c_int)], c_int),
        "hora_strerror": ([c_int], c_char_p),
        "hora_err_name": ([c_int], c_char_p),
        "hora_last_error": ([], c_char_p),
        "hora_version": ([], c_char_p),
    }
    for fn, (args, res) in sigs.items():
        f = getattr(lib, fn)
        f.argtypes = args
        f.restype = res


def _lib():
    """Returns the loaded libhora (loading it on first use)."""
    lib = _state.lib
    if lib is not None:
        return lib
    with _load_lock:
        if _state.lib is not None:
            return _state.lib
        names, from_env = _candidates()
        errors = []
        for name in names:
            try:
                lib = ctypes.CDLL(name)
                _declare(lib)
            except (OSError, AttributeError) as e:
                errors.append("%s: %s" % (name, e))
                continue
            _state.path = name
            _state.lib = lib
            return lib
        where = ("HORA_LIBRARY=%s" % names[0]) if from_env else \
            ", ".join(names)
        raise OSError("hora: cannot load libhora.so (tried %s). Build it with "
                      "`make`, install it, or set HORA_LIBRARY to its path. "
                      "Errors: %s" % (where, "; ".join(errors)))


def library_path():
    """The path (or loader name) libhora was loaded from."""
    _lib()
    return _state.path


def library_version():
    """The version string of the loaded libhora."""
    return _lib().hora_version().decode()


def _last_error(rc):
    lib = _lib()
    msg = lib.hora_last_error()
    msg = msg.decode(errors="replace") if msg else ""
    if not msg:
        s = lib.hora_strerror(rc)
        msg = s.decode(errors="replace") if s else "error %d" % rc
    return msg


def _raise(rc, what=None):
    """Raises the exception for libhora's return code rc (< 0), with the
    runtime's message (read on this thread, right after the failing call)."""
    msg = _last_error(rc)
    name = _lib().hora_err_name(rc)
    name = name.decode() if name else str(rc)
    if what and what not in msg:
        msg = "%s: %s" % (what, msg)
    if rc == _EINVAL:
        raise ValueError(msg)
    if rc == _ENOTINIT:
        raise ValueError(_NOT_INIT_MSG)
    raise HoraInternalError(msg, rc, name)


# ---------------------------------------------------------------------------
# Start-up and layout


def init(comm=None, process_sets=None):
    """Starts hora: connects this process to its node's daemon (or makes it a
    job of one rank when it was not started by horarun). Calling it again is
    a no-op. Every rank of the job must call it."""
    if comm is not None:
        raise NotImplementedError("hora.init: MPI communicators are not "
                                  "supported; hora jobs are started by "
                                  "horarun")
    if process_sets is not None:
        raise NotImplementedError("hora.init: process sets are not supported "
                                  "yet; only the global process set exists")
    lib = _lib()
    with _init_lock:
        if lib.hora_is_initialized():
            return
        rc = lib.hora_init()
        if rc < 0:
            msg = _last_error(rc)
            raise HoraInternalError("hora initialization failed: %s" % msg, rc)
        _state.homogeneous = _compute_homogeneous(lib)


def _compute_homogeneous(lib):
    # Every node runs the same number of ranks iff the largest and smallest
    # local_size agree: one small allreduce (MAX of [ls, -ls]) at init.
    ls = lib.hora_local_size()
    buf = (ctypes.c_int32 * 2)(ls, -ls)
    rc = lib.hora_allreduce(b"hora.init.local_size", buf, buf, 2, INT32,
                            _C_OP[Max])
    if rc < 0:
        _raise(rc, "hora initialization failed")
    return buf[0] == -buf[1]


def shutdown():
    """Stops hora on this rank. Pending operations fail with
    HoraInternalError. A no-op when hora is not initialized; also run at
    exit."""
    lib = _state.lib
    if lib is None:
        return
    with _init_lock:
        if not lib.hora_is_initialized():
            return
        _collect_finished()
        lib.hora_shutdown()
        _fail_pending("hora was shut down on this rank while the operation "
                      "was pending")
        _state.homogeneous = None


def _shutdown_at_exit():
    # A process that dies of an uncaught exception does not say a clean
    # goodbye: it just exits, so the daemon reports it as the rank that
    # failed (with its exit status) instead of the other ranks first seeing
    # an orderly shutdown and failing on their own.
    if getattr(sys, "last_value", None) is not None:
        return
    shutdown()


atexit.register(_shutdown_at_exit)


def is_initialized():
    """True between init() and shutdown()."""
    lib = _state.lib
    return bool(lib is not None and lib.hora_is_initialized())


def _require_init():
    lib = _state.lib
    if lib is None or not lib.hora_is_initialized():
        raise ValueError(_NOT_INIT_MSG)
    return lib


def _query(fn):
    lib = _require_init()
    v = getattr(lib, fn)()
    if v < 0:
        _raise(v)
    return v


def rank():
    """This process's rank in the job, 0 .. size()-1."""
    return _query("hora_rank")


def size():
    """The number of ranks in the job."""
    return _query("hora_size")


def local_rank():
    """This process's rank among the ranks of its host."""
    return _query("hora_local_rank")


def local_size():
    """The number of ranks on this process's host."""
    return _query("hora_local_size")


def cross_rank():
    """The index of this host among the hosts that have a rank with this
    process's local_rank."""
    return _query("hora_cross_rank")


def cross_size():
    """The number of hosts that have a rank with this process's
    local_rank."""
    return _query("hora_cross_size")


def is_homogeneous():
    """True when every host of the job runs the same number of ranks."""
    _require_init()
    return bool(_state.homogeneous)


# ---------------------------------------------------------------------------
# Asynchronous operations: one table of handles, shared by the numpy API
# and hora.torch. An entry holds every buffer the C library may touch until
# the operation has completed and its result has been collected.


class _Op:
    __slots__ = ("c", "keep", "finish", "lock", "done", "rc", "msg",
                 "code_name")

    def __init__(self, c, keep, finish):
        self.c = c
        self.keep = keep
        self.finish = finish
        self.lock = threading.Lock()
        self.done = False
        self.rc = 0
        self.msg = None
        self.code_name = None

    def record(self, rc):
        # called on the thread that made the C call that returned rc
        self.done = True
        self.rc = rc
        if rc < 0:
            self.msg = _last_error(rc)
            n = _state.lib.hora_err_name(rc)
            self.code_name = n.decode() if n else str(rc)


_ops = {}
_ops_lock = threading.Lock()
_next_handle = itertools.count(1)


def _register(c_handle, keep, finish):
    op = _Op(c_handle, keep, finish)
    h = next(_next_handle)
    with _ops_lock:
        _ops[h] = op
    return h


def _collect_finished():
    # Before a shutdown: records what has already completed. An entry whose
    # lock is held is being waited for by another thread, which records it.
    with _ops_lock:
        pending = list(_ops.values())
    for op in pending:
        if op.lock.acquire(blocking=False):
            try:
                _test_locked(op)
            finally:
                op.lock.release()


def _fail_pending(msg):
    with _ops_lock:
        pending = list(_ops.values())
    for op in pending:
        if op.lock.acquire(blocking=False):
            if not op.done:
                op.done = True
                op.rc = _ESHUTDOWN
                op.msg = msg
                op.code_name = "HORA_ESHUTDOWN"
            op.lock.release()


def _test_locked(op):
    if op.done:
        return True
    lib = _state.lib
    if lib is None or not lib.hora_is_initialized():
        return False
    done = ctypes.c_int(0)
    rc = lib.hora_test(op.c, ctypes.byref(done))
    if rc < 0 or done.value:
        op.record(rc)
    return op.done


def _test(op):
    with op.lock:
        return _test_locked(op)


def _c_name(kind, name):
    """Horovod's naming: a user name N of an allreduce becomes
    "allreduce.N"; no name (None or "") lets libhora name the operation by
    call order ("allreduce.noname.<n>")."""
    if name is None or name == "":
        return None
    if isinstance(name, bytes):
        name = name.decode()
    return ("%s.%s" % (kind, name)).encode()


def _allreduce_raw(name, send_ptr, recv_ptr, count, dtype, c_op, keep, finish):
    """Starts an allreduce of count elements from send_ptr into recv_ptr
    (equal for in place). keep: objects that own the memory, held until the
    handle is synchronized; finish(): called then, returns the result."""
    lib = _require_init()
    h = ctypes.c_int64(0)
    rc = lib.hora_allreduce_async(_c_name("allreduce", name), send_ptr,
                                  recv_ptr, count, dtype, c_op,
                                  ctypes.byref(h))
    if rc < 0:
        _raise(rc)
    return _register(h.value, keep, finish)


def _broadcast_raw(name, ptr, count, dtype, root_rank, keep, finish):
    lib = _require_init()
    h = ctypes.c_int64(0)
    rc = lib.hora_broadcast_async(_c_name("broadcast", name), ptr, count,
                                  dtype, int(root_rank), ctypes.byref(h))
    if rc < 0:
        _raise(rc)
    return _register(h.value, keep, finish)


def _plan_allreduce(op, is_int, prescale_factor, postscale_factor):
    """Returns (hora_op_t, prescale, postscale) for a reduction.

    hora's integer Average is the exact sum divided by size, rounded toward
    zero. With a postscale factor an integer Average is done the way
    Horovod does it: Sum, then one scaling by postscale/size, truncated."""
    if op is None:
        op = Average
    if op == Adasum:
        raise NotImplementedError("hora does not implement the Adasum "
                                  "reduction; use Average or Sum")
    if op not in _C_OP:
        raise ValueError("unknown reduction op %r; use one of Average, Sum, "
                         "Min, Max, Product" % (op,))
    pre = float(prescale_factor)
    post = float(postscale_factor)
    if is_int and op == Average and post != 1.0:
        return _C_OP[Sum], pre, post / size()
    return _C_OP[op], pre, post


def _resolve_op(op, average):
    """Horovod's handling of the deprecated `average` argument."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please "
                         "provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and "
                      "will be removed", DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    return Average if op is None else op


def poll(handle):
    """True when the asynchronous operation of `handle` has completed
    (synchronize() then returns at once)."""
    with _ops_lock:
        op = _ops.get(handle)
    if op is None:
        raise ValueError("hora: handle %r was not created or has already "
                         "been synchronized" % (handle,))
    return _test(op)


def synchronize(handle):
    """Waits for the asynchronous operation of `handle` and returns its
    result (the output array or tensor); raises HoraInternalError when it
    failed. An unknown or already synchronized handle returns None, as in
    Horovod."""
    with _ops_lock:
        op = _ops.pop(handle, None)
    if op is None:
        return None
    with op.lock:
        if not op.done:
            lib = _state.lib
            if lib is None or not lib.hora_is_initialized():
                op.done, op.rc, op.code_name = True, _ENOTINIT, "HORA_ENOTINIT"
                op.msg = "hora is not initialized (it was shut down?)"
            else:
                op.record(lib.hora_wait(op.c))
    if op.rc < 0:
        op.keep = None
        raise HoraInternalError(op.msg, op.rc, op.code_name)
    result = op.finish() if op.finish is not None else None
    op.keep = None
    return result


def barrier():
    """Returns once every rank of the job has entered barrier()."""
    lib = _require_init()
    rc = lib.hora_barrier()
    if rc < 0:
        _raise(rc)


# ---------------------------------------------------------------------------
# numpy collectives

_np = None


def _numpy():
    global _np
    if _np is None:
        import numpy
        _np = numpy
    return _np


def _np_dtype_code(dt):
    np = _numpy()
    table = {np.dtype(np.uint8): UINT8, np.dtype(np.int8): INT8,
             np.dtype(np.int16): INT16, np.dtype(np.int32): INT32,
             np.dtype(np.int64): INT64, np.dtype(np.float16): FLOAT16,
             np.dtype(np.float32): FLOAT32, np.dtype(np.float64): FLOAT64}
    code = table.get(dt.newbyteorder("="))
    if code is None:
        raise TypeError("hora: numpy dtype %s is not supported; use uint8, "
                        "int8, int16, int32, int64, float16, float32 or "
                        "float64" % dt)
    return code


def _np_work(array, inplace):
    """Returns (array, buf): buf is a C-contiguous, native-endian array that
    the C library may use (array itself when it already is one)."""
    np = _numpy()
    if inplace:
        if not isinstance(array, np.ndarray):
            raise TypeError("hora: in-place operations need a numpy.ndarray, "
                            "got %s" % type(array).__name__)
        if not array.flags.writeable:
            raise ValueError("hora: the array is read-only")
    else:
        array = np.asarray(array)
    dt = array.dtype
    _np_dtype_code(dt)
    native = dt.isnative
    if array.flags.c_contiguous and native:
        return array, array
    buf = np.empty(array.shape, dtype=dt.newbyteorder("="))
    buf[...] = array
    return array, buf


def _np_scale(buf, factor, code):
    np = _numpy()
    if code in _INT_DTYPES:
        buf[...] = (buf.astype(np.float64) * factor).astype(buf.dtype)
    else:
        np.multiply(buf, factor, out=buf, casting="unsafe")


def _np_allreduce_async(array, op, name, prescale_factor, postscale_factor,
                        inplace):
    np = _numpy()
    array, buf = _np_work(array, inplace)
    code = _np_dtype_code(buf.dtype)
    c_op, pre, post = _plan_allreduce(op, code in _INT_DTYPES,
                                      prescale_factor, postscale_factor)
    if inplace:
        out = buf
        if pre != 1.0:
            _np_scale(out, pre, code)
        src = out
    elif pre != 1.0:
        out = np.array(buf, copy=True, order="C")
        _np_scale(out, pre, code)
        src = out
    else:
        out = np.empty_like(buf, order="C")
        src = buf

    def finish():
        if post != 1.0:
            _np_scale(out, post, code)
        if inplace:
            if out is not array:
                array[...] = out
            return array
        return out

    return _allreduce_raw(name, src.ctypes.data, out.ctypes.data, out.size,
                          code, c_op, (array, buf, src, out), finish)


def allreduce_async(array, op=Average, name=None, prescale_factor=1.0,
                    postscale_factor=1.0):
    """Starts an allreduce of a numpy array across every rank; the input is
    left untouched. Returns a handle for poll()/synchronize(), which returns
    the reduced array (a new array of the input's shape and dtype)."""
    return _np_allreduce_async(array, op, name, prescale_factor,
                               postscale_factor, False)


def allreduce_async_(array, op=Average, name=None, prescale_factor=1.0,
                     postscale_factor=1.0):
    """In-place allreduce_async: synchronize() returns `array`, reduced."""
    return _np_allreduce_async(array, op, name, prescale_factor,
                               postscale_factor, True)


def allreduce(array, op=Average, name=None, prescale_factor=1.0,
              postscale_factor=1.0):
    """Reduces a numpy array (or array-like) across every rank with op
    (Average, Sum, Min, Max, Product) and returns the result as a new array.
    prescale_factor multiplies every rank's input before the reduction and
    postscale_factor the result. Operations are matched across ranks by
    name, or by call order when no name is given."""
    return synchronize(allreduce_async(array, op, name, prescale_factor,
                                       postscale_factor))


def allreduce_(array, op=Average, name=None, prescale_factor=1.0,
               postscale_factor=1.0):
    """In-place allreduce of a numpy array; returns it."""
    return synchronize(allreduce_async_(array, op, name, prescale_factor,
                                        postscale_factor))


def _np_broadcast_async(array, root_rank, name, inplace):
    np = _numpy()
    array, buf = _np_work(array, inplace)
    code = _np_dtype_code(buf.dtype)
    root_rank = int(root_rank)
    if inplace:
        out = buf
    elif rank() == root_rank:
        out = np.array(buf, copy=True, order="C")
    else:
        out = np.empty_like(buf, order="C")

    def finish():
        if inplace:
            if out is not array:
                array[...] = out
            return array
        return out

    return _broadcast_raw(name, out.ctypes.data, out.size, code, root_rank,
                          (array, buf, out), finish)


def broadcast_async(array, root_rank, name=None):
    """Starts a broadcast of root_rank's array to every rank; the input is
    left untouched and synchronize() returns a new array."""
    return _np_broadcast_async(array, root_rank, name, False)


def broadcast_async_(array, root_rank, name=None):
    """In-place broadcast_async: `array` receives root_rank's values."""
    return _np_broadcast_async(array, root_rank, name, True)


def broadcast(array, root_rank, name=None):
    """Returns root_rank's array on every rank (as a new array)."""
    return synchronize(broadcast_async(array, root_rank, name))


def broadcast_(array, root_rank, name=None):
    """Overwrites `array` with root_rank's on every rank; returns it."""
    return synchronize(broadcast_async_(array, root_rank, name))


def _sub_name(name, suffix):
    return None if name is None or name == "" else "%s.%s" % (name, suffix)


def allgather(array, name=None):
    """Concatenates every rank's array along the first dimension, in rank
    order; the first dimension may differ between ranks, the others must
    agree. (Built from an allreduce of the sizes and one broadcast per rank
    until libhora has an allgather of its own.)"""
    return _allgather_counts(array, name)[0]


def _allgather_counts(array, name):
    np = _numpy()
    array = np.asarray(array)
    if array.ndim == 0:
        raise ValueError("hora.allgather: the array needs at least one "
                         "dimension")
    _np_dtype_code(array.dtype)
    n, me = size(), rank()
    counts = np.zeros(n, dtype=np.int64)
    counts[me] = array.shape[0]
    allreduce_(counts, op=Sum, name=_sub_name(name, "sizes"))
    out = np.empty((int(counts.sum()),) + array.shape[1:],
                   dtype=array.dtype.newbyteorder("="))
    handles, off = [], 0
    for r in range(n):
        part = out[off:off + int(counts[r])]
        if r == me:
            part[...] = array
        handles.append(broadcast_async_(part, r, _sub_name(name, r)))
        off += int(counts[r])
    for h in handles:
        synchronize(h)
    return out, counts


try:  # cloudpickle pickles what pickle cannot (lambdas, local classes)
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - depends on the environment
    _pickler = pickle

_object_seq = itertools.count()


def broadcast_object(obj, root_rank=0, name=None):
    """Pickles `obj` on root_rank and returns it, unpickled, on every rank.
    Other ranks' `obj` is ignored (it may be None). Without a name the
    operation is named by call order, never by the object, so
    broadcast_object(state if rank() == 0 else None) works."""
    np = _numpy()
    if name is None or name == "":
        name = "broadcast_object.%d" % next(_object_seq)
    root_rank = int(root_rank)
    if rank() == root_rank:
        data = np.frombuffer(_pickler.dumps(obj), dtype=np.uint8).copy()
        sz = np.array([data.size], dtype=np.int64)
        broadcast_(sz, root_rank, name + ".sz")
    else:
        sz = np.zeros(1, dtype=np.int64)
        broadcast_(sz, root_rank, name + ".sz")
        data = np.empty(int(sz[0]), dtype=np.uint8)
    broadcast_(data, root_rank, name + ".t")
    if rank() == root_rank:
        return obj
    return pickle.loads(data.tobytes())


def allgather_object(obj, name=None):
    """Pickles `obj` on every rank and returns the list of every rank's
    object, in rank order."""
    np = _numpy()
    if name is None or name == "":
        name = "allgather_object.%d" % next(_object_seq)
    data = np.frombuffer(_pickler.dumps(obj), dtype=np.uint8)
    gathered, sizes = _allgather_counts(data, name)
    out, off = [], 0
    for r in range(size()):
        out.append(pickle.loads(gathered[off:off + int(sizes[r])].tobytes()))
        off += int(sizes[r])
    return out

"""hora -- Python binding of libhora, the collective library of hora jobs.

This module is plain ctypes over libhora.so: no extension module is compiled,
so one installed hora works with any Python 3 and, through hora.torch, with
any PyTorch version. It offers the job layout queries, process sets, the
numpy collectives (allreduce, grouped_allreduce, broadcast, allgather,
grouped_allgather, alltoall, reducescatter, grouped_reducescatter, barrier,
join, with async handles; broadcast_object, allgather_object) and the
machinery that hora.torch builds on. Every constant (dtypes, reduction ops,
error codes, collectives) is read from the library (hora_describe()).

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
import faulthandler
import functools
import hashlib
import itertools
import os
import pickle
import signal
import sys
import threading
import time
import warnings

__version__ = "0.1.0"

__all__ = [
    "HoraInternalError", "HorovodInternalError", "init", "shutdown",
    "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous",
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "allgather", "allgather_async", "grouped_allgather",
    "grouped_allgather_async", "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter",
    "grouped_reducescatter_async",
    "broadcast_object", "allgather_object", "barrier", "join", "poll",
    "synchronize", "library_path", "library_version", "start_timeline",
    "stop_timeline", "priority",
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


HorovodInternalError = HoraInternalError

# Reduction ops: Horovod's values (common/message.h), so code that compares
# or stores them keeps working. They map onto libhora's ops by name.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min",
             Max: "Max", Product: "Product"}
_OP_C_NAMES = {Average: "average", Sum: "sum", Min: "min", Max: "max",
               Product: "product"}

_NOT_INIT_MSG = "hora has not been initialized; use hvd.init()."
_DUP_NAME_MSG = ("Requested to allreduce, allgather, or broadcast a tensor "
                 "with the same name as another tensor that is currently "
                 "being processed.  If you want to request another tensor, "
                 "use a different tensor name.")
_NOT_DYNAMIC_MSG = ("Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow %s process "
                    "sets after Horovod initialization.")

# ---------------------------------------------------------------------------
# Loading libhora


class _State:
    lib = None
    path = None
    consts = None


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


class _Request(ctypes.Structure):
    """hora_request_t of include/hora.h."""
    _fields_ = [
        ("coll", ctypes.c_int),
        ("name", ctypes.c_char_p),
        ("sendbuf", ctypes.c_void_p),
        ("recvbuf", ctypes.c_void_p),
        ("count", ctypes.c_size_t),
        ("recv_count", ctypes.c_size_t),
        ("dtype", ctypes.c_int),
        ("op", ctypes.c_int),
        ("root_rank", ctypes.c_int),
        ("process_set", ctypes.c_int),
        ("prescale", ctypes.c_double),
        ("postscale", ctypes.c_double),
        ("ndims", ctypes.c_int),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("recv_counts", ctypes.POINTER(ctypes.c_int64)),
        ("splits", ctypes.POINTER(ctypes.c_int64)),
        ("recv_splits", ctypes.POINTER(ctypes.c_int64)),
        ("priority", ctypes.c_int),
        ("flags", ctypes.c_int),
        ("stream", ctypes.c_void_p),
        ("reserved", ctypes.c_int * 4),
    ]


def _declare(lib):
    c_int, c_char_p, c_void_p = ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p
    c_size_t, c_int64 = ctypes.c_size_t, ctypes.c_int64
    p_int, p_int64 = ctypes.POINTER(c_int), ctypes.POINTER(c_int64)
    sigs = {
        "hora_init": ([], c_int), "hora_shutdown": ([], c_int),
        "hora_is_initialized": ([], c_int), "hora_rank": ([], c_int),
        "hora_size": ([], c_int), "hora_local_rank": ([], c_int),
        "hora_local_size": ([], c_int), "hora_cross_rank": ([], c_int),
        "hora_cross_size": ([], c_int), "hora_hosts_updated": ([], c_int64),
        "hora_submit": ([ctypes.POINTER(_Request), p_int64], c_int),
        "hora_submit_group": ([ctypes.POINTER(_Request), c_int, p_int64],
                              c_int),
        "hora_wait": ([c_int64], c_int),
        "hora_test": ([c_int64, p_int], c_int),
        "hora_join": ([], c_int),
        "hora_process_set_add": ([p_int, c_int], c_int),
        "hora_process_set_remove": ([c_int], c_int),
        "hora_process_set_size": ([c_int], c_int),
        "hora_process_set_rank": ([c_int], c_int),
        "hora_process_set_ranks": ([c_int, p_int, c_int], c_int),
        "hora_process_set_ids": ([p_int, c_int], c_int),
        "hora_reducescatter_rows": ([c_size_t, c_int, c_int], c_size_t),
        "hora_describe": ([], c_char_p),
        "hora_alloc": ([c_size_t], c_void_p),
        "hora_free": ([c_void_p], None),
        "hora_in_arena": ([c_void_p, c_size_t], c_int),
        "hora_arena_size": ([], c_size_t),
        "hora_strerror": ([c_int], c_char_p),
        "hora_err_name": ([c_int], c_char_p),
        "hora_last_error": ([], c_char_p),
        "hora_version": ([], c_char_p),
        "hora_set_stack_signal": ([c_int], c_int),
        "hora_thread_helper": ([], c_int),
        "hora_wait_ready": ([c_int64], c_int),
        "hora_start_timeline": ([c_char_p, c_int], c_int),
        "hora_stop_timeline": ([], c_int),
    }
    for fn, (args, res) in sigs.items():
        f = getattr(lib, fn)
        f.argtypes = args
        f.restype = res


class _Consts:
    """The constants of the loaded libhora, from hora_describe(): one
    "kind name value" line each (kind: dtype, op, err, coll, traits, cf,
    req, limit, layout)."""

    def __init__(self, text):
        self.by_kind = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3:
                self.by_kind.setdefault(parts[0], {})[parts[1]] = \
                    int(parts[2])

    def __call__(self, kind, name):
        try:
            return self.by_kind[kind][name]
        except KeyError:
            raise RuntimeError("hora: libhora (%s) does not describe %s %r; "
                               "the package and the library are from "
                               "different versions" % (_state.path, kind,
                                                       name)) from None

    def names(self, kind):
        """value -> name for one kind."""
        return {v: k for k, v in self.by_kind.get(kind, {}).items()}


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
            consts = _Consts(lib.hora_describe().decode())
            layout = consts.by_kind.get("layout", {})
            if layout.get("request_size") != ctypes.sizeof(_Request) or \
                    layout.get("request_stream") != _Request.stream.offset:
                errors.append("%s: its hora_request_t (%s) is not the one "
                              "this package declares (size %d, stream at "
                              "%d): the package and the library are from "
                              "different versions"
                              % (name, layout or "not described",
                                 ctypes.sizeof(_Request),
                                 _Request.stream.offset))
                continue
            _state.path = name
            _state.consts = consts
            _state.lib = lib
            return lib
        where = ("HORA_LIBRARY=%s" % names[0]) if from_env else \
            ", ".join(names)
        raise OSError("hora: cannot load libhora.so (tried %s). Build it with "
                      "`make`, install it, or set HORA_LIBRARY to its path. "
                      "Errors: %s" % (where, "; ".join(errors)))


def _k(kind, name):
    """A constant of libhora: _k("dtype", "float32"), _k("err", "EINVAL"),
    _k("coll", "allgather"), _k("op", "sum")."""
    _lib()
    return _state.consts(kind, name)


def dtype_code(name):
    """libhora's code of the dtype called `name` ("uint8", ..., "float64",
    "bfloat16")."""
    return _k("dtype", name)


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


def _err_name(rc):
    n = _lib().hora_err_name(rc)
    return n.decode() if n else str(rc)


# Codes that mean "the arguments of this call are wrong": raised as
# ValueError when a call is refused (Horovod's invalid-argument status).
_VALUE_ERRORS = ("EINVAL", "EDUPNAME", "ENOSET", "ENOTMEMBER")


def _raise(rc, what=None):
    """Raises the exception for libhora's return code rc (< 0) of a call
    that was refused, with the runtime's message (read on this thread,
    right after the failing call)."""
    msg = _last_error(rc)
    if what and what not in msg:
        msg = "%s: %s" % (what, msg)
    if rc == _k("err", "ENOTINIT"):
        raise ValueError(_NOT_INIT_MSG)
    if rc in [_k("err", n) for n in _VALUE_ERRORS]:
        raise ValueError(msg)
    raise HoraInternalError(msg, rc, _err_name(rc))


# ---------------------------------------------------------------------------
# Sessions: init() starts one, shutdown() ends it.
#
# shutdown() shuts libhora down and the next init() starts it again
# (collective, as in Horovod: it returns once every rank of the job is back).


class _Session:
    def __init__(self):
        self.active = False
        self.world = None       # job ranks of the session's ranks (comm=)
        self.base = 0           # libhora's id of the session's global set
        self.dynamic = False
        self.sets = {}          # process_set_id -> ProcessSet
        self.homogeneous = None
        self.rank = 0
        self.size = 1


_sess = _Session()


def _dynamic_from_env():
    for var in ("HOROVOD_DYNAMIC_PROCESS_SETS", "HORA_DYNAMIC_PROCESS_SETS"):
        v = os.environ.get(var, "")
        try:
            if v and int(v) > 0:
                return True
        except ValueError:
            if v.lower() in ("true", "yes", "on"):
                return True
    return False


def _mpi_comm_ranks(comm):
    """The job ranks of an mpi4py communicator (hora ranks are
    MPI_COMM_WORLD ranks), or None when comm is not one."""
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    if not isinstance(comm, MPI.Comm):
        return None
    lib = _lib()
    if lib.hora_is_initialized() and \
            MPI.COMM_WORLD.Get_size() != lib.hora_size():
        raise ValueError("hora: an mpi4py communicator names ranks of "
                         "MPI_COMM_WORLD, which has %d ranks here, but the "
                         "hora job has %d: use a list of ranks (comm=[...]) "
                         "unless the job's ranks are also MPI's"
                         % (MPI.COMM_WORLD.Get_size(), lib.hora_size()))
    group = comm.Get_group()
    world = MPI.COMM_WORLD.Get_group()
    return list(MPI.Group.Translate_ranks(group, list(range(comm.Get_size())),
                                          world))


def _is_ranks(x):
    if isinstance(x, (str, bytes)):
        return False
    try:
        iter(x)
    except TypeError:
        return False
    return True


def _job_ranks_of_comm(comm, job_size):
    if comm is None:
        return None
    if _is_ranks(comm):
        ranks = list(comm)
        if any(not isinstance(r, int) for r in ranks):
            raise ValueError("hora.init: comm must be a list of ranks (ints) "
                             "or an mpi4py communicator")
    else:
        ranks = _mpi_comm_ranks(comm)
        if ranks is None:
            raise ValueError("Invalid type of argument comm. Expected list "
                             "of rank integers or mpi4py.MPI.Comm object.")
    if not ranks:
        return None  # Horovod: an empty list means every rank
    ranks = sorted(ranks)
    if len(set(ranks)) != len(ranks) or ranks[0] < 0 or \
            ranks[-1] >= job_size:
        raise ValueError("hora.init: comm %s must name distinct ranks of the "
                         "job, 0 .. %d" % (ranks, job_size - 1))
    return ranks


def _hash63(obj):
    d = hashlib.blake2b(repr(obj).encode(), digest_size=8).digest()
    return int.from_bytes(d, "little") & ((1 << 62) - 1)


_stacks = {"on": False}


def _stack_dumps(lib):
    """On SIGUSR2 (unless the program handles it itself), every thread's
    Python stack goes to stderr: horad sends it to the ranks of a deadlock
    before their waits fail, so that each shows the line where it is
    stuck."""
    sig = getattr(signal, "SIGUSR2", None)
    if _stacks["on"] or sig is None:
        return
    try:
        if signal.getsignal(sig) not in (signal.SIG_DFL, None):
            return
        faulthandler.register(sig, file=sys.__stderr__ or 2,
                              all_threads=True, chain=False)
    except (ValueError, RuntimeError, OSError, AttributeError):
        return
    _stacks["on"] = True
    lib.hora_set_stack_signal(int(sig))


def _torchrun_join_hosts():
    """Ranks that torchrun started on several hosts: libhora's rank 0 starts
    the job's daemons on the ranks' hosts (horarun --join -H), which nothing
    in torchrun's variables names. Each node's first rank writes its host
    into torchrun's own store (MASTER_ADDR:MASTER_PORT, the agent's), every
    rank reads them all, and HORA_JOIN_HOSTS ("host:n,..." in node order)
    tells libhora. A host name that two nodes share is replaced by their
    addresses."""
    e = os.environ
    if (e.get("HORA_DAEMON_SOCKET") or e.get("HORA_JOIN_HOSTS") or
            e.get("HORA_STANDALONE") == "1" or "LOCAL_RANK" not in e or
            "MASTER_ADDR" not in e or "MASTER_PORT" not in e):
        return
    try:
        rank, size = int(e["RANK"]), int(e["WORLD_SIZE"])
        local, lsize = int(e["LOCAL_RANK"]), int(e["LOCAL_WORLD_SIZE"])
        port = int(e["MASTER_PORT"])
    except (KeyError, ValueError):
        return
    if lsize <= 0 or lsize >= size or size % lsize:
        return
    import datetime
    import socket
    from torch.distributed import TCPStore
    wait = int(e.get("HORA_START_TIMEOUT") or e.get("HOROVOD_START_TIMEOUT")
               or 30) + 5
    store = TCPStore(e["MASTER_ADDR"], port, None, False,
                     datetime.timedelta(seconds=wait))
    prefix = "hora/%s/%s/host/" % (e.get("TORCHELASTIC_RUN_ID", ""),
                                   e.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if local == 0:
        addr = ""
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                u.connect((e["MASTER_ADDR"], port))
                addr = u.getsockname()[0]
        except OSError:
            pass
        store.set(prefix + str(rank // lsize),
                  "%s %s" % (socket.gethostname(), addr))
    keys = [prefix + str(g) for g in range(size // lsize)]
    store.wait(keys)
    nodes = [store.get(k).decode().split(" ") for k in keys]
    names = [n[0] for n in nodes]
    hosts = [n[1] if names.count(n[0]) > 1 and n[1] else n[0] for n in nodes]
    e["HORA_JOIN_HOSTS"] = ",".join("%s:%d" % (h, lsize) for h in hosts)


def init(comm=None, process_sets=None):
    """Starts hora: connects this process to its node's daemon (or makes it a
    job of one rank when it was not started by horarun). Every rank of the
    job must call it. Calling it again while initialized is a no-op; after
    shutdown() it starts a new session.

    comm: None (every rank), a list of job ranks, or an mpi4py communicator
    (its MPI_COMM_WORLD ranks): the ranks that form this session's world
    (rank() and size() are relative to it; every rank of the job calls
    init() with the same comm, and a rank outside it gets ValueError).

    process_sets: None, a list of ProcessSet (registered now, in order; the
    list must be identical on every rank), or "dynamic" (allows
    add_process_set()/remove_process_set(), as HOROVOD_DYNAMIC_PROCESS_SETS=1
    or HORA_DYNAMIC_PROCESS_SETS=1 do)."""
    lib = _lib()
    with _init_lock:
        if _sess.active:
            return
        # a session numbers its unnamed operations from 0 on every rank,
        # one that horad started again (--restart-failed-ranks) too
        with _counter_lock:
            _name_counters.clear()
            _object_seq.clear()
        dynamic = _dynamic_from_env()
        if process_sets is None:
            sets = []
        elif isinstance(process_sets, str):
            if process_sets.lower() != "dynamic":
                raise ValueError("hora.init: process_sets must be a list of "
                                 "ProcessSet or \"dynamic\", not %r"
                                 % process_sets)
            sets, dynamic = [], True
            os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
        else:
            sets = list(process_sets)
            for ps in sets:
                if not isinstance(ps, ProcessSet):
                    raise ValueError("hora.init: process_sets entries must be "
                                     "ProcessSet objects, got %r" % (ps,))
        _reap_orphans()
        _stack_dumps(lib)
        if not lib.hora_is_initialized():
            _torchrun_join_hosts()
            rc = lib.hora_init()
            if rc < 0:
                raise HoraInternalError("hora initialization failed: %s"
                                        % _last_error(rc), rc, _err_name(rc))
        job_size, job_rank = lib.hora_size(), lib.hora_rank()
        world = _job_ranks_of_comm(comm, job_size)
        if world == list(range(job_size)):
            world = None
        base = 0
        if world is not None:
            # every rank of the job registers the world as a set
            base = _c_set_add(world)
        s = _Session()
        s.world, s.base, s.dynamic = world, base, dynamic
        if world is not None:
            if job_rank not in world:
                raise ValueError("hora.init: rank %d of the job is not in comm "
                                 "%s" % (job_rank, world))
            s.rank, s.size = world.index(job_rank), len(world)
        else:
            s.rank, s.size = job_rank, job_size
        for ps in sets:
            if ps.ranks is None and ps.mpi_comm is not None:
                ps.ranks = _comm_to_world_ranks(ps.mpi_comm, s)
        # One collective checks the layout (homogeneous) and that every rank
        # asked for the same process sets.
        wanted = [tuple(ps.ranks) for ps in sets]
        n, h = len(wanted), _hash63(wanted)
        ls = lib.hora_local_size()
        buf = (ctypes.c_int64 * 6)(ls, -ls, n, -n, h, -h)
        c = _submit("allreduce", "hora.init", base, buf, buf, 6,
                    dtype=_k("dtype", "int64"), op=_k("op", "max"))
        rc = lib.hora_wait(c)
        if rc < 0:
            raise HoraInternalError("hora initialization failed: %s"
                                    % _last_error(rc), rc, _err_name(rc))
        s.homogeneous = buf[0] == -buf[1]
        if buf[2] != -buf[3]:
            raise ValueError("Horovod initialization failed: Different ranks "
                             "tried to set up mismatching numbers of process "
                             "sets (%d on this rank, from %d to %d)"
                             % (n, -buf[3], buf[2]))
        if buf[4] != -buf[5]:
            raise ValueError("Horovod initialization failed: Attempted to "
                             "register process sets with mismatching values "
                             "on different ranks (this rank: %s)" % wanted)
        s.active = True
        _sess.__dict__.update(s.__dict__)
        global_process_set.ranks = list(range(s.size))
        global_process_set.process_set_id = 0
        seen = {tuple(range(s.size))}
        duplicate = None
        for i, ps in enumerate(sets):
            for r in ps.ranks:
                if not 0 <= r < s.size:
                    raise ValueError("hora.init: process_sets entry number %d "
                                     "(%s) names rank %d of a job of %d"
                                     % (i, ps, r, s.size))
            key = tuple(ps.ranks)
            if key in seen:
                ps.process_set_id = None
                duplicate = i if duplicate is None else duplicate
                continue
            seen.add(key)
            ps.process_set_id = _c_set_add(_to_job(ps.ranks))
            _sess.sets[ps.process_set_id] = ps
        if duplicate is not None:
            raise ValueError("Horovod could not be initialized because "
                             "process_sets entry number %d is a duplicate: %s"
                             % (duplicate, sets[duplicate]))


def shutdown(final=False):
    """Ends this rank's hora session: operations still pending fail with
    HoraInternalError, process sets are forgotten, libhora is shut down
    (the other ranks' operations that need this one then fail too), and
    is_initialized() becomes False; init() starts a new session (as in
    Horovod, every rank shuts down and initializes again; init() returns
    once all have). `final` is accepted for compatibility. A no-op when
    hora is not initialized."""
    lib = _state.lib
    if lib is None:
        return
    with _init_lock:
        real = lib.hora_is_initialized()
        if _sess.active:
            _collect_finished()
        if real:
            with _chainer.busy:
                # the helper thread is between its calls: libhora may go
                _fail_pending("hora was shut down on this rank while the "
                              "operation was pending", orphan=False)
                _chainer.forget()
                lib.hora_shutdown()
                _orphans.clear()
        elif _sess.active:
            _fail_pending("hora was shut down on this rank while the "
                          "operation was pending")
        for ps in list(_sess.sets.values()):
            ps._invalidate()
        _sess.sets.clear()
        _sess.active = False


def _shutdown_at_exit():
    # A process that dies of an uncaught exception does not say a clean
    # goodbye: it just exits, so the daemon reports it as the rank that
    # failed (with its exit status) instead of the other ranks first seeing
    # an orderly shutdown and failing on their own.
    if getattr(sys, "last_value", None) is not None:
        return
    shutdown(final=True)


atexit.register(_shutdown_at_exit)


def is_initialized():
    """True between init() and shutdown()."""
    return bool(_sess.active)


def _require_init():
    lib = _state.lib
    if lib is None or not _sess.active:
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
    _require_init()
    return _sess.rank


def size():
    """The number of ranks in the job."""
    _require_init()
    return _sess.size


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


def hosts_updated():
    """How many times horarun announced that the job's hosts changed (an
    elastic job's --host-discovery-script); it only grows.
    hora.elastic's commit() turns a change into HostsUpdatedInterrupt."""
    return _query("hora_hosts_updated")


def is_homogeneous():
    """True when every host of the job runs the same number of ranks."""
    _require_init()
    return bool(_sess.homogeneous)


# ---------------------------------------------------------------------------
# Process sets


class ProcessSet:
    """A set of ranks that run collectives together (Horovod's ProcessSet).

    ProcessSet(ranks) (sorted) or ProcessSet(mpi4py_comm); pass it to
    hvd.init(process_sets=[...]) or hvd.add_process_set(). Once registered,
    process_set_id is its id (the global set's is 0). Ranks are ranks of the
    session's world (hvd.rank()); so is every root_rank of a broadcast."""
    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        if _is_ranks(ranks_or_comm):
            ranks = sorted(ranks_or_comm)
            if any(not isinstance(r, int) or isinstance(r, bool)
                   for r in ranks):
                raise ValueError("ProcessSet should be initialized with a "
                                 "list of process ranks or an mpi4py Comm "
                                 "object")
            self.ranks = ranks
        else:
            if _mpi_comm_ranks(ranks_or_comm) is None:
                raise ValueError("ProcessSet should be initialized with a "
                                 "list of process ranks or an mpi4py Comm "
                                 "object")
            self.mpi_comm = ranks_or_comm

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set; None when not registered."""
        if self.process_set_id is None:
            return None
        return _set_size(_c_id(self))

    def rank(self):
        """This rank's rank within the set; None when not registered.
        Raises ValueError on a rank outside the set."""
        if self.process_set_id is None:
            return None
        lib = _require_init()
        v = lib.hora_process_set_rank(_c_id(self))
        if v == _k("err", "ENOTMEMBER"):
            raise ValueError("Process is not part of provided process set.")
        if v == _k("err", "ENOSET"):
            raise ValueError("Process set does not exist or has not been "
                             "registered.")
        if v < 0:
            _raise(v)
        return v

    def included(self):
        """Whether this rank belongs to the set; None when its ranks are not
        known yet."""
        if self.ranks is None:
            return None
        return rank() in self.ranks

    def __repr__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)" % (
            self.process_set_id, self.ranks, self.mpi_comm)

    __str__ = __repr__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def _comm_to_world_ranks(comm, sess):
    job = _mpi_comm_ranks(comm)
    if sess.world is None:
        return sorted(job)
    return sorted(sess.world.index(r) for r in job)


def _to_job(ranks):
    w = _sess.world
    return list(ranks) if w is None else [w[r] for r in ranks]


def _from_job(r):
    w = _sess.world
    return r if w is None else w.index(r)


def _c_id(ps):
    """libhora's id of a registered process set (or None: the global one)."""
    if ps is None or ps is global_process_set:
        return _sess.base
    pid = getattr(ps, "process_set_id", None)
    if pid is None:
        raise ValueError("Process set provided does not exist, or has not "
                         "been registered: %s" % (ps,))
    if pid == 0:
        return _sess.base
    if pid not in _sess.sets:
        raise ValueError("Process set provided does not exist, or has not "
                         "been registered: %s" % (ps,))
    return pid


def _set_size(cid):
    lib = _require_init()
    v = lib.hora_process_set_size(cid)
    if v < 0:
        if v == _k("err", "ENOSET"):
            raise ValueError("Process set does not exist or has not been "
                             "registered.")
        _raise(v)
    return v


def _set_layout(ps, what):
    """(libhora id, size, this rank's index) of the set of an operation;
    ValueError when this rank is not a member (Horovod's message)."""
    lib = _require_init()
    cid = _c_id(ps)
    n = lib.hora_process_set_size(cid)
    if n < 0:
        if n == _k("err", "ENOSET"):
            raise ValueError("%s: Process set provided does not exist, or has "
                             "not been registered." % what)
        _raise(n)
    r = lib.hora_process_set_rank(cid)
    if r < 0:
        if r == _k("err", "ENOTMEMBER"):
            raise ValueError("%s: Rank %d is not a member of the provided "
                             "process set." % (what, rank()))
        _raise(r)
    return cid, n, r


def _set_members(cid):
    lib = _require_init()
    n = lib.hora_process_set_size(cid)
    if n < 0:
        _raise(n)
    arr = (ctypes.c_int * max(n, 1))()
    m = lib.hora_process_set_ranks(cid, arr, n)
    if m < 0:
        _raise(m)
    return list(arr[:n])


def _c_set_add(job_ranks):
    """Registers a set of job ranks with libhora (collective over the job);
    returns its id. A set with these ranks left over from an earlier
    session is taken over."""
    lib = _lib()
    arr = (ctypes.c_int * len(job_ranks))(*job_ranks)
    v = lib.hora_process_set_add(arr, len(job_ranks))
    if v == _k("err", "EEXIST"):
        ids = (ctypes.c_int * 1024)()
        n = lib.hora_process_set_ids(ids, 1024)
        for i in ids[:max(n, 0)]:
            if i != 0 and _set_members(i) == sorted(job_ranks):
                return i
    if v < 0:
        _raise(v, "add_process_set")
    return v


def add_process_set(process_set):
    """Registers a process set after init (collective: every rank of the job
    calls it, with the same ranks, in the same order) and returns it.
    Requires init(process_sets="dynamic") or HOROVOD_DYNAMIC_PROCESS_SETS=1.
    ValueError for a set whose ranks are those of an existing set."""
    _require_init()
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.ranks is None and process_set.mpi_comm is not None:
        raise NotImplementedError("Dynamically adding process sets defined "
                                  "by an MPI communicator is not "
                                  "implemented. Please build the process set "
                                  "via a list of ranks.")
    if not _sess.dynamic:
        raise ValueError(_NOT_DYNAMIC_MSG % "adding")
    key = list(process_set.ranks)
    if not key or key[0] < 0 or key[-1] >= _sess.size or \
            len(set(key)) != len(key):
        raise ValueError("add_process_set: ranks %s must be distinct ranks "
                         "of the job, 0 .. %d" % (key, _sess.size - 1))
    existing = [list(range(_sess.size))] + [ps.ranks for ps in
                                           _sess.sets.values()]
    if key in existing or process_set.process_set_id is not None:
        raise ValueError("Attempted to add a duplicate process set: %s"
                         % process_set)
    with _init_lock:
        pid = _c_set_add(_to_job(key))
        process_set.process_set_id = pid
        _sess.sets[pid] = process_set
    return process_set


def remove_process_set(process_set):
    """Removes a process set registered by add_process_set() (collective over
    every rank of the job); returns whether it was removed. The global set
    is never removed (False)."""
    _require_init()
    pid = getattr(process_set, "process_set_id", None)
    if pid is None or pid == 0:
        return False
    if not _sess.dynamic:
        raise ValueError(_NOT_DYNAMIC_MSG % "removing")
    with _init_lock:
        if pid not in _sess.sets:
            return False
        process_set._invalidate()
        del _sess.sets[pid]
        v = _lib().hora_process_set_remove(pid)
        if v == _k("err", "ENOSET"):
            return False
        if v < 0:
            _raise(v, "remove_process_set")
    return True


# ---------------------------------------------------------------------------
# Asynchronous operations: one table of handles, shared by the numpy API
# and hora.torch. An entry holds every buffer the C library may touch until
# the operation has completed and its result has been collected.
#
# An operation is one or more libhora operations (grouped ops), possibly in
# two phases: allgather first learns every member's first dimension and
# alltoall every member's splits; the second phase is submitted by a helper
# thread as soon as the first completes, so that ranks may wait for their
# operations in any order.


class _Op:
    __slots__ = ("cs", "ready", "phase1", "advance", "drop", "keep", "finish",
                 "lock", "done", "rc", "msg", "code_name", "exc", "names")

    def __init__(self, cs, keep, finish, names):
        self.cs = list(cs)
        self.ready = None
        self.phase1 = None
        self.advance = None
        self.drop = None
        self.keep = keep
        self.finish = finish
        self.lock = threading.Lock()
        self.done = False
        self.rc = 0
        self.msg = None
        self.code_name = None
        self.exc = None
        self.names = names

    def fail(self, rc, msg, code_name=None, exc=None):
        """Records the first failure (C code rc, or exception exc)."""
        if self.rc == 0 and self.exc is None:
            self.rc = rc
            self.msg = msg
            self.code_name = code_name
            self.exc = exc

    def record(self, rc):
        # called on the thread that made the C call that returned rc
        if rc < 0:
            self.fail(rc, _last_error(rc), _err_name(rc))

    def finished(self):
        self.done = True
        _release_names(self.names)
        self.names = ()

    def error(self):
        if self.exc is not None:
            return self.exc
        if self.rc < 0:
            return HoraInternalError(self.msg, self.rc, self.code_name)
        return None


_ops = {}
_ops_lock = threading.Lock()
_next_handle = itertools.count(1)
_orphans = []           # (C handles, keep) of ops abandoned by shutdown()
_inflight = {}          # op name -> count, for Horovod's duplicate check
_names_lock = threading.Lock()


def _claim_names(names):
    with _names_lock:
        for n in names:
            if n in _inflight:
                raise ValueError(_DUP_NAME_MSG + " (name: %s)" % n)
        if len(set(names)) != len(names):
            raise ValueError(_DUP_NAME_MSG + " (names: %s)" % (names,))
        for n in names:
            _inflight[n] = 1


def _release_names(names):
    if not names:
        return
    with _names_lock:
        for n in names:
            _inflight.pop(n, None)


def _register_op(op):
    h = next(_next_handle)
    with _ops_lock:
        _ops[h] = op
    return h


def _register(cs, keep, finish, names=()):
    """A handle for libhora operations cs (already submitted)."""
    return _register_op(_Op(cs, keep, finish, tuple(names)))


def _register_chain(phase1, advance, keep, finish, names=(), drop=None):
    """A handle for a two-phase operation: when every libhora operation of
    phase1 has completed, advance() submits the second phase and returns its
    libhora operations; drop() is called instead when phase1 failed."""
    op = _Op((), keep, finish, tuple(names))
    op.ready = threading.Event()
    op.phase1 = list(phase1)
    op.advance = advance
    op.drop = drop
    h = _register_op(op)
    _chainer.add(op)
    return h


class _Chainer:
    """The helper thread that starts the second phase of operations."""

    def __init__(self):
        self.cv = threading.Condition()
        self.busy = threading.Lock()  # held while it calls libhora
        self.pending = []
        self.thread = None

    def forget(self):
        """Drops every operation (libhora was shut down: their handles are
        gone)."""
        with self.cv:
            for op in self.pending:
                op.advance = op.drop = None
                op.ready.set()
            self.pending = []

    def add(self, op):
        with self.cv:
            self.pending.append(op)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self.run, daemon=True,
                                               name="hora-chain")
                self.thread.start()
            self.cv.notify()

    def _step(self, op):
        """Tests op's first phase; True when it is over (op is ready)."""
        lib = _state.lib
        done = ctypes.c_int(0)
        left = []
        for c in op.phase1:
            rc = lib.hora_test(c, ctypes.byref(done))
            if rc < 0:
                op.record(rc)
            elif not done.value:
                left.append(c)
        op.phase1 = left
        if left:
            return False
        if op.done or op.error() is not None:
            # failed, or abandoned by shutdown(): no second phase
            if op.drop is not None:
                op.drop()
        else:
            try:
                cs, exc = op.advance()
                op.cs = list(cs)
                if exc is not None:
                    op.fail(getattr(exc, "code", None) or -1, str(exc),
                            exc=exc)
            except BaseException as e:  # noqa: BLE001 -- handed to the waiter
                op.fail(-1, str(e), exc=e)
        op.advance = op.drop = None
        op.ready.set()
        return True

    def run(self):
        # it submits for threads that wait elsewhere: not a thread that
        # could go on when they all wait (deadlock detection)
        if _state.lib is not None:
            _state.lib.hora_thread_helper()
        delay = 0.0
        while True:
            with self.cv:
                while not self.pending:
                    self.cv.wait()
                    delay = 0.0
                batch = list(self.pending)
            with self.busy:
                if _state.lib is None or \
                        not _state.lib.hora_is_initialized():
                    over = []
                else:
                    over = [op for op in batch if op in self.pending and
                            self._step(op)]
            if over:
                with self.cv:
                    self.pending = [op for op in self.pending
                                    if op not in over]
                delay = 0.0
            else:
                time.sleep(delay)
                delay = min(max(delay * 2, 20e-6), 1e-3)


_chainer = _Chainer()


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


def _fail_pending(msg, orphan=True):
    with _ops_lock:
        pending = list(_ops.values())
    for op in pending:
        if op.lock.acquire(blocking=False):
            if not op.done:
                op.fail(_k("err", "ESHUTDOWN"), msg, "HORA_ESHUTDOWN")
                # libhora still holds them: keep their buffers alive until
                # they complete
                if orphan and (op.cs or op.phase1):
                    _orphans.append((list(op.cs) + list(op.phase1 or ()),
                                     op.keep))
                op.cs = []
                if op.ready is not None and not op.ready.is_set():
                    pass  # the chainer drops it once its first phase is over
                op.finished()
            op.lock.release()


def _reap_orphans():
    lib = _state.lib
    if lib is None or not lib.hora_is_initialized():
        _orphans.clear()
        return
    keep = []
    done = ctypes.c_int(0)
    for cs, obj in _orphans:
        left = []
        for c in cs:
            rc = lib.hora_test(c, ctypes.byref(done))
            if rc >= 0 and not done.value:
                left.append(c)
        if left:
            keep.append((left, obj))
    _orphans[:] = keep


def _test_locked(op):
    if op.done:
        return True
    if op.ready is not None and not op.ready.is_set():
        return False
    lib = _state.lib
    if lib is None or not lib.hora_is_initialized():
        return False
    done = ctypes.c_int(0)
    left = []
    for c in op.cs:
        rc = lib.hora_test(c, ctypes.byref(done))
        if rc < 0:
            op.record(rc)
        elif not done.value:
            left.append(c)
    op.cs = left
    if not left:
        op.finished()
    return op.done


def _wait_locked(op):
    if op.done:
        return
    if op.ready is not None:
        lib = _state.lib
        while not op.ready.is_set():
            if not _sess.active and op.done:
                return
            # waits in hora for the first phase (the helper thread takes
            # its result and starts the second), so that horad sees what
            # this thread waits on
            first = list(op.phase1 or ())
            if first and lib is not None and lib.hora_is_initialized():
                for c in first:
                    lib.hora_wait_ready(c)
                op.ready.wait(0.002)
            else:
                op.ready.wait(0.5)
    lib = _state.lib
    for c in op.cs:
        op.record(lib.hora_wait(c))
    op.cs = []
    op.finished()


def poll(handle):
    """True when the asynchronous operation of `handle` has completed
    (synchronize() then returns at once)."""
    with _ops_lock:
        op = _ops.get(handle)
    if op is None:
        raise ValueError("hora: handle %r was not created or has already "
                         "been synchronized" % (handle,))
    with op.lock:
        return _test_locked(op)


def synchronize(handle):
    """Waits for the asynchronous operation of `handle` and returns its
    result (the output array or tensor, or a list of them for grouped
    operations); raises HoraInternalError when it failed. An unknown or
    already synchronized handle returns None, as in Horovod."""
    with _ops_lock:
        op = _ops.pop(handle, None)
    if op is None:
        return None
    with op.lock:
        if not op.done:
            if _state.lib is None or not _state.lib.hora_is_initialized():
                op.fail(_k("err", "ENOTINIT"), "hora is not initialized (it "
                        "was shut down?)", "HORA_ENOTINIT")
                op.finished()
            else:
                _wait_locked(op)
    err = op.error()
    if err is not None:
        op.keep = None
        raise err
    result = op.finish() if op.finish is not None else None
    op.keep = None
    return result


# ---------------------------------------------------------------------------
# Submitting


_name_counters = {}
_counter_lock = threading.Lock()


def _op_name(kind, name, cid):
    """Horovod's naming: a user name N of an allreduce becomes
    "allreduce.N"; without a name the n-th unnamed allreduce of every rank
    of a process set is "allreduce.noname.n" (".ps<id>" for sets other than
    the global one)."""
    if name is not None and name != "":
        if isinstance(name, bytes):
            name = name.decode()
        return "%s.%s" % (kind, name)
    with _counter_lock:
        n = _name_counters.get((kind, cid), 0)
        _name_counters[(kind, cid)] = n + 1
    if cid == 0:
        return "%s.noname.%d" % (kind, n)
    return "%s.ps%d.noname.%d" % (kind, cid, n)


def _i64(values):
    values = [int(v) for v in values]
    return (ctypes.c_int64 * max(len(values), 1))(*values)


def _c_shape(shape):
    """The shape as libhora takes it (at most HORA_MAX_DIMS dimensions: the
    last ones are folded together)."""
    shape = [int(d) for d in shape]
    m = _k("limit", "MAX_DIMS")
    if len(shape) > m:
        tail = 1
        for d in shape[m - 1:]:
            tail *= d
        shape = shape[:m - 1] + [tail]
    return shape


def _request(coll, cname, cid, send=None, recv=None, count=0, recv_count=0,
             dtype=0, op=0, root=0, pre=1.0, post=1.0, shape=None,
             recv_counts=None, splits=None, recv_splits=None, flags=0,
             stream=None):
    """One libhora request and what must live as long as it (its arrays).
    Pointers are ints or ctypes objects; shape and the count lists are
    sequences; flags: HORA_REQ_* bits (_k("req", ...)); stream: the CUDA
    stream (an int) ordering the work on device buffers."""
    lib = _state.lib
    if lib is None or not lib.hora_is_initialized():
        raise ValueError(_NOT_INIT_MSG)
    req = _Request()
    req.coll = _k("coll", coll)
    name_b = cname.encode() if isinstance(cname, str) else cname
    req.name = name_b

    def ptr(p):
        if p is None:
            return None
        if isinstance(p, int):
            return p
        return ctypes.addressof(p)

    req.sendbuf = ptr(send)
    req.recvbuf = ptr(recv)
    req.count = int(count)
    req.recv_count = int(recv_count)
    req.dtype = int(dtype)
    req.op = int(op)
    req.root_rank = int(root)
    req.process_set = int(cid)
    req.prescale = float(pre)
    req.postscale = float(post)
    req.flags = int(flags)
    req.stream = stream or None
    req.priority = getattr(_prio, "value", 0)
    keep = []
    if shape is not None:
        sh = _c_shape(shape)
        req.ndims = len(sh)
        if sh:
            a = _i64(sh)
            keep.append(a)
            req.shape = ctypes.cast(a, ctypes.POINTER(ctypes.c_int64))
    for field, v in (("recv_counts", recv_counts), ("splits", splits),
                     ("recv_splits", recv_splits)):
        if v is not None:
            a = _i64(v)
            keep.append(a)
            setattr(req, field, ctypes.cast(a, ctypes.POINTER(ctypes.c_int64)))
    return req, keep


def _submit_req(req):
    """Submits a request of _request(); returns its C handle. libhora has
    copied what it needs from its arrays when this returns."""
    h = ctypes.c_int64(0)
    rc = _state.lib.hora_submit(ctypes.byref(req), ctypes.byref(h))
    if rc < 0:
        _raise(rc)
    return h.value


def _submit(*args, **kw):
    """Submits one libhora operation (arguments of _request); returns its C
    handle."""
    return _submit_req(_request(*args, **kw)[0])


def _submit_all(reqs, grouped, keep):
    """Submits [(req, arrays)]: as one group (negotiated and run as one
    unit by horad) when grouped, else one by one. Returns the C handles; on
    an error none of a group stays submitted, while single submissions
    already made are left to finish, with keep (their buffers)."""
    if not grouped or len(reqs) < 2:
        hs = []
        try:
            for req, _ in reqs:
                hs.append(_submit_req(req))
        except BaseException:
            if hs:
                _orphans.append((hs, keep))
            raise
        return hs
    arr = (_Request * len(reqs))(*[r for r, _ in reqs])
    hs = (ctypes.c_int64 * len(reqs))()
    rc = _state.lib.hora_submit_group(arr, len(reqs), hs)
    if rc < 0:
        _raise(rc)
    return list(hs)


def _hierarchical():
    """Whether the job's allreduce is hierarchical (Adasum: the ranks of a
    host averaged, then the tree over the hosts; horad checks the hosts)."""
    for v in ("HORA_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE"):
        if v in os.environ:
            return os.environ[v].strip().lower() in ("1", "true", "yes", "on")
    return False


def _plan_allreduce(op, is_int, prescale_factor, postscale_factor, set_size):
    """Returns (libhora op, prescale, postscale) for a reduction.

    hora's integer Average is the exact sum divided by size, rounded toward
    zero. With a postscale factor an integer Average is done the way
    Horovod does it: Sum, then one scaling by postscale/size, truncated."""
    if op is None:
        op = Average
    if op == Adasum:
        if set_size & (set_size - 1) and not _hierarchical():
            raise NotImplementedError("Running Adasum with non-power of 2 "
                                      "ranks is not supported yet.")
        return _k("op", "adasum"), float(prescale_factor), \
            float(postscale_factor)
    if op not in _OP_C_NAMES:
        raise ValueError("unknown reduction op %r; use one of Average, Sum, "
                         "Min, Max, Product" % (op,))
    pre = float(prescale_factor)
    post = float(postscale_factor)
    if is_int and op == Average and post != 1.0:
        return _k("op", "sum"), pre, post / set_size
    return _k("op", _OP_C_NAMES[op]), pre, post


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


def _is_int_code(code):
    return code in [_k("dtype", n) for n in
                    ("uint8", "int8", "int16", "int32", "int64")]


def _sub_name(name, suffix):
    return None if name is None or name == "" else "%s.%s" % (name, suffix)


# The generic collectives, on buffers described by (address, shape, dtype
# code). Outputs whose size is known only after a first phase are made by
# alloc(i, shape) -> (object, address). finish(...) makes the result.


class _Buf:
    """A buffer libhora may read or write: address, shape, dtype code, and
    for device memory the CUDA stream (an int) that orders its work."""
    __slots__ = ("ptr", "shape", "code", "stream")

    def __init__(self, ptr, shape, code, stream=None):
        self.ptr = ptr
        self.shape = tuple(int(d) for d in shape)
        self.code = code
        self.stream = stream

    @property
    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def rows(self):
        return self.shape[0] if self.shape else 1

    @property
    def row(self):
        n = 1
        for d in self.shape[1:]:
            n *= d
        return n


def _start_allreduce(pairs, op, pre, post, name, ps, keep, finish,
                     grouped=False, wire16=False):
    """pairs: [(send _Buf, recv _Buf)], reduced elementwise. wire16:
    float16/bfloat16 values travel between hosts in 16 bits, rounded at
    each hop (the compressors' request; HORA_REQ_WIRE16)."""
    cid, n, _ = _set_layout(ps, "Allreduce")
    names = [_op_name("allreduce", _sub_name(name, i) if grouped and name
                      else name, cid) for i in range(len(pairs))]
    _claim_names(names)
    try:
        reqs = []
        for (s, r), cname in zip(pairs, names):
            c_op, p1, p2 = _plan_allreduce(op, _is_int_code(s.code), pre, post,
                                           n)
            reqs.append(_request("allreduce", cname, cid, s.ptr, r.ptr,
                                 s.numel, s.numel, s.code, c_op, 0, p1, p2,
                                 s.shape,
                                 flags=_k("req", "WIRE16") if wire16 else 0,
                                 stream=s.stream or r.stream))
        cs = _submit_all(reqs, grouped, keep)
    except BaseException:
        _release_names(names)
        raise
    return _register(cs, keep, finish, names)


def _start_broadcast(bufs, root_rank, name, ps, keep, finish,
                     grouped=False):
    cid, n, _ = _set_layout(ps, "Broadcast")
    root = int(root_rank)
    if not 0 <= root < _sess.size:
        raise ValueError("Broadcast: root rank %d is out of range for a job "
                         "of %d ranks" % (root, _sess.size))
    job_root = _to_job([root])[0]
    if cid != 0 and job_root not in _set_members(cid):
        raise ValueError("Broadcast: root rank %d is not a member of the "
                         "provided process set." % root)
    names = [_op_name("broadcast", _sub_name(name, i) if grouped and name
                      else name, cid) for i in range(len(bufs))]
    _claim_names(names)
    cs = []
    try:
        for b, cname in zip(bufs, names):
            cs.append(_submit("broadcast", cname, cid, b.ptr, b.ptr, b.numel,
                              b.numel, b.code, 0, job_root, shape=b.shape,
                              stream=b.stream))
    except BaseException:
        if cs:
            _orphans.append((cs, keep))
        _release_names(names)
        raise
    return _register(cs, keep, finish, names)


def _start_allgather(bufs, alloc, name, ps, keep, finish, grouped=False):
    """Allgathers every buffer of bufs (concatenated along dimension 0 in
    member order; dimension 0 may differ per member). First an allreduce
    (Sum) of a one-hot matrix of the first dimensions -- a joined rank adds
    zeros --, then one allgatherv per buffer into alloc(i, shape).
    finish(outputs, counts) makes the result; counts[i][m] is member m's
    first dimension of buffer i."""
    cid, n, me = _set_layout(ps, "Allgather")
    for b in bufs:
        if not b.shape:
            raise ValueError("Allgather: Process-set rank zero tried to "
                             "allgather a rank-zero tensor (a tensor needs "
                             "at least one dimension)")
    k = len(bufs)
    names = [_op_name("allgather", _sub_name(name, i) if grouped and name
                      else name, cid) for i in range(k)]
    _claim_names(names)
    counts = (ctypes.c_int64 * max(k * n, 1))()
    for i, b in enumerate(bufs):
        counts[i * n + me] = b.rows
    try:
        c1 = _submit("allreduce", names[0] + ".counts", cid, counts, counts,
                     k * n, k * n, _k("dtype", "int64"), _k("op", "sum"), 0,
                     shape=(k, n))
    except BaseException:
        _release_names(names)
        raise
    state = {}

    def advance():
        rows = [list(counts[i * n:(i + 1) * n]) for i in range(k)]
        outs, cs, reqs = [], [], []
        try:
            for i, b in enumerate(bufs):
                total = sum(rows[i])
                obj, ptr = alloc(i, (total,) + b.shape[1:])
                outs.append(obj)
                reqs.append(_request("allgather", names[i], cid, b.ptr, ptr,
                                     b.numel, total * b.row, b.code,
                                     shape=b.shape,
                                     recv_counts=[r * b.row for r in rows[i]],
                                     stream=b.stream))
            if grouped and len(reqs) > 1:  # as one unit
                cs = _submit_all(reqs, True, None)
            else:
                for req, _ in reqs:
                    cs.append(_submit_req(req))
        except BaseException as e:  # noqa: BLE001 -- handed to the waiter
            return cs, e
        finally:
            state["outs"], state["rows"] = outs, rows
        return cs, None

    return _register_chain([c1], advance, (keep, counts, state),
                           lambda: finish(state["outs"], state["rows"]),
                           names)


def _check_splits(splits, rows, n):
    if splits is None:
        if rows % n:
            raise ValueError("Alltoall: the first dimension of the tensor "
                             "(%d) is not a multiple of the number of "
                             "processes (%d); give splits" % (rows, n))
        return [rows // n] * n
    splits = [int(s) for s in splits]
    if len(splits) != n:
        raise ValueError("Alltoall: splits has %d entries, but the process "
                         "set has %d processes" % (len(splits), n))
    if any(s < 0 for s in splits):
        raise ValueError("Alltoall: splits must not be negative: %s"
                         % splits)
    if sum(splits) != rows:
        raise ValueError("Alltoall: the splits add up to %d, but the first "
                         "dimension of the tensor is %d" % (sum(splits), rows))
    return splits


class _ZeroedArena:
    """n int64 zeros in libhora's arena, where horad writes results in
    place: the part a joined rank sends nothing into stays zero."""

    def __init__(self, n):
        lib = _lib()
        self.n = n
        self.addr = lib.hora_alloc(8 * n) if n else None
        if self.addr:
            self.arr = (ctypes.c_int64 * n).from_address(self.addr)
        else:
            self.arr = (ctypes.c_int64 * max(n, 1))()
        for i in range(n):
            self.arr[i] = 0
        self.ptr = ctypes.addressof(self.arr)

    def values(self):
        return [int(v) for v in self.arr[:self.n]]

    def free(self):
        if self.addr:
            _lib().hora_free(self.addr)
            self.addr = None
            self.arr = (ctypes.c_int64 * max(self.n, 1))()


def _start_alltoall(buf, splits, alloc, name, ps, keep, finish):
    """Alltoall of buf along dimension 0: splits[j] rows to member j (equal
    parts when None). First the members exchange their splits (an alltoall
    of one int64 per member), then the data. finish(output, recv_splits)."""
    cid, n, _ = _set_layout(ps, "Alltoall")
    if not buf.shape:
        raise ValueError("Alltoall: the tensor needs at least one dimension")
    splits = _check_splits(splits, buf.rows, n)
    cname = _op_name("alltoall", name, cid)
    _claim_names([cname])
    sent = _i64(splits)
    got = _ZeroedArena(n)
    try:
        c1 = _submit("alltoall", cname + ".splits", cid, sent, got.ptr, n, n,
                     _k("dtype", "int64"), shape=(n,))
    except BaseException:
        got.free()
        _release_names([cname])
        raise
    state = {}

    def advance():
        rs = got.values()
        got.free()
        state["recv"] = rs
        total = sum(rs)
        obj, ptr = alloc(0, (total,) + buf.shape[1:])
        state["out"] = obj
        row = buf.row
        c = _submit("alltoall", cname, cid, buf.ptr, ptr, buf.numel,
                    total * row, buf.code, shape=buf.shape,
                    splits=[s * row for s in splits],
                    recv_splits=[r * row for r in rs], stream=buf.stream)
        return [c], None

    return _register_chain([c1], advance, (keep, sent, got, state),
                           lambda: finish(state["out"], state["recv"]),
                           [cname], drop=got.free)


def _start_reducescatter(bufs, outs_alloc, op, pre, post, name, ps, keep,
                         finish, grouped=False):
    """Reducescatter of each buffer along dimension 0: member i gets its
    block (rows // size, one more for the first rows % size members)."""
    cid, n, me = _set_layout(ps, "Reducescatter")
    if op == Adasum:
        raise NotImplementedError("Reducescatter does not support Adasum")
    for b in bufs:
        if not b.shape:
            raise ValueError("Reducescatter: the tensor needs at least one "
                             "dimension (a scalar cannot be scattered)")
    lib = _lib()
    names = [_op_name("reducescatter", _sub_name(name, i) if grouped and name
                      else name, cid) for i in range(len(bufs))]
    _claim_names(names)
    outs, reqs = [], []
    try:
        for i, (b, cname) in enumerate(zip(bufs, names)):
            mine = lib.hora_reducescatter_rows(b.rows, n, me)
            obj, ptr = outs_alloc(i, (mine,) + b.shape[1:])
            outs.append(obj)
            c_op, p1, p2 = _plan_allreduce(op, _is_int_code(b.code), pre, post,
                                           n)
            reqs.append(_request("reducescatter", cname, cid, b.ptr, ptr,
                                 b.numel, mine * b.row, b.code, c_op, 0, p1,
                                 p2, b.shape, stream=b.stream))
        cs = _submit_all(reqs, grouped, (keep, outs))
    except BaseException:
        _release_names(names)
        raise
    return _register(cs, (keep, outs), lambda: finish(outs), names)


def start_timeline(file_path, mark_cycles=False):
    """Horovod's timeline, from now on: host 0's horad writes a Chrome
    trace of every operation of every host into file_path (rank 0's
    path counts; a relative one is taken from rank 0's working
    directory), with CYCLE_START markers when mark_cycles. Starting it
    with another file ends the current one. Not collective."""
    lib = _require_init()
    if not file_path:
        raise ValueError("file_path must not be empty")
    path = os.fsencode(os.path.abspath(os.fspath(file_path)))
    rc = lib.hora_start_timeline(path, 1 if mark_cycles else 0)
    if rc < 0:
        _raise(rc, "start_timeline")


def stop_timeline():
    """Stops the timeline; on rank 0 it returns once the file is
    complete. Without one running it does nothing."""
    lib = _require_init()
    rc = lib.hora_stop_timeline()
    if rc < 0:
        _raise(rc, "stop_timeline")


def barrier(process_set=global_process_set):
    """Returns once every rank of the process set has entered barrier()."""
    cid, _, _ = _set_layout(process_set, "Barrier")
    lib = _lib()
    # one name: a barrier blocks, so one is in flight per set at a time,
    # and ranks that have joined (and skipped barriers) still match
    c = _submit("barrier", "barrier", cid)
    rc = lib.hora_wait(c)
    if rc < 0:
        raise HoraInternalError(_last_error(rc), rc, _err_name(rc))


def join(device=-1):
    """This rank has no more data: until every rank has joined, the others'
    collectives go on, this rank taking part with neutral values (zeros in a
    Sum or Average; Average still divides by the full size). Blocks until
    every rank has joined; returns the rank that joined last. `device` is
    accepted for Horovod compatibility."""
    lib = _require_init()
    if _sess.base != 0:
        raise ValueError("hora.join: join works on the global process set "
                         "only (hora was initialized with comm=)")
    v = lib.hora_join()
    if v < 0:
        raise HoraInternalError(_last_error(v), v, _err_name(v))
    return _from_job(v)


# ---------------------------------------------------------------------------
# numpy collectives

_np = None


def _numpy():
    global _np
    if _np is None:
        import numpy
        _np = numpy
    return _np


_NP_NAMES = ("uint8", "int8", "int16", "int32", "int64", "float16",
             "float32", "float64")


def _np_dtype_code(dt):
    np = _numpy()
    dt = np.dtype(dt).newbyteorder("=")
    if dt.name not in _NP_NAMES:
        raise TypeError("hora: numpy dtype %s is not supported; use uint8, "
                        "int8, int16, int32, int64, float16, float32 or "
                        "float64" % dt)
    return _k("dtype", dt.name)


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
    if array.flags.c_contiguous and dt.isnative:
        return array, array
    buf = np.empty(array.shape, dtype=dt.newbyteorder("="))
    buf[...] = array
    return array, buf


def _np_buf(a):
    return _Buf(a.ctypes.data, a.shape, _np_dtype_code(a.dtype))


def _np_alloc(dtype, holder):
    np = _numpy()

    def alloc(i, shape):
        out = np.empty(shape, dtype=dtype)
        holder.append(out)
        return out, out.ctypes.data
    return alloc


def _np_allreduce_group(arrays, op, name, pre, post, process_set, inplace,
                        grouped):
    pairs, works, outs = [], [], []
    for a in arrays:
        a, buf = _np_work(a, inplace)
        out = buf if inplace else _numpy().empty_like(buf, order="C")
        works.append((a, buf))
        outs.append(out)
        pairs.append((_np_buf(buf), _np_buf(out)))

    def finish():
        res = []
        for (a, buf), out in zip(works, outs):
            if inplace:
                if out is not a:
                    a[...] = out
                res.append(a)
            else:
                res.append(out)
        return res if grouped else res[0]

    return _start_allreduce(pairs, op, pre, post, name, process_set,
                            (works, outs), finish, grouped)


def allreduce_async(array, op=Average, name=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts an allreduce of a numpy array across the process set; the
    input is left untouched. Returns a handle for poll()/synchronize(),
    which returns the reduced array (a new array of the input's shape and
    dtype)."""
    return _np_allreduce_group([array], op, name, prescale_factor,
                               postscale_factor, process_set, False, False)


def allreduce_async_(array, op=Average, name=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce_async: synchronize() returns `array`, reduced."""
    return _np_allreduce_group([array], op, name, prescale_factor,
                               postscale_factor, process_set, True, False)


def allreduce(array, op=Average, name=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces a numpy array (or array-like) across the process set with op
    (Average, Sum, Adasum, Min, Max, Product) and returns the result as a
    new array.
    prescale_factor multiplies every rank's input before the reduction and
    postscale_factor the result (both applied by horad). Ranks must agree
    on dtype and shape. Operations are matched across ranks by name, or by
    call order when no name is given."""
    return synchronize(allreduce_async(array, op, name, prescale_factor,
                                       postscale_factor, process_set))


def allreduce_(array, op=Average, name=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce of a numpy array; returns it."""
    return synchronize(allreduce_async_(array, op, name, prescale_factor,
                                        postscale_factor, process_set))


def grouped_allreduce_async(arrays, op=Average, name=None,
                            prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Starts an allreduce of every array of the list; synchronize() returns
    the list of results."""
    return _np_allreduce_group(list(arrays), op, name, prescale_factor,
                               postscale_factor, process_set, False, True)


def grouped_allreduce_async_(arrays, op=Average, name=None,
                             prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    """In-place grouped_allreduce_async."""
    return _np_allreduce_group(list(arrays), op, name, prescale_factor,
                               postscale_factor, process_set, True, True)


def grouped_allreduce(arrays, op=Average, name=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    """Allreduces every array of the list; returns the list of results."""
    return synchronize(grouped_allreduce_async(arrays, op, name,
                                               prescale_factor,
                                               postscale_factor, process_set))


def grouped_allreduce_(arrays, op=Average, name=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """In-place grouped_allreduce; returns the list of arrays."""
    return synchronize(grouped_allreduce_async_(arrays, op, name,
                                                prescale_factor,
                                                postscale_factor,
                                                process_set))


def _np_broadcast_async(array, root_rank, name, process_set, inplace):
    np = _numpy()
    array, buf = _np_work(array, inplace)
    if inplace:
        out = buf
    elif rank() == int(root_rank):
        out = np.array(buf, copy=True, order="C")
    else:
        out = np.empty_like(buf, order="C")

    def finish():
        if inplace:
            if out is not array:
                array[...] = out
            return array
        return out

    return _start_broadcast([_np_buf(out)], root_rank, name, process_set,
                            (array, buf, out), finish)


def broadcast_async(array, root_rank, name=None,
                    process_set=global_process_set):
    """Starts a broadcast of root_rank's array to every rank of the process
    set; the input is left untouched and synchronize() returns a new
    array."""
    return _np_broadcast_async(array, root_rank, name, process_set, False)


def broadcast_async_(array, root_rank, name=None,
                     process_set=global_process_set):
    """In-place broadcast_async: `array` receives root_rank's values."""
    return _np_broadcast_async(array, root_rank, name, process_set, True)


def broadcast(array, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's array on every rank (as a new array)."""
    return synchronize(broadcast_async(array, root_rank, name, process_set))


def broadcast_(array, root_rank, name=None, process_set=global_process_set):
    """Overwrites `array` with root_rank's on every rank; returns it."""
    return synchronize(broadcast_async_(array, root_rank, name, process_set))


def _np_allgather_async(arrays, name, process_set, grouped):
    np = _numpy()
    works = [np.ascontiguousarray(np.asarray(a)) for a in arrays]
    works = [w if w.dtype.isnative else w.astype(w.dtype.newbyteorder("="))
             for w in works]
    bufs = [_np_buf(w) for w in works]
    holder = []

    def alloc(i, shape):
        out = np.empty(shape, dtype=works[i].dtype)
        holder.append(out)
        return out, out.ctypes.data

    def finish(outs, rows):
        return list(outs) if grouped else outs[0]

    return _start_allgather(bufs, alloc, name, process_set, (works, holder),
                            finish, grouped)


def allgather_async(array, name=None, process_set=global_process_set):
    """Starts an allgather; synchronize() returns the concatenation."""
    return _np_allgather_async([array], name, process_set, False)


def allgather(array, name=None, process_set=global_process_set):
    """Concatenates every rank's array along the first dimension, in rank
    order; the first dimension may differ between ranks, the others must
    agree."""
    return synchronize(allgather_async(array, name, process_set))


def grouped_allgather_async(arrays, name=None,
                            process_set=global_process_set):
    """Starts an allgather of every array of the list."""
    return _np_allgather_async(list(arrays), name, process_set, True)


def grouped_allgather(arrays, name=None, process_set=global_process_set):
    """Allgathers every array of the list; returns the list of results."""
    return synchronize(grouped_allgather_async(arrays, name, process_set))


def alltoall_async(array, splits=None, name=None,
                   process_set=global_process_set):
    """Starts an alltoall; synchronize() returns (array, received_splits)."""
    np = _numpy()
    w = np.ascontiguousarray(np.asarray(array))
    if not w.dtype.isnative:
        w = w.astype(w.dtype.newbyteorder("="))
    if splits is not None:
        splits = [int(s) for s in np.asarray(splits).reshape(-1)]
    holder = []

    def alloc(i, shape):
        out = np.empty(shape, dtype=w.dtype)
        holder.append(out)
        return out, out.ctypes.data

    def finish(out, recv):
        return out, np.array(recv, dtype=np.int32)

    return _start_alltoall(_np_buf(w), splits, alloc, name, process_set,
                           (w, holder), finish)


def alltoall(array, splits=None, name=None, process_set=global_process_set):
    """Scatters slices of the array's first dimension to every rank of the
    process set (splits[j] rows to rank j; equal parts when None) and
    gathers what they send. Returns (array, received_splits) when splits
    is given, the array alone when it is not (as Horovod)."""
    out, recv = synchronize(alltoall_async(array, splits, name, process_set))
    return out if splits is None else (out, recv)


def _np_reducescatter_async(arrays, op, name, pre, post, process_set,
                            grouped):
    np = _numpy()
    works = [np.ascontiguousarray(np.asarray(a)) for a in arrays]
    works = [w if w.dtype.isnative else w.astype(w.dtype.newbyteorder("="))
             for w in works]

    def alloc(i, shape):
        out = np.empty(shape, dtype=works[i].dtype)
        return out, out.ctypes.data

    def finish(outs):
        return list(outs) if grouped else outs[0]

    return _start_reducescatter([_np_buf(w) for w in works], alloc, op, pre,
                                post, name, process_set, works, finish,
                                grouped)


def reducescatter_async(array, op=Average, name=None, prescale_factor=1.0,
                        postscale_factor=1.0,
                        process_set=global_process_set):
    """Starts a reducescatter; synchronize() returns this rank's block."""
    return _np_reducescatter_async([array], op, name, prescale_factor,
                                   postscale_factor, process_set, False)


def reducescatter(array, op=Average, name=None, prescale_factor=1.0,
                  postscale_factor=1.0, process_set=global_process_set):
    """Reduces the array over the process set and returns this rank's block
    of the first dimension (rows // size rows, one more for the first
    rows % size ranks)."""
    return synchronize(reducescatter_async(array, op, name, prescale_factor,
                                           postscale_factor, process_set))


def grouped_reducescatter_async(arrays, op=Average, name=None,
                                prescale_factor=1.0, postscale_factor=1.0,
                                process_set=global_process_set):
    """Starts a reducescatter of every array of the list."""
    return _np_reducescatter_async(list(arrays), op, name, prescale_factor,
                                   postscale_factor, process_set, True)


def grouped_reducescatter(arrays, op=Average, name=None, prescale_factor=1.0,
                          postscale_factor=1.0,
                          process_set=global_process_set):
    """Reducescatters every array of the list; returns the list of blocks."""
    return synchronize(grouped_reducescatter_async(arrays, op, name,
                                                   prescale_factor,
                                                   postscale_factor,
                                                   process_set))


# ---------------------------------------------------------------------------
# Python objects


try:  # cloudpickle pickles what pickle cannot (lambdas, local classes)
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - depends on the environment
    _pickler = pickle

_object_seq = {}


def _object_name(kind, name, process_set):
    """Object operations are named by call order per process set, never by
    the object, so broadcast_object(state if rank() == 0 else None) works."""
    if name is not None and name != "":
        return name
    pid = getattr(process_set, "process_set_id", 0) or 0
    with _counter_lock:
        n = _object_seq.get((kind, pid), 0)
        _object_seq[(kind, pid)] = n + 1
    return "%s.%d" % (kind, n) if pid == 0 else "%s.ps%d.%d" % (kind, pid, n)


def _bytes_bcast(data, root_rank, name, process_set):
    """root_rank's bytes on every rank of the process set."""
    is_root = rank() == int(root_rank)
    code_i64, code_u8 = _k("dtype", "int64"), _k("dtype", "uint8")
    sz = (ctypes.c_int64 * 1)(len(data) if is_root else 0)
    synchronize(_start_broadcast([_Buf(ctypes.addressof(sz), (1,), code_i64)],
                                 root_rank, name + ".sz", process_set, sz,
                                 None))
    n = int(sz[0])
    buf = ctypes.create_string_buffer(data if is_root else b"", max(n, 1)) \
        if is_root else ctypes.create_string_buffer(max(n, 1))
    synchronize(_start_broadcast([_Buf(ctypes.addressof(buf), (n,), code_u8)],
                                 root_rank, name + ".t", process_set, buf,
                                 None))
    return buf.raw[:n]


def broadcast_object(obj, root_rank=0, name=None,
                     process_set=global_process_set):
    """Pickles `obj` on root_rank and returns it, unpickled, on every rank
    of the process set. Other ranks' `obj` is ignored (it may be None)."""
    name = _object_name("broadcast_object", name, process_set)
    if rank() == int(root_rank):
        _bytes_bcast(_pickler.dumps(obj), root_rank, name, process_set)
        return obj
    return pickle.loads(_bytes_bcast(b"", root_rank, name, process_set))


def _bytes_gather(data, name, process_set):
    """Every member's bytes, in member order."""
    code_u8 = _k("dtype", "uint8")
    src = ctypes.create_string_buffer(data, max(len(data), 1))
    holder = []

    def alloc(i, shape):
        b = ctypes.create_string_buffer(max(shape[0], 1))
        holder.append(b)
        return b, ctypes.addressof(b)

    def finish(outs, rows):
        raw, off, res = outs[0].raw, 0, []
        for r in rows[0]:
            res.append(raw[off:off + r])
            off += r
        return res

    return synchronize(_start_allgather(
        [_Buf(ctypes.addressof(src), (len(data),), code_u8)], alloc, name,
        process_set, (src, holder), finish))


def allgather_object(obj, name=None, process_set=global_process_set):
    """Pickles `obj` on every rank and returns the list of every member's
    object, in member order."""
    name = _object_name("allgather_object", name, process_set)
    return [pickle.loads(b) for b in
            _bytes_gather(_pickler.dumps(obj), name, process_set)]


# ---- priority ---------------------------------------------------------------

_prio = threading.local()  # .value: the priority of operations started now

_INT32 = (-2 ** 31, 2 ** 31 - 1)


class priority:
    """A block whose operations get this priority (hora_request_t.priority,
    hora(3); 0 outside any): among operations that wait together, higher
    first, so a late one overtakes queued ones of lower priority (never a
    barrier, join or process-set change; one that has started only between
    the chunks of a large allreduce or broadcast on one host, or, across
    hosts, by a small allreduce whose result comes with the decision, or
    by one of up to 8 MiB in the arena that runs round the ring beside
    it); the highest any rank gives counts. Per thread; blocks nest. Every
    collective also takes `priority=` (None: the block's)::

        with hora.priority(10):
            h = hora.allreduce_async(x, name="loss")
    """

    def __init__(self, value):
        if isinstance(value, bool) or not isinstance(value, int) or \
                not _INT32[0] <= value <= _INT32[1]:
            raise ValueError("priority must be an int from %d to %d, not %r"
                             % (_INT32[0], _INT32[1], value))
        self.value = value
        self._saved = []

    def __enter__(self):
        self._saved.append(getattr(_prio, "value", 0))
        _prio.value = self.value
        return self

    def __exit__(self, *exc):
        _prio.value = self._saved.pop()
        return False


def _with_priority(fn):
    """fn with a keyword `priority` (None: leave the current one)."""

    @functools.wraps(fn)
    def op(*args, priority=None, **kw):
        if priority is None:
            return fn(*args, **kw)
        with _priority_block(priority):
            return fn(*args, **kw)
    return op


_priority_block = priority  # op()'s keyword hides the class's name

# the collectives, in this module and in hora.torch (which calls this)
_PRIORITY_OPS = (
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "sparse_allreduce_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "allgather", "allgather_async", "grouped_allgather",
    "grouped_allgather_async", "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter",
    "grouped_reducescatter_async", "broadcast_object", "allgather_object")


def _add_priority(namespace):
    """Gives every collective of the module `namespace` (its globals()) the
    keyword `priority`."""
    for n in _PRIORITY_OPS:
        if n in namespace and not hasattr(namespace[n], "_hora_priority"):
            namespace[n] = _with_priority(namespace[n])
            namespace[n]._hora_priority = True


_add_priority(globals())

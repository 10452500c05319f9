"""errors.py -- runtime errors surface as hora.torch.HoraInternalError (a
RuntimeError) with the runtime's message naming the ranks and the tensor.
Run by test_torch_ops.py under horarun.

  errors.py mismatch   rank 1 disagrees with the others about a tensor's
                       size, dtype, reduction or broadcast root (sync and
                       async): every rank gets HoraInternalError naming the
                       tensor and rank 1; the job goes on.
  errors.py dead       rank 1 exits (status 3) while the others wait in an
                       allreduce: they get HoraInternalError naming rank 1,
                       and so does a later allreduce; they print
                       "rank R: dead: <message>" and exit 4.
  errors.py raise      the same, but rank 1 dies of an uncaught exception
                       (exit status 1): at exit hora does not shut down
                       cleanly, so the job is reported as rank 1's failure.
  errors.py reinit     shutdown() and init() again, many times, with
                       collectives between; init() twice; an operation
                       pending at shutdown() fails; duplicate names of
                       operations in flight raise ValueError.
"""
import os
import sys

import torch

import hora
import hora.torch as hvd
from _check import Checker


def check_mismatch(c, r, n):
    odd = r == 1

    def expect(what, fn, name):
        e = c.raises(hvd.HoraInternalError, fn, what,
                     contains=(name, "rank 1"))
        if e is not None:
            c.ok(isinstance(e, RuntimeError), what + ": a RuntimeError")
            c.ok(e.code_name == "HORA_EMISMATCH", what + ": code %s"
                 % e.code_name)
        # the job goes on
        got = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after." + name)
        c.ok(torch.equal(got, torch.full((3,), float(n))),
             what + ": the next allreduce works")

    expect("count mismatch", lambda: hvd.allreduce(
        torch.ones(4 if odd else 3), name="m.count"), "m.count")
    expect("dtype mismatch", lambda: hvd.allreduce(
        torch.ones(3, dtype=torch.int32 if odd else torch.float32),
        name="m.dtype"), "m.dtype")
    expect("op mismatch", lambda: hvd.allreduce(
        torch.ones(3), op=hvd.Sum if odd else hvd.Max, name="m.op"), "m.op")
    expect("root mismatch", lambda: hvd.broadcast(
        torch.ones(3), 1 if odd else 0, name="m.root"), "m.root")
    expect("async mismatch", lambda: hvd.synchronize(hvd.allreduce_async_(
        torch.ones(5 if odd else 6), name="m.async")), "m.async")
    # unnamed operations are named by call order; the message names that
    c.raises(hvd.HoraInternalError, lambda: hvd.allreduce(
             torch.ones(2 if odd else 1)), "unnamed mismatch",
             contains=("allreduce.noname.", "rank 1"))
    expect("shape mismatch, same count", lambda: hvd.allreduce(
        torch.ones((17, 23, 57) if odd else (17, 23 * 57)), name="m.shape"),
        "m.shape")
    expect("scale factor mismatch", lambda: hvd.allreduce(
        torch.ones(3), op=hvd.Sum, prescale_factor=2.0 if odd else 1.0,
        name="m.scale"), "m.scale")
    expect("allgather dtype mismatch", lambda: hvd.allgather(
        torch.ones(2, dtype=torch.int32 if odd else torch.float32),
        name="m.ag"), "m.ag")
    expect("allgather trailing dimensions", lambda: hvd.allgather(
        torch.ones((2, 3 if odd else 4)), name="m.agdim"), "m.agdim")
    expect("alltoall dtype mismatch", lambda: hvd.alltoall(
        torch.ones(n, dtype=torch.int64 if odd else torch.float64),
        name="m.a2a"), "m.a2a")
    expect("reducescatter op mismatch", lambda: hvd.reducescatter(
        torch.ones(n), op=hvd.Sum if odd else hvd.Average, name="m.rs"),
        "m.rs")
    c.ok(hvd.HorovodInternalError is hvd.HoraInternalError and
         issubclass(hvd.HoraInternalError, RuntimeError),
         "HorovodInternalError is HoraInternalError, a RuntimeError")
    # the numpy API raises the same exception
    import numpy as np
    c.raises(hora.HoraInternalError, lambda: hora.allreduce(
        np.ones(2 if odd else 3), name="m.np"), "numpy mismatch",
        contains=("m.np", "rank 1"))
    hvd.barrier()


def check_reinit(c, r, n):
    hvd.init()  # again: a no-op
    for k in range(5):
        got = hvd.allreduce(torch.full((2,), float(r)), op=hvd.Sum,
                            name="reinit")
        c.ok(torch.equal(got, torch.full((2,), float(sum(range(n))))),
             "allreduce in session %d" % k)
        got = hvd.allgather(torch.full((1,), r))
        c.ok(torch.equal(got, torch.arange(n)), "allgather in session %d" % k)
        c.ok(hvd.broadcast_object(k if r == 0 else None) == k,
             "broadcast_object in session %d" % k)
        hvd.shutdown()
        c.ok(not hvd.is_initialized(), "shut down %d" % k)
        c.raises(ValueError, hvd.rank, "rank() after shutdown",
                 contains=("not been initialized",))
        hvd.shutdown()  # again: a no-op
        hvd.init()
        c.ok(hvd.is_initialized() and (hvd.rank(), hvd.size()) == (r, n),
             "init again %d" % k)
    # an operation pending at shutdown() fails; its name is free afterwards
    if n > 1:
        h = hvd.allreduce_async(torch.ones(2), name="pending.%d" % r)
        hvd.shutdown()
        c.raises(hvd.HoraInternalError, lambda: hvd.synchronize(h),
                 "a pending operation at shutdown", contains=("shut down",))
        hvd.init()
    hvd.barrier()


def check_duplicates(c, r, n):
    t = torch.ones(3)
    for what, start in (
            ("allreduce", lambda: hvd.allreduce_async(t, name="dup")),
            ("allreduce_", lambda: hvd.allreduce_async_(t.clone(),
                                                        name="dup")),
            ("broadcast", lambda: hvd.broadcast_async(t, 0, name="dup")),
            ("allgather", lambda: hvd.allgather_async(t, name="dup")),
            ("alltoall", lambda: hvd.alltoall_async(torch.ones(n),
                                                    name="dup")),
            ("reducescatter", lambda: hvd.reducescatter_async(
                torch.ones(n), name="dup"))):
        h = start()
        e = c.raises(ValueError, start, "a second %s named dup in flight"
                     % what, contains=("same name",))
        hvd.synchronize(h)
        if e is not None:
            # free again once the first has completed
            hvd.synchronize(start())
    hvd.barrier()


def dead(r, n, how):
    hvd.barrier()
    if r == 1:
        sys.stdout.flush()
        if how == "raise":
            raise RuntimeError("injected failure on rank 1")
        os._exit(3)
    try:
        hvd.allreduce(torch.ones(1000), name="wait.for.rank1")
        print("FAIL: rank %d: the allreduce succeeded" % r, flush=True)
        sys.exit(5)
    except hvd.HoraInternalError as e:
        print("rank %d: dead: %s" % (r, e), flush=True)
    try:
        hvd.allreduce(torch.ones(2), name="later")
        print("FAIL: rank %d: a later allreduce succeeded" % r, flush=True)
        sys.exit(5)
    except hvd.HoraInternalError as e:
        print("rank %d: later: %s" % (r, e), flush=True)
    sys.exit(4)


def main():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    mode = sys.argv[1]
    if mode in ("dead", "raise"):
        dead(r, n, mode)
    c = Checker("errors " + mode, r, n)
    if mode == "mismatch":
        check_mismatch(c, r, n)
        check_duplicates(c, r, n)
    else:
        check_reinit(c, r, n)
    c.done()


if __name__ == "__main__":
    main()

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
    # the numpy API raises the same exception
    import numpy as np
    c.raises(hora.HoraInternalError, lambda: hora.allreduce(
        np.ones(2 if odd else 3), name="m.np"), "numpy mismatch",
        contains=("m.np", "rank 1"))
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
    check_mismatch(c, r, n)
    c.done()


if __name__ == "__main__":
    main()

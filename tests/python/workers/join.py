"""join.py -- hvd.join() with every collective: each rank in turn joins
first while the others run allreduce (every op: a joined rank adds the
neutral element; Average still divides by the full size), grouped
allreduce, allgather and alltoall (a joined rank sends nothing),
reducescatter, broadcast from a rank that has not joined (and from one
that has: an error), barrier, in hora.torch and the numpy API. join()
returns the last rank to join, the same on every rank. Run by
test_collectives.py under horarun -np 2 and 3.
"""
import numpy as np
import torch

import hora
import hora.torch as hvd
from _check import Checker


def same(a, b):
    return isinstance(a, torch.Tensor) and a.dtype == b.dtype and \
        a.shape == b.shape and torch.equal(a, b)


def busy(c, r, n, first, tag):
    """What the ranks that have not joined do while `first` has."""
    live = [k for k in range(n) if k != first]
    m = len(live)
    x = torch.full((3,), float(r + 1))
    s = float(sum(k + 1 for k in live))
    c.ok(same(hvd.allreduce(x, op=hvd.Sum, name=tag + ".sum"),
              torch.full((3,), s)), tag + ": Sum")
    c.ok(same(hvd.allreduce(x, name=tag + ".avg"), torch.full((3,), s / n)),
         tag + ": Average divides by the full size")
    xi = torch.full((2,), r + 1, dtype=torch.int32)
    c.ok(same(hvd.allreduce(xi, op=hvd.Min, name=tag + ".min"),
              torch.full((2,), min(k + 1 for k in live), dtype=torch.int32)),
         tag + ": Min ignores the joined rank")
    c.ok(same(hvd.allreduce(xi, op=hvd.Max, name=tag + ".max"),
              torch.full((2,), max(k + 1 for k in live), dtype=torch.int32)),
         tag + ": Max")
    p = 1
    for k in live:
        p *= k + 1
    c.ok(same(hvd.allreduce(xi.long(), op=hvd.Product, name=tag + ".prod"),
              torch.full((2,), p, dtype=torch.int64)), tag + ": Product")
    got = hvd.grouped_allreduce([x, xi], op=hvd.Sum, name=tag + ".grp")
    c.ok(same(got[0], torch.full((3,), s)) and
         same(got[1], torch.full((2,), int(s), dtype=torch.int32)),
         tag + ": grouped_allreduce")
    got = hvd.allgather(torch.full((r + 1, 2), float(r)), name=tag + ".ag")
    want = torch.cat([torch.full((k + 1, 2), float(k)) for k in live])
    c.ok(same(got, want), tag + ": allgather without the joined rank")
    got, rs = hvd.alltoall(torch.full((n,), float(r)), splits=[1] * n,
                           name=tag + ".a2a")
    c.ok(same(got, torch.tensor([float(k) for k in live])) and
         rs.tolist() == [0 if k == first else 1 for k in range(n)],
         tag + ": alltoall receives nothing from the joined rank: %s %s"
         % (got, rs))
    got = hvd.reducescatter(torch.full((n, 2), float(r + 1)), op=hvd.Sum,
                            name=tag + ".rs")
    c.ok(same(got, torch.full((1, 2), s)), tag + ": reducescatter")
    root = live[-1]
    got = hvd.broadcast(torch.full((2,), float(r)), root, name=tag + ".bc")
    c.ok(same(got, torch.full((2,), float(root))),
         tag + ": broadcast from a rank that has not joined")
    c.raises(hvd.HoraInternalError,
             lambda: hvd.broadcast(torch.ones(1), first, name=tag + ".bcj"),
             tag + ": broadcast from the joined rank", contains=("joined",))
    g = hora.allreduce(np.full(2, r + 1, dtype=np.int64), op=hora.Sum,
                       name=tag + ".np")
    c.ok(np.array_equal(g, np.full(2, int(s))), tag + ": numpy allreduce")
    hvd.barrier()


def main():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    c = Checker("join", r, n)
    for first in range(n):
        tag = "first %d" % first
        if r == first:
            last = hvd.join()
        else:
            busy(c, r, n, first, tag)
            last = hvd.join()
        c.ok(last != first if n > 1 else last == 0,
             tag + ": join() returns the last rank, not the first (%d)"
             % last)
        c.ok(hvd.allgather_object(last) == [last] * n,
             tag + ": every rank gets the same last rank")
    # the numpy API's join, and collectives after it
    c.ok(0 <= hora.join() < n, "hora.join()")
    c.ok(same(hvd.allreduce(torch.ones(1), op=hvd.Sum),
              torch.full((1,), float(n))), "allreduce after the joins")
    c.done()


if __name__ == "__main__":
    main()

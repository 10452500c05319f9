"""collectives.py -- the collectives beyond allreduce and broadcast, in
hora.torch and in the numpy API: grouped_allreduce(_), allgather and
grouped_allgather (first dimension differing per rank), alltoall with and
without splits, reducescatter and grouped_reducescatter (every op, scale
factors, remainders), every dtype, async handles waited for in another
order than submitted, autograd of every op Horovod differentiates, and the
shape checks of allreduce. Run by test_collectives.py under horarun
-np 2 and 3, and alone.

Inputs are small integers, or multiples of 1/4 for floats, so results are
exact and compared exactly.
"""
import numpy as np
import torch

import hora
import hora.torch as hvd
from _check import Checker

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]
NP_DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16,
             np.float32, np.float64]
OPS = [hvd.Average, hvd.Sum, hvd.Min, hvd.Max, hvd.Product]
OPN = {hvd.Average: "Average", hvd.Sum: "Sum", hvd.Min: "Min",
       hvd.Max: "Max", hvd.Product: "Product"}


def gen(rank, case, dt, op=None, shape=(3, 5)):
    g = torch.Generator().manual_seed(104729 * case + rank)
    small = op == hvd.Product
    if dt == torch.uint8:
        v = torch.randint(0, 3 if small else 41, shape, generator=g)
    elif not dt.is_floating_point:
        v = torch.randint(-2 if small else -20, 3 if small else 21, shape,
                          generator=g)
    else:
        v = torch.randint(-8 if small else -40, 9 if small else 41, shape,
                          generator=g).double() / 4
    return v.to(dt)


def reduce_ref(op, dt, tensors):
    n = len(tensors)
    fl = dt.is_floating_point
    st = torch.stack([t.double() if fl else t.long() for t in tensors])
    if op == hvd.Sum:
        r = st.sum(0)
    elif op == hvd.Average:
        r = st.sum(0) / n if fl else torch.div(st.sum(0), n,
                                               rounding_mode="trunc")
    elif op == hvd.Min:
        r = st.min(0).values
    elif op == hvd.Max:
        r = st.max(0).values
    else:
        r = st.prod(0)
    return r.to(dt)


def block(rows, n, i):
    """(first row, rows) of member i's reducescatter block."""
    q, rem = divmod(rows, n)
    first = i * q + min(i, rem)
    return first, q + (1 if i < rem else 0)


def same(a, b):
    return isinstance(a, torch.Tensor) and a.dtype == b.dtype and \
        a.shape == b.shape and torch.equal(a, b)


def check_grouped_allreduce(c, r, n):
    case = 0
    for dt in DTYPES:
        for op in OPS:
            case += 1
            shapes = [(3,), (2, 4), (1, 2, 3)]
            ts = [[gen(k, case * 10 + j, dt, op, s) for j, s in
                   enumerate(shapes)] for k in range(n)]
            want = [reduce_ref(op, dt, [ts[k][j] for k in range(n)])
                    for j in range(len(shapes))]
            mine = ts[r]
            before = [t.clone() for t in mine]
            what = "grouped_allreduce %s %s" % (dt, OPN[op])
            got = hvd.grouped_allreduce(mine, op=op,
                                        name="ga.%d" % case if case % 2
                                        else None)
            c.ok(len(got) == len(shapes) and
                 all(same(g, w) for g, w in zip(got, want)), what)
            c.ok(all(same(a, b) for a, b in zip(mine, before)),
                 what + ": inputs untouched")
            bufs = [t.clone() for t in mine]
            res = hvd.grouped_allreduce_(bufs, op=op)
            c.ok(all(a is b for a, b in zip(res, bufs)) and
                 all(same(g, w) for g, w in zip(bufs, want)),
                 what + " in place")
    # async, with scale factors
    ts = [gen(r, 900 + j, torch.float64, None, (4,)) for j in range(3)]
    h = hvd.grouped_allreduce_async(ts, op=hvd.Sum, prescale_factor=0.5,
                                    postscale_factor=2.0, name="gas")
    got = hvd.synchronize(h)
    want = [sum(gen(k, 900 + j, torch.float64, None, (4,))
                for k in range(n)) for j in range(3)]
    c.ok(all(torch.equal(g, w) for g, w in zip(got, want)),
         "grouped_allreduce_async with factors")
    # numpy
    arrs = [np.full((2, 3), r + j, dtype=np.int32) for j in range(2)]
    got = hora.grouped_allreduce(arrs, op=hora.Sum)
    c.ok(all(np.array_equal(g, np.full((2, 3), sum(range(n)) + n * j))
             for j, g in enumerate(got)), "numpy grouped_allreduce")


def check_allgather(c, r, n):
    case = 100
    for dt in DTYPES:
        for dim in (1, 2, 3):
            case += 1
            parts = [gen(k, case, dt, None, (k + 1,) + (2,) * (dim - 1))
                     for k in range(n)]
            want = torch.cat(parts)
            what = "allgather %s %dD" % (dt, dim)
            got = hvd.allgather(parts[r], name="ag.%d" % case if dim == 2
                                else None)
            c.ok(same(got, want), "%s: %s want %s" % (what, got, want))
    # a rank with nothing to send
    parts = [torch.full((0 if k == n - 1 else 2, 3), float(k))
             for k in range(n)]
    c.ok(same(hvd.allgather(parts[r]), torch.cat(parts)),
         "allgather with an empty part")
    # async, waited for in reverse order
    hs = [hvd.allgather_async(torch.full((r + 1,), float(j)),
                              name="aga.%d" % j) for j in range(4)]
    ok = True
    for j in reversed(range(4)):
        got = hvd.synchronize(hs[j])
        ok = ok and same(got, torch.full((n * (n + 1) // 2,), float(j)))
    c.ok(ok, "async allgathers waited for in reverse order")
    # grouped
    ps = [[torch.full((k + 1, 2), float(k)), torch.full((1,), k,
                                                        dtype=torch.int8)]
          for k in range(n)]
    got = hvd.grouped_allgather(ps[r])
    c.ok(same(got[0], torch.cat([p[0] for p in ps])) and
         same(got[1], torch.cat([p[1] for p in ps])), "grouped_allgather")
    # numpy
    for dt in NP_DTYPES:
        parts = [np.full((k + 2, 2), k, dtype=dt) for k in range(n)]
        got = hora.allgather(parts[r])
        c.ok(got.dtype == np.dtype(dt) and
             np.array_equal(got, np.concatenate(parts)),
             "numpy allgather %s" % np.dtype(dt).name)
    got = hora.grouped_allgather([np.arange(r + 1), np.ones((1, 2)) * r])
    c.ok(np.array_equal(got[0], np.concatenate([np.arange(k + 1)
                                                for k in range(n)])) and
         np.array_equal(got[1], np.concatenate([np.ones((1, 2)) * k
                                                for k in range(n)])),
         "numpy grouped_allgather")
    c.raises(ValueError, lambda: hvd.allgather(torch.tensor(1.0)),
             "allgather of a 0-d tensor")
    c.ok(hvd.allgather_object({"r": r}) == [{"r": k} for k in range(n)],
         "allgather_object")


def check_alltoall(c, r, n):
    case = 200
    for dt in DTYPES:
        for dim in (1, 2, 3):
            case += 1
            # rank k sends (k + j) % 3 rows to rank j, rows tagged k*100+j
            splits = [(r + j) % 3 for j in range(n)]
            rows = []
            for j in range(n):
                rows += [r * 10 + j] * splits[j]
            t = torch.tensor(rows, dtype=torch.float64).reshape(
                (-1,) + (1,) * (dim - 1)).expand(
                (len(rows),) + (2,) * (dim - 1)).to(dt).contiguous()
            got, rs = hvd.alltoall(t, splits=splits)
            want_rows = []
            for k in range(n):
                want_rows += [k * 10 + r] * ((k + r) % 3)
            want = torch.tensor(want_rows, dtype=torch.float64).reshape(
                (-1,) + (1,) * (dim - 1)).expand(
                (len(want_rows),) + (2,) * (dim - 1)).to(dt)
            what = "alltoall %s %dD" % (dt, dim)
            c.ok(same(got, want.contiguous()), "%s: %s want %s"
                 % (what, got, want))
            c.ok(rs.tolist() == [(k + r) % 3 for k in range(n)] and
                 rs.dtype == torch.int32, what + ": received splits")
    # without splits: equal parts, dimension 0 may differ per rank
    t = torch.arange(n * (r + 1), dtype=torch.int64) + 1000 * r
    got = hvd.alltoall(t)
    want = torch.cat([torch.arange(r * (k + 1), (r + 1) * (k + 1)) + 1000 * k
                      for k in range(n)])
    c.ok(same(got, want), "alltoall without splits: %s want %s"
         % (got, want))
    # splits as an int64 tensor keep their dtype
    sp = torch.ones(n, dtype=torch.int64)
    got, rs = hvd.alltoall(torch.full((n,), float(r)), splits=sp)
    c.ok(same(got, torch.arange(n, dtype=torch.float32)) and
         rs.dtype == torch.int64, "alltoall with int64 splits")
    # async, in reverse order
    hs = [hvd.alltoall_async(torch.full((n,), float(j + r)),
                             name="a2a.%d" % j) for j in range(3)]
    ok = True
    for j in reversed(range(3)):
        out, rs = hvd.synchronize(hs[j])
        ok = ok and same(out, torch.arange(n, dtype=torch.float32) + j)
    c.ok(ok, "async alltoalls waited for in reverse order")
    # argument errors, raised before anything is sent (Horovod: ValueError)
    c.raises(ValueError, lambda: hvd.alltoall(torch.ones(n + 1)) if n > 1
             else hvd.alltoall(torch.ones(1), splits=[2]),
             "dimension 0 not divisible / splits too large")
    c.raises(ValueError, lambda: hvd.alltoall(torch.ones(n),
                                              splits=[1] * (n + 1)),
             "splits of the wrong length")
    c.raises(ValueError, lambda: hvd.alltoall(torch.ones(n),
                                              splits=[-1] + [1] * (n - 1)),
             "negative splits")
    c.raises(ValueError, lambda: hvd.alltoall(
        torch.ones(n), splits=torch.ones(n, dtype=torch.float32)),
        "float splits")
    c.raises(ValueError, lambda: hvd.alltoall(torch.ones(n - 1 if n > 1
                                                         else 2),
                                              splits=[1] * n),
             "splits that do not add up to dimension 0")
    # numpy
    out, rs = hora.alltoall(np.full(2 * n, r, dtype=np.int16),
                            splits=[2] * n)
    c.ok(np.array_equal(out, np.repeat(np.arange(n, dtype=np.int16), 2)) and
         list(rs) == [2] * n, "numpy alltoall")
    c.ok(np.array_equal(hora.alltoall(np.full(n, r, dtype=np.float32)),
                        np.arange(n, dtype=np.float32)),
         "numpy alltoall without splits")


def check_reducescatter(c, r, n):
    case = 300
    for dt in DTYPES:
        for op in OPS:
            for rows in (2 * n, 2 * n + 1, 1):
                case += 1
                ts = [gen(k, case, dt, op, (rows, 3)) for k in range(n)]
                full = reduce_ref(op, dt, ts)
                first, mine = block(rows, n, r)
                want = full[first:first + mine]
                what = "reducescatter %s %s %d rows" % (dt, OPN[op], rows)
                got = hvd.reducescatter(ts[r], op=op)
                c.ok(same(got, want), "%s: %s want %s" % (what, got, want))
    # scale factors
    for dt in (torch.float32, torch.float64, torch.int32):
        ts = [gen(k, 390, dt, None, (2 * n, 2)) for k in range(n)]
        first, mine = block(2 * n, n, r)
        if dt.is_floating_point:
            want = (sum(t.double() * 0.5 for t in ts) * 4.0).to(dt)
        else:
            want = torch.trunc(sum(torch.trunc(t.double() * 0.5)
                                   for t in ts) * 3.0).to(dt)
        got = hvd.reducescatter(ts[r], op=hvd.Sum, prescale_factor=0.5,
                                postscale_factor=4.0 if
                                dt.is_floating_point else 3.0)
        c.ok(same(got, want[first:first + mine]),
             "reducescatter %s with factors: %s want %s" % (dt, got, want))
    # grouped and async
    ts = [torch.full((n + 1, 2), float(r + j)) for j in range(3)]
    got = hvd.grouped_reducescatter(ts, op=hvd.Sum)
    first, mine = block(n + 1, n, r)
    c.ok(all(same(g, torch.full((mine, 2), float(sum(range(n)) + n * j)))
             for j, g in enumerate(got)), "grouped_reducescatter")
    h = hvd.reducescatter_async(torch.full((n,), float(r)), op=hvd.Average)
    c.ok(same(hvd.synchronize(h), torch.full((1,), (n - 1) / 2.0)),
         "reducescatter_async Average")
    c.raises((ValueError, RuntimeError),
             lambda: hvd.reducescatter(torch.tensor(1.0)),
             "reducescatter of a 0-d tensor")
    c.raises(RuntimeError, lambda: hvd.reducescatter(torch.ones(n),
                                                     op=hvd.Adasum),
             "reducescatter with Adasum")
    # numpy
    got = hora.reducescatter(np.full((2 * n + 1, 2), r, dtype=np.int64),
                             op=hora.Sum)
    first, mine = block(2 * n + 1, n, r)
    c.ok(np.array_equal(got, np.full((mine, 2), sum(range(n)))),
         "numpy reducescatter")
    got = hora.grouped_reducescatter([np.ones(n) * r, np.ones((n, 2))],
                                     op=hora.Average)
    c.ok(np.array_equal(got[0], np.full(1, (n - 1) / 2.0)) and
         np.array_equal(got[1], np.ones((1, 2))),
         "numpy grouped_reducescatter")


def check_shapes(c, r, n):
    """allreduce compares shapes, not only element counts."""
    if n == 1:
        return
    t = torch.ones((17, 23 * 57) if r == 0 else (17, 23, 57))
    c.raises(hvd.HoraInternalError, lambda: hvd.allreduce(t),
             "allreduce of [17, 1311] vs [17, 23, 57]",
             contains=("shape",))
    t = torch.ones((4, 2) if r == 0 else (2, 4))
    c.raises(hvd.HoraInternalError, lambda: hvd.reducescatter(t),
             "reducescatter of different shapes", contains=("shape",))
    t = torch.ones((2, 3 + r))
    c.raises(hvd.HoraInternalError, lambda: hvd.allgather(t),
             "allgather with other dimensions differing")
    c.ok(same(hvd.allreduce(torch.ones(3), op=hvd.Sum),
              torch.full((3,), float(n))), "allreduce after the mismatches")


def check_autograd(c, r, n):
    # allgather: this rank's slice of the averaged gradient
    x = torch.full((r + 1, 2), 1.0, requires_grad=True)
    y = hvd.allgather(x)
    w = torch.arange(y.shape[0], dtype=torch.float32).unsqueeze(1)
    (y * w).sum().backward()
    off = sum(k + 1 for k in range(r))
    c.ok(torch.equal(x.grad, w[off:off + r + 1].expand(r + 1, 2)),
         "allgather gradient: %s" % x.grad)
    # grouped_allgather
    xs = [torch.ones(r + 1, requires_grad=True),
          torch.ones(2, requires_grad=True)]
    ys = hvd.grouped_allgather(xs)
    sum(y.sum() for y in ys).backward()
    c.ok(torch.equal(xs[0].grad, torch.ones(r + 1)) and
         torch.equal(xs[1].grad, torch.ones(2)), "grouped_allgather gradient")
    # alltoall: the gradient goes back to its sender
    x = torch.arange(n, dtype=torch.float64, requires_grad=True)
    y, _ = hvd.alltoall(x * 1, splits=[1] * n)
    (y * (torch.arange(n) + 1)).sum().backward()
    c.ok(torch.equal(x.grad, torch.full((n,), float(r + 1),
                                        dtype=torch.float64)),
         "alltoall gradient: %s" % x.grad)
    # reducescatter (Horovod's gradient: allgather, times size for Sum)
    x = torch.ones(2 * n, requires_grad=True)
    hvd.reducescatter(x, op=hvd.Sum).sum().backward()
    c.ok(torch.equal(x.grad, torch.full((2 * n,), float(n))),
         "reducescatter Sum gradient: %s" % x.grad)
    x = torch.ones(2 * n, requires_grad=True)
    hvd.reducescatter(x, op=hvd.Average).sum().backward()
    c.ok(torch.equal(x.grad, torch.ones(2 * n)),
         "reducescatter Average gradient: %s" % x.grad)
    xs = [torch.ones(n, 2, requires_grad=True) for _ in range(2)]
    for y in hvd.grouped_reducescatter(xs, op=hvd.Sum):
        y.sum().backward()
    c.ok(all(torch.equal(x.grad, torch.full((n, 2), float(n))) for x in xs),
         "grouped_reducescatter gradient")
    # grouped_allreduce
    xs = [torch.ones(3, requires_grad=True), torch.ones(2, requires_grad=True)]
    ys = hvd.grouped_allreduce([x * (r + 1) for x in xs], op=hvd.Sum)
    sum(y.sum() for y in ys).backward()
    c.ok(all(torch.equal(x.grad, torch.full(x.shape, float(n * (r + 1))))
             for x in xs), "grouped_allreduce gradient")


def check_group_unit(c, r, n):
    """A grouped op is negotiated as one unit: one rank grouping what the
    others submit one by one fails the whole group on every rank, with the
    grouping named, and the job goes on."""
    if n < 2:
        return
    a, b = torch.ones(2), torch.ones(3)
    if r == 0:
        hs = [hvd.grouped_allreduce_async([a, b], name="unit", op=hvd.Sum)]
    else:
        hs = [hvd.allreduce_async(a, name="unit.0", op=hvd.Sum),
              hvd.allreduce_async(b, name="unit.1", op=hvd.Sum)]
    for h in hs:
        try:
            hvd.synchronize(h)
            c.ok(False, "a grouping mismatch raised nothing")
        except RuntimeError as e:
            c.ok("grouping" in str(e), "grouping mismatch named: %s" % e)
    got = hvd.grouped_allreduce([a, b], name="unit2", op=hvd.Sum)
    c.ok(torch.equal(got[0], torch.full((2,), float(n))) and
         torch.equal(got[1], torch.full((3,), float(n))),
         "a group after the mismatch")


def main():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    c = Checker("collectives", r, n)
    check_grouped_allreduce(c, r, n)
    check_allgather(c, r, n)
    check_alltoall(c, r, n)
    check_reducescatter(c, r, n)
    check_shapes(c, r, n)
    check_autograd(c, r, n)
    check_group_unit(c, r, n)
    hvd.barrier()
    c.done()


if __name__ == "__main__":
    main()

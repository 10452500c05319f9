"""np_ops.py -- every collective of the numpy API (hora itself) on every
dtype and reduction, against a reference each rank computes from every
rank's (deterministic) input. Run by test_core.py under horarun -np 1/2/4
and alone.

Inputs are small integers, or multiples of 1/4 for floats, so sums,
averages over 1, 2 or 4 ranks and products are exact (or rounded once, as
libhora rounds them) and results are compared exactly.
"""
import os

import numpy as np

import hora
from _check import Checker

DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16,
          np.float32, np.float64]
OPS = [hora.Average, hora.Sum, hora.Min, hora.Max, hora.Product]
OPN = {hora.Average: "Average", hora.Sum: "Sum", hora.Min: "Min",
       hora.Max: "Max", hora.Product: "Product"}


def gen(rank, case, dt, op=None, shape=(3, 5)):
    """Rank `rank`'s input for test case `case`."""
    rng = np.random.RandomState(7919 * case + rank)
    kind = np.dtype(dt).kind
    small = op == hora.Product
    if kind == "u":
        v = rng.randint(0, 3 if small else 41, size=shape)
    elif kind == "i":
        v = rng.randint(-2 if small else -20, 3 if small else 21, size=shape)
    else:
        v = rng.randint(-8 if small else -40, 9 if small else 41,
                        size=shape) / 4.0
    return np.asarray(v).astype(dt)


def trunc_div(s, n):
    return np.sign(s) * (np.abs(s) // n)


def reference(op, dt, arrays):
    n = len(arrays)
    if np.dtype(dt).kind == "f":
        st = np.stack([a.astype(np.float64) for a in arrays])
    else:
        st = np.stack([a.astype(np.int64) for a in arrays])
    if op == hora.Sum:
        r = st.sum(0)
    elif op == hora.Average:
        r = st.sum(0) / n if np.dtype(dt).kind == "f" else \
            trunc_div(st.sum(0), n)
    elif op == hora.Min:
        r = st.min(0)
    elif op == hora.Max:
        r = st.max(0)
    else:
        r = st.prod(0)
    return np.asarray(r).astype(dt)  # integer results wrap, as libhora's do


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and \
        np.array_equal(a, b)


def main():
    hora.init()
    r, n = hora.rank(), hora.size()
    c = Checker("np_ops", r, n)

    # layout: one host
    c.ok(n == int(os.environ.get("HORA_SIZE", "1")), "size() is HORA_SIZE")
    c.ok(r == int(os.environ.get("HORA_RANK", "0")), "rank() is HORA_RANK")
    c.ok((hora.local_rank(), hora.local_size()) == (r, n),
         "local_rank/local_size on one host")
    c.ok((hora.cross_rank(), hora.cross_size()) == (0, 1),
         "cross_rank/cross_size on one host")
    c.ok(hora.is_homogeneous() is True, "is_homogeneous")
    c.ok(hora.is_initialized() is True, "is_initialized")

    # every dtype x op, out of place (input untouched) and in place,
    # named and by call order
    case = 0
    for dt in DTYPES:
        for op in OPS:
            case += 1
            what = "allreduce %s %s" % (np.dtype(dt).name, OPN[op])
            arrays = [gen(k, case, dt, op) for k in range(n)]
            want = reference(op, dt, arrays)
            mine = arrays[r]
            before = mine.copy()
            name = "np.%d" % case if case % 2 else None
            got = hora.allreduce(mine, op=op, name=name)
            c.ok(same(got, want), "%s: got %s want %s" % (what, got, want))
            c.ok(same(mine, before), what + ": input modified")
            c.ok(got is not mine, what + ": out of place returned its input")
            buf = mine.copy()
            res = hora.allreduce_(buf, op=op, name=name)
            c.ok(res is buf, what + " in place: returns its argument")
            c.ok(same(buf, want), what + " in place: %s want %s" % (buf, want))

    # async: many in flight at once (half in place), polled, then collected
    case = 100
    pending = []
    for dt in DTYPES:
        for op in OPS:
            case += 1
            arrays = [gen(k, case, dt, op, (17,)) for k in range(n)]
            want = reference(op, dt, arrays)
            mine = arrays[r].copy()
            if case % 2:
                h = hora.allreduce_async(mine, op=op, name="async.%d" % case)
            else:
                h = hora.allreduce_async_(mine, op=op)
            pending.append((h, mine, case % 2 == 0, want, dt, op))
    c.ok(len({p[0] for p in pending}) == len(pending), "handles are unique")
    for h, mine, inplace, want, dt, op in pending:
        polls = 0
        while not hora.poll(h):
            polls += 1
        c.ok(hora.poll(h) is True, "poll stays True once done")
        got = hora.synchronize(h)
        what = "async %s %s" % (np.dtype(dt).name, OPN[op])
        c.ok(same(got, want), "%s: %s want %s" % (what, got, want))
        if inplace:
            c.ok(got is mine, what + ": in place returns its argument")
        c.ok(hora.synchronize(h) is None, what + ": second synchronize")
    c.raises(ValueError, lambda: hora.poll(pending[0][0]),
             "poll of a synchronized handle")

    # non-contiguous and Fortran-ordered inputs
    case = 200
    for dt in (np.int32, np.float32, np.float64, np.float16):
        case += 1
        bases = [gen(k, case, dt, None, (4, 6)) for k in range(n)]
        views = [b[:, ::2] for b in bases]
        want = reference(hora.Sum, dt, [np.ascontiguousarray(v)
                                        for v in views])
        base = bases[r].copy()
        before = base.copy()
        got = hora.allreduce(base[:, ::2], op=hora.Sum)
        c.ok(same(got, want), "strided allreduce %s" % np.dtype(dt).name)
        c.ok(same(base, before), "strided allreduce: input untouched")
        got = hora.allreduce(base.T, op=hora.Sum)
        c.ok(same(got, reference(hora.Sum, dt, [b.T for b in bases])),
             "transposed allreduce")
        f = np.asfortranarray(base)
        c.ok(same(hora.allreduce(f, op=hora.Max),
                  reference(hora.Max, dt, bases)), "Fortran-order allreduce")
        # in place on a view writes through to the base, only where it looks
        view = base[:, ::2]
        res = hora.allreduce_(view, op=hora.Sum)
        c.ok(res is view and same(res, want),
             "strided in-place allreduce returns the view, reduced")
        expect = before.copy()
        expect[:, ::2] = want
        c.ok(same(base, expect), "strided in-place allreduce writes through")

    # prescale / postscale
    case = 300
    for dt in (np.float16, np.float32, np.float64, np.uint8, np.int32,
               np.int64):
        for op in (hora.Sum, hora.Average):
            case += 1
            arrays = [gen(k, case, dt, None) for k in range(n)]
            kind = np.dtype(dt).kind
            pre, post = (0.5, 4.0) if kind == "f" else (0.5, 3.0)
            if kind == "f":
                s = sum(a.astype(np.float64) * pre for a in arrays)
                ref = s * post / (n if op == hora.Average else 1)
            else:
                s = sum(np.trunc(a.astype(np.float64) * pre) for a in arrays)
                f = post / n if op == hora.Average else post
                ref = np.trunc(s * f)
            want = ref.astype(dt)
            mine = arrays[r]
            before = mine.copy()
            got = hora.allreduce(mine, op=op, prescale_factor=pre,
                                 postscale_factor=post)
            what = "scaled %s %s" % (np.dtype(dt).name, OPN[op])
            c.ok(same(got, want), "%s: %s want %s" % (what, got, want))
            c.ok(same(mine, before), what + ": input untouched")
            buf = mine.copy()
            hora.allreduce_(buf, op=op, prescale_factor=pre,
                            postscale_factor=post)
            c.ok(same(buf, want), what + " in place")

    # broadcast from every root, every dtype, in and out of place, async
    case = 400
    for root in range(n):
        for dt in DTYPES:
            case += 1
            arrays = [gen(k, case, dt, None, (2, 7)) for k in range(n)]
            mine = arrays[r].copy()
            what = "broadcast %s from %d" % (np.dtype(dt).name, root)
            got = hora.broadcast(mine, root)
            c.ok(same(got, arrays[root]), what)
            c.ok(same(mine, arrays[r]), what + ": input untouched")
            res = hora.broadcast_(mine, root, name="bc.%d" % case)
            c.ok(res is mine and same(mine, arrays[root]), what + " in place")
            mine = arrays[r].copy()
            h1 = hora.broadcast_async(mine, root)
            h2 = hora.broadcast_async_(mine.T, root, name="bcT.%d" % case)
            c.ok(same(hora.synchronize(h1), arrays[root]), what + " async")
            hora.synchronize(h2)
            c.ok(same(mine, arrays[root]), what + " async, in place, strided")

    # broadcast_object: None on the other ranks; default names never depend
    # on the object
    for root in range(n):
        state = {"epoch": 3, "root": root, "blob": b"x" * 100000}
        got = hora.broadcast_object(state if r == root else None, root)
        c.ok(got == state, "broadcast_object from %d" % root)
    got = hora.broadcast_object([r], root_rank=n - 1, name="named")
    c.ok(got == [n - 1], "broadcast_object with a name")

    # allgather: first dimension differs between ranks
    parts = [np.full((k + 1, 2), k, dtype=np.int32) for k in range(n)]
    c.ok(same(hora.allgather(parts[r]), np.concatenate(parts)), "allgather")
    c.ok(hora.allgather_object({"r": r}) == [{"r": k} for k in range(n)],
         "allgather_object")

    # odd shapes: empty, 0-d, python lists, a larger array
    e = np.zeros((0, 3), dtype=np.float32)
    c.ok(same(hora.allreduce(e), e), "empty allreduce")
    c.ok(same(hora.broadcast(e, 0), e), "empty broadcast")
    z = hora.allreduce(np.float64(r), op=hora.Sum)
    c.ok(same(z, np.array(n * (n - 1) / 2.0)), "0-d allreduce: %r" % (z,))
    c.ok(same(hora.allreduce([1.0, 2.0], op=hora.Sum),
              np.array([n, 2.0 * n])), "allreduce of a list")
    big = np.full(1 << 20, r + 1, dtype=np.float32)
    got = hora.allreduce(big, op=hora.Sum)
    c.ok(got.shape == big.shape and np.all(got == n * (n + 1) / 2),
         "1M-element allreduce")

    # argument errors: clear exceptions, and the job goes on
    c.raises(ValueError, lambda: hora.broadcast(np.ones(2), n),
             "root rank out of range", contains=("root rank",))
    # Adasum of equal vectors is that vector (tests/python/test_adasum.py
    # has the rest); a size that is not a power of two raises
    if n & (n - 1) == 0:
        c.ok(np.all(hora.allreduce(np.ones(2), op=hora.Adasum) == 1), "Adasum")
    else:
        c.raises(NotImplementedError,
                 lambda: hora.allreduce(np.ones(2), op=hora.Adasum), "Adasum")
    c.raises(ValueError, lambda: hora.allreduce(np.ones(2), op=42),
             "unknown op")
    c.raises(TypeError, lambda: hora.allreduce(np.ones(2, dtype=bool)),
             "bool arrays", contains=("bool",))
    c.raises(TypeError, lambda: hora.allreduce(np.ones(2, dtype=np.uint32)),
             "uint32 arrays", contains=("uint32",))
    ro = np.ones(3)
    ro.flags.writeable = False
    c.raises(ValueError, lambda: hora.allreduce_(ro), "read-only in place")
    c.raises(TypeError, lambda: hora.allreduce_([1.0]), "in place on a list")
    c.ok(same(hora.allreduce(np.ones(2), op=hora.Sum), np.full(2, float(n))),
         "allreduce after the errors")
    hora.barrier()
    c.done()


if __name__ == "__main__":
    main()

"""torch_ops.py -- hora.torch's collectives on every dtype (bfloat16
included) and reduction, against a reference each rank computes from every
rank's deterministic input; async handles, in place vs out of place,
non-contiguous tensors, prescale/postscale, fp16 compression, autograd,
allgather and broadcast_object; large ordinary tensors that horad
reduces where they lie (adopted into the rank's segment). Run by
test_torch_ops.py under
horarun -np 1/2/4 and alone.

Inputs are small integers, or multiples of 1/4 for floats, so results are
exact (or rounded once, as libhora rounds float16/bfloat16) and compared
exactly.
"""
import os
import warnings

import torch

import hora
import hora.torch as hvd
from _check import Checker

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]
OPS = [hvd.Average, hvd.Sum, hvd.Min, hvd.Max, hvd.Product]
OPN = {hvd.Average: "Average", hvd.Sum: "Sum", hvd.Min: "Min",
       hvd.Max: "Max", hvd.Product: "Product"}


def gen(rank, case, dt, op=None, shape=(3, 5)):
    g = torch.Generator().manual_seed(7919 * case + rank)
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


def reference(op, dt, tensors):
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
    return r.to(dt)  # integer results wrap, as libhora's do


def same(a, b):
    return isinstance(a, torch.Tensor) and a.dtype == b.dtype and \
        a.shape == b.shape and torch.equal(a, b)


def check_ops(c, r, n):
    case = 0
    for dt in DTYPES:
        for op in OPS:
            case += 1
            what = "allreduce %s %s" % (dt, OPN[op])
            ts = [gen(k, case, dt, op) for k in range(n)]
            want = reference(op, dt, ts)
            mine = ts[r]
            before = mine.clone()
            name = "t.%d" % case if case % 2 else None
            got = hvd.allreduce(mine, op=op, name=name)
            c.ok(same(got, want), "%s: %s want %s" % (what, got, want))
            c.ok(same(mine, before), what + ": input modified")
            buf = mine.clone()
            res = hvd.allreduce_(buf, op=op, name=name)
            c.ok(res is buf and same(buf, want), what + " in place")
    # deprecated average= argument
    t = torch.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        c.ok(same(hvd.allreduce(t, average=False),
                  torch.full((2,), float(n))), "average=False is Sum")
    c.raises(ValueError, lambda: hvd.allreduce(t, average=True, op=hvd.Sum),
             "average and op together")


def check_async(c, r, n):
    case, pending = 100, []
    for dt in DTYPES:
        for op in OPS:
            case += 1
            ts = [gen(k, case, dt, op, (19,)) for k in range(n)]
            mine = ts[r].clone()
            if case % 2:
                h = hvd.allreduce_async(mine, op=op, name="async.%d" % case)
            else:
                h = hvd.allreduce_async_(mine, op=op)
            pending.append((h, mine, ts[r], case % 2 == 0,
                            reference(op, dt, ts), "%s %s" % (dt, OPN[op])))
    for h, mine, orig, inplace, want, what in pending:
        while not hvd.poll(h):
            pass
        got = hvd.synchronize(h)
        c.ok(same(got, want), "async %s: %s want %s" % (what, got, want))
        if inplace:
            c.ok(got is mine, "async in place returns its argument")
        else:
            c.ok(same(mine, orig), "async out of place: input untouched")
        c.ok(hvd.synchronize(h) is None, "second synchronize returns None")


def check_noncontiguous(c, r, n):
    case = 200
    for dt in (torch.int32, torch.float32, torch.bfloat16, torch.float64):
        case += 1
        bases = [gen(k, case, dt, None, (4, 6)) for k in range(n)]
        want = reference(hvd.Sum, dt, [b[:, ::2].contiguous() for b in bases])
        base = bases[r].clone()
        before = base.clone()
        view = base[:, ::2]
        c.ok(not view.is_contiguous(), "the view is not contiguous")
        got = hvd.allreduce(view, op=hvd.Sum)
        c.ok(same(got, want), "strided allreduce %s" % dt)
        c.ok(same(base, before), "strided allreduce: input untouched")
        got = hvd.allreduce(base.t(), op=hvd.Max)
        c.ok(same(got, reference(hvd.Max, dt, [b.t() for b in bases])),
             "transposed allreduce %s" % dt)
        res = hvd.allreduce_(view, op=hvd.Sum)
        c.ok(res is view and same(view, want), "strided in place %s" % dt)
        expect = before.clone()
        expect[:, ::2] = want
        c.ok(same(base, expect), "strided in place writes through")
        # broadcast in place into a strided view, from the last rank
        b2 = bases[r].clone()
        hvd.broadcast_(b2.t(), n - 1)
        c.ok(same(b2, bases[n - 1]), "strided in-place broadcast %s" % dt)


def check_scale(c, r, n):
    case = 300
    for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64,
               torch.uint8, torch.int32, torch.int64):
        for op in (hvd.Sum, hvd.Average):
            case += 1
            ts = [gen(k, case, dt, None) for k in range(n)]
            if dt.is_floating_point:
                pre, post = 0.5, 4.0
                s = sum(t.double() * pre for t in ts)
                ref = s * post / (n if op == hvd.Average else 1)
            else:
                pre, post = 0.5, 3.0
                s = sum(torch.trunc(t.double() * pre) for t in ts)
                ref = torch.trunc(s * (post / n if op == hvd.Average
                                       else post))
            want = ref.to(dt)
            mine = ts[r]
            before = mine.clone()
            what = "scaled %s %s" % (dt, OPN[op])
            got = hvd.allreduce(mine, op=op, prescale_factor=pre,
                                postscale_factor=post)
            c.ok(same(got, want), "%s: %s want %s" % (what, got, want))
            c.ok(same(mine, before), what + ": input untouched")
            buf = mine.clone()
            h = hvd.allreduce_async_(buf, op=op, prescale_factor=pre,
                                     postscale_factor=post)
            hvd.synchronize(h)
            c.ok(same(buf, want), what + " in place")


def check_broadcast(c, r, n):
    case = 400
    for root in range(n):
        for dt in DTYPES:
            case += 1
            ts = [gen(k, case, dt, None, (2, 7)) for k in range(n)]
            mine = ts[r].clone()
            what = "broadcast %s from %d" % (dt, root)
            got = hvd.broadcast(mine, root)
            c.ok(same(got, ts[root]), what)
            c.ok(same(mine, ts[r]), what + ": input untouched")
            res = hvd.broadcast_(mine, root_rank=root, name="bc.%d" % case)
            c.ok(res is mine and same(mine, ts[root]), what + " in place")
            mine = ts[r].clone()
            h1 = hvd.broadcast_async(mine, root)
            h2 = hvd.broadcast_async_(mine, root, name="bca.%d" % case)
            c.ok(same(hvd.synchronize(h1), ts[root]), what + " async")
            c.ok(hvd.synchronize(h2) is mine and same(mine, ts[root]),
                 what + " async in place")


def check_compression(c, r, n):
    # float32 values that float16 cannot hold exactly
    for dt in (torch.float32, torch.float64, torch.bfloat16):
        xs = [torch.randn(1000, generator=torch.Generator().manual_seed(
            99 + k)).to(dt) * 10 for k in range(n)]
        exact = sum(x.double() for x in xs) / n
        got = hvd.allreduce(xs[r], compression=hvd.Compression.fp16)
        c.ok(got.dtype == dt, "fp16 compression returns %s" % dt)
        # each input rounds to float16 (rel. 2^-11), the float32 sum of n
        # rounds once more to float16: |error| <= 2^-10 * max|x| * 2
        bound = 2.0 ** -10 * 2 * max(float(x.double().abs().max())
                                     for x in xs)
        if dt == torch.bfloat16:
            bound += 2.0 ** -8 * float(exact.abs().max())
        err = float((got.double() - exact).abs().max())
        c.ok(err <= bound, "fp16 compression %s: error %g > bound %g"
             % (dt, err, bound))
        c.ok(err > 0 or dt == torch.bfloat16 or n == 1,
             "fp16 compression really travels as float16")
    ints = torch.arange(5, dtype=torch.int32) * (r + 1)
    c.ok(same(hvd.allreduce(ints, op=hvd.Sum,
                            compression=hvd.Compression.fp16),
              torch.arange(5, dtype=torch.int32) * (n * (n + 1) // 2)),
         "fp16 compression leaves integer tensors alone")
    h16 = torch.full((3,), 0.5, dtype=torch.float16)
    c.ok(same(hvd.allreduce(h16, compression=hvd.Compression.fp16), h16),
         "fp16 compression of a float16 tensor")


def check_autograd(c, r, n):
    # y = allreduce(x * (r+1)); loss = sum(y * w), w equal on every rank.
    w = torch.arange(1.0, 5.0, dtype=torch.float64)
    for op, scale in ((hvd.Sum, n), (hvd.Average, 1)):
        x = torch.ones(4, dtype=torch.float64, requires_grad=True)
        y = hvd.allreduce(x * (r + 1), op=op)
        c.ok(y.requires_grad, "allreduce output requires grad")
        want_y = torch.ones(4, dtype=torch.float64) * (
            n * (n + 1) / 2 / (1 if op == hvd.Sum else n))
        c.ok(torch.allclose(y.detach(), want_y), "allreduce forward")
        (y * w).sum().backward()
        # dL/dy = w on every rank; its allreduce is n*w (Sum) or w (Average)
        c.ok(torch.allclose(x.grad, (r + 1) * scale * w),
             "grad of allreduce %s: %s" % (OPN[op], x.grad))
    # with scale factors, the gradient is scaled the same way
    x = torch.ones(3, requires_grad=True)
    hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0,
                  postscale_factor=0.5).sum().backward()
    c.ok(torch.allclose(x.grad, torch.full((3,), float(n))),
         "grad of a scaled allreduce")
    # fp16 compression keeps the graph
    x = torch.ones(3, requires_grad=True)
    hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16) \
        .sum().backward()
    c.ok(x.grad is not None and x.grad.dtype == torch.float32 and
         torch.allclose(x.grad, torch.full((3,), float(n))),
         "grad through fp16 compression")
    # broadcast: the root gets the average of every rank's gradient
    for root in range(n):
        x = torch.full((2,), float(r), requires_grad=True)
        y = hvd.broadcast(x, root)
        c.ok(torch.equal(y.detach(), torch.full((2,), float(root))),
             "broadcast forward")
        (y * (r + 1)).sum().backward()
        want = (n + 1) / 2.0 if r == root else 0.0
        c.ok(torch.allclose(x.grad, torch.full((2,), want)),
             "grad of broadcast from %d: %s" % (root, x.grad))
    # allgather: this rank's slice of the averaged gradient
    x = torch.ones(r + 1, 2, requires_grad=True)
    y = hvd.allgather(x)
    c.ok(y.shape == (n * (n + 1) // 2, 2), "allgather shape")
    (y * 2).sum().backward()
    c.ok(torch.allclose(x.grad, torch.full((r + 1, 2), 2.0)),
         "grad of allgather")


def check_functions(c, r, n):
    for root in range(n):
        state = {"epoch": 7, "root": root, "t": torch.arange(3)}
        got = hvd.broadcast_object(state if r == root else None, root)
        c.ok(isinstance(got, dict) and got["root"] == root and
             torch.equal(got["t"], torch.arange(3)),
             "broadcast_object from %d (None elsewhere)" % root)
    c.ok(hvd.broadcast_object(r, root_rank=0, name="o") == 0,
         "broadcast_object with a name")
    big = bytes(range(256)) * 4000
    c.ok(hvd.broadcast_object(big if r == 0 else None) == big,
         "broadcast_object of 1 MB")
    c.ok(hvd.allgather_object(("r", r)) == [("r", k) for k in range(n)],
         "allgather_object")
    parts = [torch.full((k + 1, 3), k, dtype=torch.int16) for k in range(n)]
    c.ok(same(hvd.allgather(parts[r]), torch.cat(parts)), "allgather")


def check_misc(c, r, n):
    c.ok(hvd.size() == n and hvd.rank() == r, "size/rank")
    c.ok((hvd.local_rank(), hvd.local_size()) == (r, n), "local layout")
    c.ok((hvd.cross_rank(), hvd.cross_size()) == (0, 1), "cross layout")
    c.ok(hvd.is_homogeneous() is True, "is_homogeneous")
    c.ok(hvd.HoraInternalError is hora.HoraInternalError and
         hvd.HorovodInternalError is hora.HoraInternalError,
         "HoraInternalError is shared")
    e = torch.zeros(0, 4)
    c.ok(same(hvd.allreduce(e), e), "empty allreduce")
    z = hvd.allreduce(torch.tensor(float(r)), op=hvd.Sum)
    c.ok(same(z, torch.tensor(n * (n - 1) / 2.0)), "0-d allreduce")
    big = torch.full((1 << 20,), float(r + 1))
    got = hvd.allreduce(big, op=hvd.Sum)
    c.ok(bool((got == n * (n + 1) / 2).all()), "1M-element allreduce")
    c.raises(ValueError, lambda: hvd.broadcast(torch.ones(2), n),
             "root out of range", contains=("root rank",))
    c.raises(ValueError,
             lambda: hvd.allreduce(torch.ones(2, dtype=torch.bool)),
             "bool tensors", contains=("not supported",))
    c.raises(ValueError,
             lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64)),
             "complex tensors", contains=("not supported",))
    if n & (n - 1) == 0:  # (tests/python/test_adasum.py: the rest)
        c.ok(bool((hvd.allreduce(torch.ones(2), op=hvd.Adasum) == 1).all()),
             "Adasum of equal tensors")
    else:
        c.raises(NotImplementedError,
                 lambda: hvd.allreduce(torch.ones(2), op=hvd.Adasum), "Adasum")
    c.raises(ValueError, lambda: hvd.allreduce(torch.ones(2, device="meta")),
             "meta tensors", contains=("CPU",))
    hvd.barrier()


def in_segment(t):
    """Do t's pages belong to horad's segment (libhora adopted them)?"""
    p = t.data_ptr()
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= p < hi:
                return "memfd:hora-rank" in line
    return False


def check_adopt(c, r, n):
    m = 2 << 20  # 8 MiB of float32: malloc maps it on its own
    t = torch.full((m,), float(r + 1))
    for k in range(3):
        hvd.allreduce_(t, op=hvd.Sum, name="adopt")
        c.ok(bool((t == n * (n + 1) / 2).all()), "large tensor, round %d" % k)
        t.fill_(float(r + 1))  # the program's writes reach horad
    # (under AddressSanitizer malloc is the sanitizer's: nothing adopted)
    if n > 1 and "libasan" not in os.environ.get("LD_PRELOAD", ""):
        c.ok(in_segment(t), "a large tensor lies in horad's segment")
    t.fill_(-1.0)
    part = t[1000:300000]
    part.fill_(float(r))
    hvd.allreduce_(part, op=hvd.Sum, name="adopt.part")
    c.ok(bool((part == n * (n - 1) / 2).all()) and
         bool((t[:1000] == -1).all()) and bool((t[300000:] == -1).all()),
         "a view of a large tensor, the rest untouched")
    del t, part
    u = torch.arange(m, dtype=torch.float32) + r  # perhaps where t lay
    hvd.allreduce_(u, op=hvd.Sum, name="adopt.new")
    want = torch.arange(m, dtype=torch.float32) * n + n * (n - 1) / 2
    c.ok(bool((u == want).all()), "a new tensor after the old one was freed")


def main():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    c = Checker("torch_ops", r, n)
    c.ok(n == int(os.environ.get("HORA_SIZE", "1")), "size() is HORA_SIZE")
    for section in (check_ops, check_async, check_noncontiguous, check_scale,
                    check_broadcast, check_compression, check_autograd,
                    check_functions, check_misc, check_adopt):
        section(c, r, n)
    c.done()


if __name__ == "__main__":
    main()

"""adasum.py -- op=Adasum against a reference computed here in numpy.

Every rank draws every rank's vectors (one seed), so each can compute
what the tree gives: pairwise Adasum up a binary tree over the ranks in
order or, with HORA_HIERARCHICAL_ALLREDUCE=1, the mean of each host's
ranks and the tree over the hosts. Checked: random, orthogonal (the sum)
and parallel (the mean) vectors, tiny and huge magnitudes, a rank of
zeros, every floating dtype (numpy and torch, bfloat16 in torch), scale
factors, in place and async, grouped allreduces, the errors (integers,
reducescatter, a size that is not a power of two), and
DistributedOptimizer(op=Adasum) against the same training simulated here
for every rank. With argument "refused" it expects every Adasum to fail
(a layout horad refuses) and the job to go on.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _check import Checker  # noqa: E402

import hora.torch as hvd  # noqa: E402
import hora  # noqa: E402

hvd.init()
rank, size = hvd.rank(), hvd.size()
c = Checker("adasum", rank, size)
HIER = os.environ.get("HORA_HIERARCHICAL_ALLREDUCE", "0") in ("1", "true")
# the hosts' ranks, in rank order (ranks of a host are consecutive)
hosts = hora.allgather_object(os.environ.get("HORA_HOSTNAME", ""))
groups = []
for r, h in enumerate(hosts):
    if not groups or hosts[groups[-1][0]] != h:
        groups.append([])
    groups[-1].append(r)
POW2 = size & (size - 1) == 0
EVEN = len(set(map(len, groups))) == 1  # as many ranks on every host


def combine(a, b):
    d, aa, bb = a @ b, a @ a, b @ b
    tiny = np.sqrt(np.finfo(np.float64).tiny)
    ca = 1 - d / (2 * aa) if aa >= tiny else 1.0
    cb = 1 - d / (2 * bb) if bb >= tiny else 1.0
    return ca * a + cb * b


def tree(vs):
    vs = [np.array(v, dtype=np.float64) for v in vs]
    s = 1
    while s < len(vs):
        for i in range(0, len(vs) - s, 2 * s):
            vs[i] = combine(vs[i], vs[i + s])
        s *= 2
    return vs[0]


def expect(vs):
    vs = [np.asarray(v, dtype=np.float64) for v in vs]
    if HIER:
        return tree([np.mean([vs[r] for r in g], axis=0) for g in groups])
    return tree(vs)


TOL = {np.float64: 1e-12, np.float32: 2e-6, np.float16: 2e-3}


def rel(got, want):
    got = np.asarray(got, dtype=np.float64)
    n = np.linalg.norm(want)
    return np.linalg.norm(got - want) / (n if n else 1.0)


def close(got, want, dt, what):
    e = rel(got, want)
    c.ok(e <= TOL[dt], "%s: relative error %.3g > %.3g" % (what, e, TOL[dt]))


rng = np.random.default_rng(1234)


def draw(n, kind):
    if kind == "random":
        return rng.normal(size=(size, n))
    if kind == "orthogonal":  # columns of Q: Adasum of these is their sum
        q, _ = np.linalg.qr(rng.normal(size=(max(n, size), size)))
        return q[:n].T.copy()
    if kind == "parallel":  # multiples of one vector: the mean
        return np.outer(rng.normal(size=size), rng.normal(size=n))
    if kind == "tiny":
        return rng.normal(0, 1e-30, size=(size, n))
    if kind == "zero-rank":  # rank size-1 sends zeros
        v = rng.normal(size=(size, n))
        v[-1] = 0
        return v
    raise ValueError(kind)


if sys.argv[1:] == ["refused"]:
    for _ in range(2):
        c.raises(hora.HoraInternalError,
                 lambda: hora.allreduce(np.ones(4), op=hora.Adasum),
                 "Adasum on a layout horad refuses",
                 contains=("Adasum", "power of two"))
    c.ok(np.all(hora.allreduce(np.ones(3), op=hora.Sum) == size),
         "the job goes on")
    c.done()

if not POW2 and not HIER:
    c.raises(NotImplementedError,
             lambda: hora.allreduce(np.ones(2), op=hora.Adasum),
             "Adasum over a size that is not a power of two",
             contains=("power of 2",))
    c.done()

# ---- numpy, every floating dtype and several shapes of data ------------
for kind in ("random", "orthogonal", "parallel", "tiny", "zero-rank"):
    for n in (1, 17, 1000, 65539):
        if kind == "orthogonal" and n < size:
            continue
        vs = draw(n, kind)
        for dt in (np.float64, np.float32, np.float16):
            if kind == "tiny" and dt != np.float64:
                continue
            mine = vs[rank].astype(dt)
            want = expect([v.astype(dt) for v in vs])
            got = hora.allreduce(mine, op=hora.Adasum,
                                 name="ad.%s.%d.%s" % (kind, n,
                                                       np.dtype(dt).name))
            c.ok(got.dtype == dt and got.shape == mine.shape,
                 "%s %d %s: dtype/shape" % (kind, n, dt))
            close(got, want, dt, "%s n=%d %s" % (kind, n, np.dtype(dt).name))
        if kind == "orthogonal" and not HIER:
            close(hora.allreduce(vs[rank], op=hora.Adasum), vs.sum(axis=0),
                  np.float64, "orthogonal vectors: their sum")
        if kind == "parallel" and EVEN:
            close(hora.allreduce(vs[rank], op=hora.Adasum), vs.mean(axis=0),
                  np.float64, "parallel vectors: their mean")

# huge values: squares beyond float32, accumulated in double
vs = rng.normal(0, 1e30, size=(size, 300)).astype(np.float32)
close(hora.allreduce(vs[rank], op=hora.Adasum), expect(vs), np.float32,
      "float32 near 1e30")

# scale factors: Adasum is homogeneous, the result scales by pre * post
vs = draw(100, "random")
got = hora.allreduce(vs[rank], op=hora.Adasum, prescale_factor=0.5,
                     postscale_factor=3.0)
close(got, 1.5 * expect(vs), np.float64, "prescale 0.5, postscale 3")

# in place, async, several in flight, grouped
vs = draw(513, "random")
a = vs[rank].copy()
hora.allreduce_(a, op=hora.Adasum)
close(a, expect(vs), np.float64, "in place")
hs = [hora.allreduce_async(vs[rank] * (k + 1), op=hora.Adasum,
                           name="ad.async.%d" % k) for k in range(6)]
for k, h in enumerate(hs):
    close(hora.synchronize(h), (k + 1) * expect(vs), np.float64,
          "async %d" % k)
ws = draw(77, "random")
out = hora.grouped_allreduce([vs[rank], ws[rank]], op=hora.Adasum)
close(out[0], expect(vs), np.float64, "grouped: first tensor")
close(out[1], expect(ws), np.float64, "grouped: second (norms per tensor)")

# ---- torch ---------------------------------------------------------------
for tdt, ndt, tol in ((torch.float32, np.float32, 2e-6),
                      (torch.float64, np.float64, 1e-12),
                      (torch.float16, np.float16, 2e-3),
                      (torch.bfloat16, None, 1.6e-2)):
    vs = draw(1031, "random")
    t = torch.from_numpy(vs[rank].copy()).to(tdt)
    ins = [torch.from_numpy(v).to(tdt).double().numpy().copy() for v in vs]
    got = hvd.allreduce(t, op=hvd.Adasum, name="tad.%s" % tdt)
    c.ok(got.dtype == tdt, "torch %s: dtype" % tdt)
    e = rel(got.double().numpy(), expect(ins))
    c.ok(e <= tol, "torch %s: relative error %.3g" % (tdt, e))
    hvd.allreduce_(t, op=hvd.Adasum, name="tad_.%s" % tdt)
    e = rel(t.double().numpy(), expect(ins))
    c.ok(e <= tol, "torch %s in place: relative error %.3g" % (tdt, e))

# ---- errors, and the job goes on ------------------------------------------
c.raises(ValueError,
         lambda: hora.allreduce(np.ones(3, dtype=np.int32), op=hora.Adasum),
         "Adasum of int32", contains=("Adasum", "float"))
c.raises(NotImplementedError,
         lambda: hvd.reducescatter(torch.ones(4 * size), op=hvd.Adasum),
         "reducescatter with Adasum")
c.ok(np.all(hora.allreduce(np.ones(3), op=hora.Sum) == size),
     "a sum after the errors")

# ---- DistributedOptimizer(op=Adasum) --------------------------------------
# Each rank steps on its own batch; the deltas of those steps combine with
# Adasum. Simulated here for every rank, each with its own optimizer state.
torch.manual_seed(5)
model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(),
                            torch.nn.Linear(4, 2)).double()
init = [p.detach().clone() for p in model.parameters()]
data = torch.Generator().manual_seed(9)
batches = [[(torch.randn(8, 6, generator=data, dtype=torch.float64),
             torch.randn(8, 2, generator=data, dtype=torch.float64))
            for _ in range(size)] for _ in range(4)]


def make_opt(m):
    return torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)


opt = hvd.DistributedOptimizer(make_opt(model),
                               named_parameters=model.named_parameters(),
                               op=hvd.Adasum)
for step in batches:
    x, y = step[rank]
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()

sims = []
for r in range(size):
    m = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(),
                            torch.nn.Linear(4, 2)).double()
    sims.append((m, make_opt(m)))
cur = [p.clone() for p in init]
for step in batches:
    deltas = []
    for r, (m, o) in enumerate(sims):
        with torch.no_grad():
            for p, v in zip(m.parameters(), cur):
                p.copy_(v)
        o.zero_grad()
        x, y = step[r]
        torch.nn.functional.mse_loss(m(x), y).backward()
        o.step()
        deltas.append([(p.detach() - v).numpy().ravel()
                       for p, v in zip(m.parameters(), cur)])
    cur = [v + torch.from_numpy(expect([d[k] for d in deltas])
                                .reshape(v.shape))
           for k, v in enumerate(cur)]
for k, (p, want) in enumerate(zip(model.parameters(), cur)):
    e = rel(p.detach().numpy().ravel(), want.numpy().ravel())
    c.ok(e <= 1e-10, "DistributedOptimizer(op=Adasum): parameter %d off by "
         "%.3g" % (k, e))
if size > 1:  # (a job of one has the plain optimizer)
    c.raises(AssertionError, lambda: opt.skip_synchronize().__enter__(),
             "skip_synchronize with Adasum", contains=("Adasum",))

hvd.shutdown()
c.done()

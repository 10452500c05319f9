"""wire16.py -- Compression.fp16 and .bf16 across hosts: 16-bit values on
the wire (HORA_REQ_WIRE16).

Argument: the port horad serves /metrics on (horarun --metrics-port). For
float16 and bfloat16 tensors of 2^20 elements (Sum and Average), checked:

  - the result is within the documented bound of the exact sum, for each
    element: (hosts + 1) * u * sum of |inputs| (u: the dtype's unit
    roundoff), one rounding per hop of the ring and one at the end; with
    HORA_HIERARCHICAL_ALLREDUCE=0 (a flat ring, whose segments may cross
    every host's link) (hosts + 2) * u * sum of |inputs|;
  - every rank holds the same bits;
  - with several ranks on a host or three hosts or more, some elements
    differ from the exact sum rounded once (the hops did round);
  - the bytes this host's horad sent over its links (/metrics, the
    kernel's count): with compression at most 0.6 of those of the same
    allreduce without it (a float16 tensor without compression travels
    as float32);
  - ranks that disagree on compression get an error that says so.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _check import Checker  # noqa: E402
import _links  # noqa: E402

import hora.torch as hvd  # noqa: E402
import hora  # noqa: E402

hvd.init()
rank, size = hvd.rank(), hvd.size()
c = Checker("wire16", rank, size)
PORT = int(sys.argv[1])
hosts = hora.allgather_object(os.environ.get("HORA_HOSTNAME", ""))
NHOSTS = len(set(hosts))
LOCAL = hvd.local_size()
FLAT = _links.knob("HIERARCHICAL_ALLREDUCE") == "0"
N = 1 << 20
U = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


def inputs(dtype, r):
    g = torch.Generator().manual_seed(1000 + r)
    x = torch.rand(N, generator=g, dtype=torch.float64) * 2 - 1
    # magnitudes over a few binades, so that sums round often
    x *= torch.exp2(torch.randint(-3, 4, (N,), generator=g).double())
    return x.to(dtype)


def measured(fn):
    return _links.measured(hvd, PORT, fn)


for dtype in (torch.float16, torch.bfloat16):
    comp = hvd.Compression.fp16 if dtype == torch.float16 \
        else hvd.Compression.bf16
    xs = [inputs(dtype, r).double() for r in range(size)]
    exact = sum(xs)
    mag = sum(x.abs() for x in xs)
    mine = inputs(dtype, rank)
    for op, div in ((hvd.Sum, 1), (hvd.Average, size)):
        tag = "%s %s" % (str(dtype)[6:], "sum" if div == 1 else "average")
        plain, b_plain = measured(
            lambda: hvd.allreduce(mine, op=op, name="plain." + tag))
        packed, b_packed = measured(
            lambda: hvd.allreduce(mine, op=op, name="wire." + tag,
                                  compression=comp))
        c.ok(packed.dtype == dtype, "%s: dtype %s" % (tag, packed.dtype))
        once = (exact / div).to(dtype)
        c.ok(torch.equal(plain, once),
             "%s: without compression the result is rounded once" % tag)
        err = (packed.double() - exact / div).abs()
        bound = (NHOSTS + 1 + FLAT) * U[dtype] * mag / div
        worst = float((err / bound).max())
        c.ok(worst <= 1.0, "%s: error %.3g of the bound" % (tag, worst))
        differs = int((packed != once).sum())
        if LOCAL > 1 or NHOSTS > 2:
            c.ok(differs > 0, "%s: no element rounded on the way" % tag)
        bits = hora.allgather_object(packed.view(torch.int16).numpy()
                                     .tobytes())
        c.ok(all(b == bits[0] for b in bits),
             "%s: ranks hold different results" % tag)
        if hvd.local_rank() == 0:
            ratio = b_packed / max(b_plain, 1)
            c.ok(b_plain >= N * 2 and ratio <= 0.6,
                 "%s: sent %d bytes compressed, %d without (ratio %.2f)"
                 % (tag, b_packed, b_plain, ratio))
            print("rank %d: %s: %d bytes sent compressed, %d without, "
                  "ratio %.3f; %d of %d elements differ from one rounding; "
                  "worst error %.3f of the bound"
                  % (rank, tag, b_packed, b_plain, ratio, differs, N, worst),
                  flush=True)

# the ranks disagree: rank 0 alone asks for a 16-bit wire
t = torch.ones(16, dtype=torch.float16)
comp = hvd.Compression.fp16 if rank == 0 else hvd.Compression.none
c.raises(hvd.HoraInternalError, lambda: hvd.allreduce(t, name="disagree", compression=comp),
         "compression mismatch", contains=("Mismatched compression",))
c.ok(torch.equal(hvd.allreduce(t, op=hvd.Sum, name="after"),
                 torch.full((16,), float(size), dtype=torch.float16)),
     "an allreduce after the mismatch")
c.done()

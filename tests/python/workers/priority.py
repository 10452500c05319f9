"""priority.py -- priority= and hora.priority() (hora_request_t.priority).

Run with a small arena (HORA_ARENA_SIZE=16M), so that 8 MiB tensors are
streamed and queue behind one another in horad. After a barrier (so that
the ranks submit together), each rank starts 8 allreduces of 32 MiB, then
one more: given priority 10 (by keyword, or in a `with hvd.priority(10)`
block), it overtakes queued ones (at least one is still pending when it
completes); of the same priority, it completes after all of them. Every result is checked, and so are the refusals of a
priority that is not an int32, and priority= on the numpy API.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _check import Checker  # noqa: E402

import hora  # noqa: E402
import hora.torch as hvd  # noqa: E402

hvd.init()
rank, size = hvd.rank(), hvd.size()
c = Checker("priority", rank, size)
N, COUNT = 8, 8 << 20  # float32: 32 MiB


def step(mode):
    # every tensor made first: nothing but the calls between the last low
    # one's submission and the high one's
    lows = [torch.full((COUNT,), float(k + 1)) for k in range(N)]
    high = torch.full((COUNT,), 100.0)
    name = "%s.high" % mode
    hvd.barrier()
    hs = [hvd.allreduce_async_(t, op=hvd.Sum, name="%s.low.%d" % (mode, k))
          for k, t in enumerate(lows)]
    if mode == "keyword":
        hh = hvd.allreduce_async_(high, op=hvd.Sum, name=name, priority=10)
    elif mode == "block":
        with hvd.priority(10):
            hh = hvd.allreduce_async_(high, op=hvd.Sum, name=name)
    else:
        hh = hvd.allreduce_async_(high, op=hvd.Sum, name=name)
    hvd.synchronize(hh)
    done = sum(1 for h in hs if hvd.poll(h))
    for h in hs:
        hvd.synchronize(h)
    for k, t in enumerate(lows):
        c.ok(bool((t == (k + 1) * size).all()), "%s: low.%d" % (mode, k))
    c.ok(bool((high == 100.0 * size).all()), "%s: high" % mode)
    print("rank %d: %s: high done with %d of %d low done"
          % (rank, mode, done, N), flush=True)
    return done


for mode in ("keyword", "block"):
    d = step(mode)
    c.ok(d <= N - 1, "%s: priority 10 overtook no queued allreduce (%d of "
         "%d done before it)" % (mode, d, N))
d = step("fifo")
c.ok(d == N, "fifo: %d of %d done before the last one" % (d, N))

for bad in ("10", 2 ** 31, -2 ** 31 - 1, 1.5, True):
    c.raises(ValueError, lambda: hvd.priority(bad), "priority %r" % (bad,),
             contains=("priority must be an int",))
c.raises(ValueError, lambda: hvd.allreduce(torch.ones(2), priority=2 ** 40),
         "priority= 2**40", contains=("priority must be an int",))
with hvd.priority(3):
    with hvd.priority(-4):
        pass
    x = hora.allreduce(np.ones(4, np.float32), op=hora.Sum, name="np",
                       priority=7)
c.ok(np.array_equal(x, np.full(4, size, np.float32)), "numpy priority=")
c.ok(hora._prio.value == 0, "blocks restore the priority")
c.done()

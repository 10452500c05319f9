"""cache.py -- the response cache across hosts (--cache-capacity).

Argument: the port horad serves /metrics on (horarun --metrics-port). Each
rank runs 30 steps of 40 allreduces (async, waited together) under the
same names, one of which changes its size every step (renumbered in the
cache, not taken for the old one), and checks every result. Local rank 0
of each host reads the bytes of negotiation its horad sent over the last
20 steps (hora_negotiation_sent_bytes_total) and prints them per step:

    rank R: negotiation: B bytes per step

so that the test compares runs with the cache on, off and too small.
"""
import os
import re
import sys
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _check import Checker  # noqa: E402

import hora  # noqa: E402

hora.init()
rank, size = hora.rank(), hora.size()
c = Checker("cache", rank, size)
PORT = int(sys.argv[1])
STEPS, WARM, NAMES = 30, 10, 40


def nego_bytes():
    url = "http://127.0.0.1:%d/metrics" % PORT
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    m = re.search(r"^hora_negotiation_sent_bytes_total\{[^}]*\} (\d+)", text,
                  re.M)
    return int(m.group(1)) if m else -1


before = 0
for step in range(STEPS):
    if step == WARM:
        hora.barrier()
        before = nego_bytes() if hora.local_rank() == 0 else 0
    xs, hs = [], []
    for k in range(NAMES):
        n = 64 + (step % 5 if k == 7 else 0)  # g.7 changes its size
        x = np.full(n, float(rank + k + step), np.float32)
        xs.append(x)
        hs.append(hora.allreduce_async_(x, op=hora.Sum, name="g.%d" % k))
    for h in hs:
        hora.synchronize(h)
    for k, x in enumerate(xs):
        want = sum(r + k + step for r in range(size))
        c.ok(bool((x == want).all()), "step %d, g.%d: %r, expected %r"
             % (step, k, x[:3], want))
hora.barrier()
if hora.local_rank() == 0:
    after = nego_bytes()
    c.ok(after >= 0 and before >= 0, "no hora_negotiation_sent_bytes_total")
    print("rank %d: negotiation: %d bytes per step"
          % (rank, (after - before) // (STEPS - WARM)), flush=True)
c.done()

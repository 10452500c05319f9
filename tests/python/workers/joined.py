"""joined.py -- a rank that another launcher started (mpirun, torchrun):
init, a sum, shutdown, init again, then "rank R of N joined on HOST, local
L of S". With DIE=R, rank R then dies (os._exit) and the others' next
allreduce must fail, printing "rank R: <error>"; with QUIT=R, rank R shuts
down and exits while the others initialise again, which must fail the
same way. Run by tests/cli/foreign.sh and tests/multihost/join.sh.
"""
import os
import sys
import time

import numpy as np

import hora

hora.init()
r, n = hora.rank(), hora.size()
got = hora.allreduce(np.full(4, r + 1.0), op=hora.Sum)
assert got.tolist() == [n * (n + 1) / 2] * 4, got
hora.shutdown()
hora.init()  # again, as Horovod's test suite does between tests
assert (hora.rank(), hora.size()) == (r, n)
print("rank %d of %d joined on %s, local %d of %d" % (
    r, n, os.uname().nodename, hora.local_rank(), hora.local_size()),
    flush=True)
if os.environ.get("QUIT") == str(r):
    hora.shutdown()
    sys.exit(0)  # gone, while the others initialise hora again
if os.environ.get("QUIT"):
    hora.shutdown()
    try:
        hora.init()
    except Exception as e:
        print("rank %d: %s" % (r, e), flush=True)
        sys.exit(2)
    sys.exit(0)
if os.environ.get("DIE") == str(r):
    os._exit(3)
if os.environ.get("DIE"):
    time.sleep(0.5)
    try:
        hora.allreduce(np.ones(2), name="after")
    except Exception as e:
        print("rank %d: %s" % (r, e), flush=True)
        sys.exit(2)
    sys.exit(0)
hora.shutdown()

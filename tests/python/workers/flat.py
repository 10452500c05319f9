"""flat.py -- what hierarchical_allreduce chooses, seen in the bytes each
host sends (/metrics, the kernel's count of the links' bytes).

Argument: the port horad serves /metrics on (horarun --metrics-port).
The job's HORA_HIERARCHICAL_ALLREDUCE (or Horovod's name) tells the
worker which algorithm to expect:

  - unset or 1 (hierarchical): each host's ranks are reduced first and
    the hosts form the ring, so a host sends 2 (H - 1) / H of the tensor;
  - 0 (flat): every rank is a position of one ring, so a host sends
    2 (N - 1) / N of it, N the ranks: more whenever a host has several.

hierarchical_allgather (or Horovod's name), given as 0, makes an
allgather go round the ring of hosts: each host sends to the next one
only (its own block, then the others' but the next one's, as they come),
where hierarchical it sends its block straight to every other host; the
bytes each host sends to each other host show which ran.

For float32 tensors of 1 Mi elements (Sum, Average, Max) and an int32
Average (sent as 64-bit sums), and a float32 Sum over a process set of
all ranks but the last (whose ring has the set's members, or their
hosts, as positions), checked: every result exact (small integers), and
the bytes each host sent within 3 % above that figure (frame headers)
and not below it.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _check import Checker  # noqa: E402
import _links  # noqa: E402
from _links import knob  # noqa: E402

import hora.torch as hvd  # noqa: E402
import hora  # noqa: E402

# a process set of all ranks but the last: its own ring, over its own
# members (on 2 x 2: two of the first host's, one of the second's)
SET = hvd.ProcessSet(list(range(int(os.environ["HORA_SIZE"]) - 1)))
hvd.init(process_sets=[SET])
rank, size = hvd.rank(), hvd.size()
c = Checker("flat", rank, size)
PORT = int(sys.argv[1])
hosts = hora.allgather_object(os.environ.get("HORA_HOSTNAME", ""))
NHOSTS = len(set(hosts))
FLAT = knob("HIERARCHICAL_ALLREDUCE") == "0"
FLAT_AG = knob("HIERARCHICAL_ALLGATHER") == "0"
N = 1 << 20


def measured(fn):
    return _links.measured(hvd, PORT, fn)


parts = size if FLAT else NHOSTS
share = 2.0 * (parts - 1) / parts
cases = ((torch.float32, hvd.Sum), (torch.float32, hvd.Average),
         (torch.float32, hvd.Max), (torch.int32, hvd.Average))
for dtype, op in cases:
    tag = "%s %s" % (str(dtype)[6:], {hvd.Sum: "sum", hvd.Average: "average",
                                      hvd.Max: "max"}[op])
    # element i of rank r: (i + 3 r) mod 17, exact in every sum here
    base = torch.arange(N, dtype=torch.int64)
    ins = [((base + 3 * r) % 17) for r in range(size)]
    mine = ins[rank].to(dtype)
    out, sent = measured(lambda: hvd.allreduce(mine, op=op, name=tag))
    stack = torch.stack(ins).double()
    if op == hvd.Max:
        want = stack.max(0).values
    elif op == hvd.Sum:
        want = stack.sum(0)
    else:
        want = stack.sum(0) / size
    if dtype == torch.int32:
        want = torch.div(stack.sum(0).long(), size, rounding_mode="trunc")
    c.ok(torch.equal(out.double(), want.double()), "%s: result" % tag)
    if hvd.local_rank() == 0:
        # an integer average travels as its exact 64-bit sums
        wire = 8 if dtype == torch.int32 and op == hvd.Average \
            else mine.element_size()
        expect = share * N * wire
        ratio = sent / expect
        c.ok(1.0 <= ratio <= 1.03,
             "%s: sent %d bytes, expected %.0f (%s, %d hosts, %d ranks): "
             "ratio %.3f" % (tag, sent, expect, "flat" if FLAT else
                             "hierarchical", NHOSTS, size, ratio))
        print("rank %d: %s: %s: %d bytes sent, %.3f of the tensor"
              % (rank, tag, "flat" if FLAT else "hierarchical", sent,
                 sent / (N * wire)), flush=True)

# the process set: its members are the ring's positions, flat
members = size - 1
parts = members if FLAT else len(set(hosts[:members]))
base = torch.arange(N, dtype=torch.int64)
mine = ((base + 5 * rank) % 13).float()
out, sent = measured(lambda: hvd.allreduce(mine, op=hvd.Sum, name="set",
                                           process_set=SET)
                     if SET.included() else None)
if SET.included():
    want = sum(((base + 5 * r) % 13) for r in range(members)).float()
    c.ok(torch.equal(out, want), "process set: result")
    if hvd.local_rank() == 0:
        expect = 2.0 * (parts - 1) / parts * N * 4
        ratio = sent / expect
        c.ok(1.0 <= ratio <= 1.03,
             "process set: sent %d bytes, expected %.0f: ratio %.3f"
             % (sent, expect, ratio))
        print("rank %d: process set of %d: %d bytes sent, %.3f of the "
              "tensor" % (rank, members, sent, sent / (N * 4)), flush=True)

# allgather: hierarchical, each host's block goes straight to every other
# host; flat, round the ring: to the next host only, the host's own block
# and every other but the next one's
order = sorted(set(hosts), key=hosts.index)  # the ring: hosts by rank
me = order.index(hosts[rank])
nxt = order[(me + 1) % len(order)]
block = {h: hosts.count(h) * N * 4 for h in order}
mine = torch.full((N,), float(rank))
out, to = _links.measured_to(hvd, PORT,
                             lambda: hvd.allgather(mine, name="gather"))
want = torch.cat([torch.full((N,), float(r)) for r in range(size)])
c.ok(torch.equal(out, want), "allgather: result")
if hvd.local_rank() == 0:
    for h in order:
        if h == hosts[rank]:
            continue
        if FLAT_AG:
            expect = sum(block.values()) - block[h] if h == nxt else 0
        else:
            expect = block[hosts[rank]]
        got = to.get(h, 0)
        c.ok(expect <= got <= expect * 1.03 + 65536,
             "allgather: sent %d bytes to %s, expected %d (%s)"
             % (got, h, expect, "flat" if FLAT_AG else "hierarchical"))
        print("rank %d: allgather: %s: %d bytes sent to %s"
              % (rank, "flat" if FLAT_AG else "hierarchical", got, h),
              flush=True)
c.done()

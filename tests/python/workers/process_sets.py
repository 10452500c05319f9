"""process_sets.py MODE -- process sets in hora.torch (and the numpy API):

  static    init(process_sets=[...]): ids, size(), rank(), included(); every
            collective on a set; two disjoint sets in flight at once (even
            with the same names); a rank outside a set; duplicates; shutdown
            and init again, with other sets
  mismatch  ranks that ask for different static sets: ValueError on all
  dynamic   init(process_sets="dynamic") and HORA_DYNAMIC_PROCESS_SETS=1:
            add_process_set / remove_process_set and Horovod's errors
  comm      init(comm=[ranks]): a world of some of the job's ranks

Run by test_process_sets.py under horarun -np 3 (and 2).
"""
import os
import sys

import numpy as np
import torch

import hora
import hora.torch as hvd
from _check import Checker


def same(a, b):
    return isinstance(a, torch.Tensor) and a.dtype == b.dtype and \
        a.shape == b.shape and torch.equal(a, b)


def collectives_on(c, ps, tag):
    """Every collective on process set ps, on a member."""
    r = hvd.rank()
    ranks = ps.ranks
    m, me = len(ranks), ranks.index(r)
    c.ok(ps.size() == m and ps.rank() == me and ps.included(),
         "%s: size/rank/included" % tag)
    got = hvd.allreduce(torch.full((3,), float(r)), op=hvd.Sum,
                        process_set=ps)
    c.ok(same(got, torch.full((3,), float(sum(ranks)))), "%s allreduce" % tag)
    got = hvd.allreduce(torch.full((2,), float(r)), process_set=ps)
    c.ok(same(got, torch.full((2,), sum(ranks) / m)),
         "%s allreduce Average divides by the set's size" % tag)
    got = hvd.grouped_allreduce([torch.ones(2) * r, torch.ones(1)],
                                op=hvd.Sum, process_set=ps)
    c.ok(same(got[0], torch.full((2,), float(sum(ranks)))) and
         same(got[1], torch.full((1,), float(m))), "%s grouped" % tag)
    got = hvd.allgather(torch.full((me + 1,), r), process_set=ps)
    want = torch.cat([torch.full((k + 1,), q) for k, q in enumerate(ranks)])
    c.ok(same(got, want), "%s allgather: %s" % (tag, got))
    root = ranks[-1]
    got = hvd.broadcast(torch.full((2,), float(r)), root, process_set=ps)
    c.ok(same(got, torch.full((2,), float(root))),
         "%s broadcast from global rank %d" % (tag, root))
    out, rs = hvd.alltoall(torch.full((m,), r), splits=[1] * m,
                           process_set=ps)
    c.ok(same(out, torch.tensor(ranks)) and rs.tolist() == [1] * m,
         "%s alltoall" % tag)
    got = hvd.reducescatter(torch.full((m, 2), float(r)), op=hvd.Sum,
                            process_set=ps)
    c.ok(same(got, torch.full((1, 2), float(sum(ranks)))),
         "%s reducescatter" % tag)
    hvd.barrier(process_set=ps)
    obj = hvd.broadcast_object({"from": r} if r == root else None, root,
                               process_set=ps)
    c.ok(obj == {"from": root}, "%s broadcast_object" % tag)
    c.ok(hvd.allgather_object(r, process_set=ps) == ranks,
         "%s allgather_object" % tag)
    g = hora.allreduce(np.full(2, r, dtype=np.int64), op=hora.Sum,
                       process_set=ps)
    c.ok(np.array_equal(g, np.full(2, sum(ranks))), "%s numpy" % tag)


def outside(c, ps, tag):
    """A rank outside ps: Horovod's ValueError for every collective."""
    r = hvd.rank()
    c.ok(ps.included() is False, "%s: included() is False" % tag)
    c.raises(ValueError, ps.rank, "%s: rank() outside" % tag,
             contains=("not part of",))
    for what, f in (
            ("allreduce", lambda: hvd.allreduce(torch.ones(1),
                                                process_set=ps)),
            ("allgather", lambda: hvd.allgather(torch.ones(1),
                                                process_set=ps)),
            ("broadcast", lambda: hvd.broadcast(torch.ones(1), ps.ranks[0],
                                                process_set=ps)),
            ("alltoall", lambda: hvd.alltoall(torch.ones(ps.size()),
                                              process_set=ps)),
            ("reducescatter", lambda: hvd.reducescatter(torch.ones(4),
                                                        process_set=ps)),
            ("barrier", lambda: hvd.barrier(process_set=ps))):
        c.raises(ValueError, f, "%s: %s on a non-member" % (tag, what),
                 contains=("Rank %d is not a member" % r,))


def two_sets_in_flight(c, even, odd):
    """Operations on two disjoint sets, submitted before any is waited for,
    with the same names, and a global one among them."""
    r, n = hvd.rank(), hvd.size()
    mine = even if r in even.ranks else odd
    hs = [hvd.allreduce_async(torch.full((4,), float(r)), op=hvd.Sum,
                              name="shared.%d" % j, process_set=mine)
          for j in range(3)]
    hg = hvd.allreduce_async(torch.ones(2), op=hvd.Sum, name="global")
    ha = hvd.allgather_async(torch.full((1,), r), name="shared.ag",
                             process_set=mine)
    ok = True
    for h in reversed(hs):
        ok = ok and same(hvd.synchronize(h),
                         torch.full((4,), float(sum(mine.ranks))))
    c.ok(ok, "two disjoint sets in flight, the same names on both")
    c.ok(same(hvd.synchronize(ha), torch.tensor(mine.ranks)),
         "allgather on a set among them")
    c.ok(same(hvd.synchronize(hg), torch.full((2,), float(n))),
         "a global allreduce among them")


def static(c, r, n):
    even = hvd.ProcessSet(range(0, n, 2))
    odd = hvd.ProcessSet([k for k in range(n) if k % 2][::-1])
    ends = hvd.ProcessSet([n - 1, n - 2])
    c.ok(odd.ranks == sorted(odd.ranks) and ends.ranks == [n - 2, n - 1],
         "ProcessSet sorts its ranks")
    c.ok(even.process_set_id is None and even.size() is None and
         even.rank() is None, "unregistered set: id, size and rank None")
    sets = [even, odd, ends] if n > 2 else [even, odd]
    for round_ in range(3):
        hvd.init(process_sets=sets)
        ids = [ps.process_set_id for ps in sets]
        c.ok(all(i is not None and i > 0 for i in ids) and
             len(set(ids)) == len(ids), "static sets get ids: %s" % ids)
        c.ok(hvd.global_process_set.process_set_id == 0 and
             hvd.global_process_set.ranks == list(range(n)),
             "global_process_set")
        for ps in sets:
            if ps.included():
                collectives_on(c, ps, "static %s (round %d)" % (ps.ranks,
                                                               round_))
            else:
                outside(c, ps, "static %s" % ps.ranks)
        two_sets_in_flight(c, even, odd)
        c.raises(ValueError, lambda: hvd.add_process_set([0]),
                 "add_process_set without dynamic sets",
                 contains=("HOROVOD_DYNAMIC_PROCESS_SETS",))
        # as in Horovod, a rank's shutdown ends what the others still do
        hvd.barrier()
        hvd.shutdown()
        c.ok(not hvd.is_initialized() and even.process_set_id is None,
             "shutdown forgets the sets")
    # duplicates: the later entry is refused, the earlier one works
    dup = hvd.ProcessSet(list(even.ranks))
    c.raises(ValueError, lambda: hvd.init(process_sets=[even, odd, dup]),
             "a duplicate static set", contains=("entry number 2",
                                                 "duplicate"))
    c.ok(even.process_set_id is not None and dup.process_set_id is None,
         "the first of two equal sets is registered")
    hvd.shutdown()
    allranks = hvd.ProcessSet(range(n))
    c.raises(ValueError, lambda: hvd.init(process_sets=[allranks]),
             "a static set of every rank duplicates the global one",
             contains=("duplicate",))
    hvd.shutdown()
    hvd.init()
    c.ok(even.process_set_id is None, "sets are per session")
    c.raises(ValueError, lambda: hvd.allreduce(torch.ones(1),
                                               process_set=even),
             "an unregistered set", contains=("not been registered",))


def mismatch(c, r, n):
    sets = [hvd.ProcessSet([0])] if r == 0 else []
    c.raises(ValueError, lambda: hvd.init(process_sets=sets),
             "different numbers of static sets",
             contains=("mismatching numbers of process sets",))
    hvd.shutdown()
    sets = [hvd.ProcessSet([0])] if r == 0 else [hvd.ProcessSet([n - 1])]
    c.raises(ValueError, lambda: hvd.init(process_sets=sets),
             "different static sets", contains=("mismatching",))
    hvd.shutdown()
    hvd.init()
    c.ok(same(hvd.allreduce(torch.ones(1), op=hvd.Sum),
              torch.full((1,), float(n))), "the job goes on after them")


def dynamic(c, r, n):
    hvd.init(process_sets="dynamic")
    pair = [n - 1, 0] if n > 2 else [1]
    a = hvd.add_process_set(pair)
    c.ok(isinstance(a, hvd.ProcessSet) and a.ranks == sorted(pair) and
         a.process_set_id > 0, "add_process_set returns a registered set")
    b = hvd.add_process_set(hvd.ProcessSet([0]))
    if a.included():
        collectives_on(c, a, "dynamic %s" % a.ranks)
    else:
        outside(c, a, "dynamic %s" % a.ranks)
    c.raises(ValueError, lambda: hvd.add_process_set(list(pair)),
             "adding a set twice", contains=("duplicate process set",))
    c.raises(ValueError, lambda: hvd.add_process_set(range(n)),
             "adding the global set", contains=("duplicate process set",))
    c.raises(ValueError, lambda: hvd.add_process_set([n]),
             "a rank out of range")
    c.ok(hvd.remove_process_set(hvd.global_process_set) is False,
         "the global set is not removed")
    c.ok(hvd.remove_process_set(a) is True and a.process_set_id is None,
         "remove_process_set")
    c.ok(hvd.remove_process_set(a) is False, "removing it again")
    c.raises(ValueError, lambda: hvd.allreduce(torch.ones(1), process_set=a),
             "a removed set", contains=("not been registered",))
    a2 = hvd.add_process_set(pair)
    c.ok(a2.process_set_id not in (None, a.process_set_id, b.process_set_id),
         "a set added again gets a new id")
    if a2.included():
        got = hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=a2)
        c.ok(same(got, torch.full((1,), float(len(a2.ranks)))),
             "allreduce on the set added again")
    hvd.remove_process_set(b)
    # sets added and removed many times, ops between
    for k in range(5):
        s = hvd.add_process_set([0] if k % 2 else list(range(n - 1)) or [0])
        if s.included():
            c.ok(same(hvd.allgather(torch.ones(1), process_set=s),
                      torch.ones(len(s.ranks))), "a short-lived set %d" % k)
        hvd.remove_process_set(s)
    hvd.remove_process_set(a2)
    hvd.shutdown()
    # the environment variable, as Horovod's, and hora's own
    for var in ("HOROVOD_DYNAMIC_PROCESS_SETS", "HORA_DYNAMIC_PROCESS_SETS"):
        saved = {v: os.environ.pop(v, None) for v in
                 ("HOROVOD_DYNAMIC_PROCESS_SETS", "HORA_DYNAMIC_PROCESS_SETS")}
        os.environ[var] = "1"
        hvd.init()
        s = hvd.add_process_set([0])
        c.ok(s.process_set_id is not None, "dynamic sets with %s=1" % var)
        # the set left from the last session is taken over
        hvd.remove_process_set(s)
        hvd.shutdown()
        for v, x in saved.items():
            os.environ.pop(v, None)
            if x is not None:
                os.environ[v] = x
    # init(process_sets="dynamic") set HOROVOD_DYNAMIC_PROCESS_SETS=1, as
    # Horovod's does
    c.ok(os.environ.get("HOROVOD_DYNAMIC_PROCESS_SETS") == "1",
         "init(process_sets=\"dynamic\") sets the variable")
    os.environ.pop("HOROVOD_DYNAMIC_PROCESS_SETS", None)
    os.environ.pop("HORA_DYNAMIC_PROCESS_SETS", None)
    hvd.init()
    c.raises(ValueError, lambda: hvd.add_process_set([0]),
             "add_process_set without dynamic sets",
             contains=("HOROVOD_DYNAMIC_PROCESS_SETS=1",))


def comm(c, r, n):
    world = list(range(n - 1)) if n > 1 else [0]
    if r not in world:
        c.raises(ValueError, lambda: hvd.init(comm=world),
                 "init(comm=...) on a rank outside it", contains=("comm",))
        # wait, starting a session of every rank, until the others end
        # theirs (a shutdown ends every operation of the job, as in Horovod)
        c.raises(hvd.HoraInternalError, hvd.init,
                 "a session of every rank while the comm's go on",
                 contains=("shut down",))
        hvd.shutdown()
        hvd.init()
        return
    hvd.init(comm=world)
    c.ok(hvd.size() == len(world) and hvd.rank() == world.index(r),
         "rank() and size() within comm")
    got = hvd.allreduce(torch.ones(2), op=hvd.Sum)
    c.ok(same(got, torch.full((2,), float(len(world)))),
         "allreduce over the comm's world")
    got = hvd.allgather(torch.full((1,), hvd.rank()))
    c.ok(same(got, torch.arange(len(world))), "allgather over it")
    got = hvd.broadcast(torch.full((1,), float(hvd.rank())), len(world) - 1)
    c.ok(same(got, torch.full((1,), float(len(world) - 1))),
         "broadcast from the comm's last rank")
    hvd.barrier()
    hvd.shutdown()
    hvd.init()


def main():
    mode = sys.argv[1]
    hora.init()
    r, n = hora.rank(), hora.size()
    hora.shutdown()
    c = Checker("process_sets %s" % mode, r, n)
    {"static": static, "mismatch": mismatch, "dynamic": dynamic,
     "comm": comm}[mode](c, r, n)
    if not hvd.is_initialized():
        hvd.init()
    hvd.barrier()
    c.done()


if __name__ == "__main__":
    main()

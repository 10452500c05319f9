"""timeline.py MODE DIR -- Horovod's timeline from hora.torch:

  api     hvd.start_timeline(path, mark_cycles) / hvd.stop_timeline() at
          run time, as Horovod's test_timeline_api: two files, each whole
          (rank 0 parses it with json right after stop_timeline()), the
          allreduce "allreduce.test_allreduce" in both (NEGOTIATE_ALLREDUCE,
          every rank's arrival, ALLREDUCE ending with dtype and shape),
          CYCLE_START only in the one with mark_cycles; what ran between
          them in neither; errors: an empty path, a path that cannot be
          made (rank 0 only), before init
  env     HOROVOD_TIMELINE set in the process before init (Horovod's
          test_timeline.py): rank 0's init starts it

Run by test_timeline.py under horarun -np 2 (and 3).
"""
import json
import os
import sys

import torch

import hora.torch as hvd
from _check import Checker


def rows(path):
    with open(path) as f:
        recs = json.load(f)
    names = {r["pid"]: r["args"]["name"] for r in recs
             if r.get("ph") == "M" and r.get("name") == "process_name" and
             r.get("pid", 0) > 0}
    by = {}
    for r in recs:
        if r.get("ph") in ("B", "E", "X") and r.get("pid") in names:
            by.setdefault(names[r["pid"]], []).append(r)
    return recs, by


def check_file(c, path, size, cycles, absent=()):
    recs, by = rows(path)
    c.ok("start_time_since_epoch_in_micros" in recs[0].get("args", {}),
         "%s: the first record has the start time" % path)
    ev = by.get("allreduce.test_allreduce", [])
    names = [r.get("name") for r in ev if r["ph"] == "B"]
    c.ok("NEGOTIATE_ALLREDUCE" in names and "ALLREDUCE" in names,
         "%s: NEGOTIATE_ALLREDUCE and ALLREDUCE in %r" % (path, names))
    arrivals = {r["name"] for r in ev if r["ph"] == "X"}
    c.ok(arrivals == {str(r) for r in range(size)},
         "%s: every rank's arrival: %r" % (path, sorted(arrivals)))
    ends = [r for r in ev if r["ph"] == "E" and "args" in r]
    c.ok(ends and ends[-1]["args"] == {"dtype": "float32", "shape": "[3]"},
         "%s: the end names dtype and shape: %r" % (path, ends))
    marks = sum(1 for r in recs if r.get("name") == "CYCLE_START")
    c.ok(bool(marks) == cycles, "%s: %d CYCLE_START markers, expected %s"
         % (path, marks, "some" if cycles else "none"))
    for name in absent:
        c.ok(name not in by, "%s: no row %r" % (path, name))


def api(c, d):
    size = hvd.size()
    t = torch.tensor([1, 2, 3], dtype=torch.float32)
    files = [os.path.join(d, "one.json"), os.path.join(d, "two.json")]
    for i, path in enumerate(files):
        hvd.start_timeline(path, mark_cycles=(i == 0))
        hvd.barrier()  # not collective: every rank after rank 0's start
        out = hvd.allreduce(t, name="test_allreduce")
        c.ok(torch.equal(out, t), "the allreduce's result")
        hvd.barrier()
        hvd.stop_timeline()
        if hvd.rank() == 0:
            check_file(c, path, size, cycles=(i == 0),
                       absent=("allreduce.between",))
        # only rank 0's stop ends the file: without this barrier the
        # others' next submission may reach horad before that stop does
        hvd.barrier()
        hvd.allreduce(t, name="between")
    hvd.stop_timeline()  # none running: nothing happens
    c.raises(ValueError, lambda: hvd.start_timeline(""), "an empty path",
             ("file_path",))
    if hvd.rank() == 0:
        bad = os.path.join(d, "no", "such", "t.json")
        c.raises(hvd.HorovodInternalError,
                 lambda: hvd.start_timeline(bad), "a missing directory",
                 ("no/such/t.json",))
    hvd.barrier()


def env(c, d):
    size = hvd.size()
    t = torch.tensor([1, 2, 3], dtype=torch.float32)
    hvd.allreduce(t, name="test_allreduce")
    hvd.barrier()
    hvd.stop_timeline()
    if hvd.rank() == 0:
        check_file(c, os.path.join(d, "env.json"), size, cycles=True)


def main():
    mode, d = sys.argv[1], sys.argv[2]
    if mode == "env":
        os.environ["HOROVOD_TIMELINE"] = os.path.join(d, "env.json")
        os.environ["HOROVOD_TIMELINE_MARK_CYCLES"] = "1"
    else:
        try:
            hvd.start_timeline(os.path.join(d, "x.json"))
            print("FAIL: start_timeline before init did not raise")
        except ValueError:
            pass
    hvd.init()
    c = Checker("timeline " + mode, hvd.rank(), hvd.size())
    {"api": api, "env": env}[mode](c, d)
    c.done()


if __name__ == "__main__":
    main()

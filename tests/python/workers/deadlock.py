"""deadlock.py -- a training script's mistake that would hang: rank 0
allreduces 'loss' before 'grad', the others 'grad' before 'loss' (with
"allgather": rank 0 allgathers 'metrics' where the others allreduce
'loss'; an allgather waits in two phases). Every
rank's wait fails with HoraInternalError (HORA_EDEADLOCK) within a second,
each rank's Python stack is printed first (faulthandler, on horad's
signal), and the job ends. Each rank prints
"rank R: deadlock: CODE after S s: MESSAGE" and exits 4.
Run by test_torch_ops.py under horarun."""
import sys
import time

import torch

import hora.torch as hvd


def stuck_in_allreduce(name):
    return hvd.allreduce(torch.ones(4), name=name)


def stuck_in_allgather(name):
    return hvd.allgather(torch.ones(2, 3), name=name)


def main():
    hvd.init()
    r = hvd.rank()
    order = ["loss", "grad"] if r == 0 else ["grad", "loss"]
    t0 = time.time()
    try:
        if len(sys.argv) > 1 and sys.argv[1] == "allgather":
            if r == 0:
                stuck_in_allgather("metrics")
            else:
                stuck_in_allreduce("loss")
        for name in order:
            stuck_in_allreduce(name)
    except hvd.HoraInternalError as e:
        print("rank %d: deadlock: %s after %.2f s: %s"
              % (r, e.code_name, time.time() - t0, e), flush=True)
        raise SystemExit(4)
    print("rank %d: no error" % r, flush=True)


if __name__ == "__main__":
    main()

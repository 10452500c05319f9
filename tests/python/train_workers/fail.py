"""fail.py -- a rank fails in the middle of data-parallel training.

  fail.py --victim V --step S --how exception|sigkill

Every rank trains a small model with hvd.DistributedOptimizer. At step S,
rank V fails before its backward pass (raises RuntimeError, or kills itself
with SIGKILL), so the other ranks are waiting for its gradients inside
optimizer.step(). A surviving rank must get hvd.HoraInternalError naming
rank V; it then checks that a later collective fails at once as well, prints

  rank R: caught HoraInternalError: <message>
  rank R: later allreduce: <exception type>: <message>

and exits 4. Anything else prints a line starting with "FAIL" and exits 5.
Every rank gives up (exit 9) after 90 s, so a broken teardown cannot hang
the test forever.
"""
import argparse
import os
import signal
import sys
import threading
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import hora.torch as hvd


def watchdog(seconds):
    def fire():
        time.sleep(seconds)
        print("FAIL: rank still running after %d s" % seconds, flush=True)
        os._exit(9)
    threading.Thread(target=fire, daemon=True).start()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--victim", type=int, default=1)
    ap.add_argument("--step", type=int, default=3)
    ap.add_argument("--how", choices=["exception", "sigkill"],
                    default="exception")
    args = ap.parse_args()
    watchdog(90)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    hvd.init()
    rank = hvd.rank()
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
        named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    x = torch.randn(8, 32)
    y = torch.randint(0, 10, (8,))
    try:
        for step in range(1000):
            if step == args.step and rank == args.victim:
                print("rank %d: failing at step %d (%s)"
                      % (rank, step, args.how), flush=True)
                if args.how == "sigkill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError("injected failure on rank %d at step %d"
                                   % (rank, step))
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if step == args.step - 1:
                print("rank %d: step %d done" % (rank, step), flush=True)
    except hvd.HoraInternalError as e:
        print("rank %d: caught HoraInternalError: %s" % (rank, e), flush=True)
        try:
            hvd.allreduce(torch.ones(4), name="after.failure")
            print("FAIL: rank %d: an allreduce after the failure succeeded"
                  % rank, flush=True)
            sys.exit(5)
        except Exception as e2:  # HoraInternalError expected
            print("rank %d: later allreduce: %s: %s"
                  % (rank, type(e2).__name__, e2), flush=True)
        sys.exit(4)
    except Exception as e:
        if rank == args.victim:
            raise
        print("FAIL: rank %d: expected HoraInternalError, got %s: %s"
              % (rank, type(e).__name__, e), flush=True)
        sys.exit(5)
    print("FAIL: rank %d finished 1000 steps without an error" % rank,
          flush=True)
    sys.exit(5)


if __name__ == "__main__":
    main()

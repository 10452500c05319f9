"""elastic_train.py -- a small torch training loop in an elastic job
(horarun --min-np ...): a linear model, DistributedOptimizer, an
ElasticSampler over 240 samples, batches of 4, EPOCHS epochs (default 3),
a commit after every step, STEP_SLEEP seconds (default 0.05) per step.

Each rank records every rank's samples of a step in the sampler (the
step's allreduced use), so that any rank's commit holds the whole job's
progress. The state also counts, per sample of the current epoch, how many times a
committed step used it (summed over the ranks by an allreduce): at each
epoch's end every sample must have been used, and more than once only as
the sampler pads an uneven split (DistributedSampler's way: the samples
left, split among n ranks, repeat at most n - 1 of them), across any
number of starts of the job. Each start prints, from every rank,

  rank R of N: start S at epoch E batch B pid P (T)

(P: its process id; T: the time, seconds since the epoch of the clock;
S: HORA_ELASTIC_RESETS + 1, plus one for each time the job re-formed in
place while this process trained, seen as a new size) once it has taken up
the last commit; at the end every rank prints

  rank R of N: elastic_train: K checks, F failures, weights W

with W the final weights (the same on every rank). Run by
tests/multihost/elastic.sh; extra arguments (a test marker) are ignored."""
import os
import time

import torch

import hora.torch as hvd
from _check import Checker

hvd.init()
EPOCHS = int(os.environ.get("EPOCHS", "3"))
SLEEP = float(os.environ.get("STEP_SLEEP", "0.05"))
N, B = 240, 4
start = int(os.environ.get("HORA_ELASTIC_RESETS", "0")) + 1
last_size = hvd.size()

g = torch.Generator().manual_seed(1)
xs = torch.randn(N, 4, generator=g, dtype=torch.float64)
ys = xs @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]], dtype=torch.float64)
dataset = torch.utils.data.TensorDataset(torch.arange(N), xs, ys)

torch.manual_seed(0)
model = torch.nn.Linear(4, 1).double()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=5)
state = hvd.elastic.TorchState(model=model, optimizer=opt, sampler=sampler,
                               epoch=0, batch=0,
                               counts=torch.zeros(N, dtype=torch.int64),
                               padding=0, checks=0, failures=0)


def padding(sampler, n):
    """The samples the sampler repeats to split what is left among n."""
    return (n - len(sampler.remaining_indices) % n) % n


@hvd.elastic.run
def train(state):
    global start, last_size
    r, n = hvd.rank(), hvd.size()
    if n != last_size:  # the job re-formed in place: a new start
        start += 1
        last_size = n
    restarts = int(os.environ.get("HORA_RANK_RESTARTS", "0"))
    print("rank %d of %d: start %d at epoch %d batch %d%s pid %d (%.3f)"
          % (r, n, start, state.epoch, state.batch,
             " after restart %d" % restarts if restarts else "", os.getpid(),
             time.time()),
          flush=True)
    state.padding += padding(state.sampler, n)
    while state.epoch < EPOCHS:
        loader = torch.utils.data.DataLoader(dataset, batch_size=B,
                                             sampler=state.sampler)
        for i, (idx, x, y) in enumerate(loader):
            opt.zero_grad()
            loss = (model(x) - y).square().mean()
            loss.backward()
            opt.step()
            used = torch.zeros(N, dtype=torch.int64)
            used[idx] = 1
            used = hvd.allreduce(used, op=hvd.Sum, name="elastic_train.used")
            state.counts += used
            # every rank's samples of the step: each rank's commit then
            # holds the whole job's progress (a lost rank's too)
            state.sampler.record_indices(used.nonzero().flatten().tolist())
            state.batch = i + 1
            time.sleep(SLEEP)
            state.commit()
        # every sample of the epoch used by a committed step, and again
        # only as the sampler's padding (an uneven split of what is left
        # among n ranks repeats at most n - 1 samples, once per start)
        state.checks += 1
        skipped = int((state.counts == 0).sum())
        extra = int((state.counts - 1).clamp(min=0).sum())
        if skipped or extra > state.padding:
            state.failures += 1
            print("FAIL: rank %d of %d: epoch %d: %d samples skipped, %d uses "
                  "beyond the first (padding allows %d)"
                  % (r, n, state.epoch, skipped, extra, state.padding),
                  flush=True)
        state.epoch += 1
        state.batch = 0
        state.counts = torch.zeros(N, dtype=torch.int64)
        state.sampler.set_epoch(state.epoch)
        state.padding = padding(state.sampler, n)
        state.commit()


train(state)
r, n = hvd.rank(), hvd.size()
c = Checker("elastic_train", r, n)
c.checks, c.failures = state.checks, state.failures
c.ok(state.epoch == EPOCHS, "ended at epoch %d, not %d" % (state.epoch, EPOCHS))
w = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
everyone = hvd.allgather_object(w.tolist(), name="elastic_train.weights")
c.ok(all(v == everyone[0] for v in everyone), "the ranks' weights differ")
print("rank %d of %d: elastic_train: %d checks, %d failures, weights %s"
      % (r, n, c.checks, c.failures, ",".join("%.6f" % v for v in w.tolist())),
      flush=True)
hvd.shutdown()
raise SystemExit(1 if c.failures else 0)

"""equiv.py -- data-parallel training with hora.torch vs one process.

Run under horarun (-np N) or alone (a job of size 1). Every rank trains a
small float64 MLP for a few steps on its shard of a fixed global batch with
hvd.DistributedOptimizer, then writes its final parameters to
OUT/<scenario>.rank<R>.npz. Rank 0 also trains the single-process reference
(the whole global batch, a plain torch optimizer, the same start) and writes
OUT/<scenario>.ref.npz. The test compares the files.

Scenarios (--scenarios a,b,...; default all):
  sgd        SGD with momentum, same initial weights everywhere
  bpps2      the same with backward_passes_per_step=2: two micro-batches per
             step, loss divided by 2 (Horovod's documented usage)
  predivide  gradient_predivide_factor=2.0
  sum        op=hvd.Sum (the reference scales its loss by the job size)
  fp16       compression=hvd.Compression.fp16 (gradients travel as float16)
  unused     the model has a layer forward() never uses (gradient None)
  bcast_sgd  initial weights seeded by rank, and every rank first trains a
             few steps alone on its own data (different momentum buffers and
             learning rates); broadcast_parameters + broadcast_optimizer_state
             from rank 0 make rank 0's model and optimizer everyone's
  bcast_adam Adam; only rank 0 has optimizer state (as after resuming rank 0
             from a checkpoint); the others have fresh Adam with another lr,
             which broadcast_optimizer_state must overwrite too
The reference of bcast_* starts from rank 0's model and optimizer.

Also writes OUT/<scenario>.init<R>.npz (the parameters training started
from, after any broadcast) and OUT/info.rank<R>.json (rank, size, per-scenario notes).
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import hora.torch as hvd

STEPS = 5
GLOBAL_BATCH = 16  # divisible by 1, 2, 4 (and by 2 micro-batches per rank)
N_IN, N_HID, N_OUT = 6, 16, 3
ALL = ["sgd", "bpps2", "predivide", "sum", "fp16", "unused", "bcast_sgd",
       "bcast_adam"]


class MLP(nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(N_IN, N_HID), nn.Tanh(),
            nn.Linear(N_HID, N_HID), nn.Tanh(),
            nn.Linear(N_HID, N_OUT))
        # a layer forward() never uses: its gradient stays None, and
        # DistributedOptimizer must still take part in its allreduce (with
        # zeros) on every rank
        self.unused = nn.Linear(N_IN, 2) if unused else None

    def forward(self, x):
        return self.net(x)


def make_model(seed, unused=False):
    g = torch.Generator().manual_seed(seed)
    model = MLP(unused).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.5)
    return model


def batch(seed, n=GLOBAL_BATCH):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, N_IN, generator=g, dtype=torch.float64)
    y = torch.randint(0, N_OUT, (n,), generator=g)
    return x, y


def shard(t, rank, size):
    k = t.shape[0] // size
    return t[rank * k:(rank + 1) * k]


def loss_fn(model, x, y):
    return F.cross_entropy(model(x), y)


def params_of(model):
    return {n: p.detach().numpy().copy() for n, p in model.named_parameters()}


def pretrain(model, opt, seed, steps=3):
    """A few local steps (no hora): gives the optimizer some state."""
    for s in range(steps):
        x, y = batch(seed * 100 + s)
        opt.zero_grad()
        loss_fn(model, x, y).backward()
        opt.step()


def make_plain(kind, model, lr):
    if kind == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr)
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)


def setup(scenario, rank):
    """Returns (model, base optimizer, DistributedOptimizer kwargs, info)."""
    kw = {}
    if scenario in ("sgd", "bpps2", "predivide", "sum", "fp16", "unused"):
        model = make_model(1, unused=scenario == "unused")
        opt = make_plain("sgd", model, 0.1)
        if scenario == "bpps2":
            kw["backward_passes_per_step"] = 2
        if scenario == "predivide":
            kw["gradient_predivide_factor"] = 2.0
        if scenario == "sum":
            kw["op"] = hvd.Sum
        if scenario == "fp16":
            kw["compression"] = hvd.Compression.fp16
        return model, opt, kw
    if scenario == "bcast_sgd":
        model = make_model(1000 + rank)
        lr = 0.1 if rank == 0 else 0.3 + rank
        opt = make_plain("sgd", model, lr)
        pretrain(model, opt, 2000 + rank)
        return model, opt, kw
    if scenario == "bcast_adam":
        model = make_model(1000 + rank)
        lr = 0.05 if rank == 0 else 0.5
        opt = make_plain("adam", model, lr)
        if rank == 0:
            pretrain(model, opt, 2000)
        return model, opt, kw
    raise SystemExit("unknown scenario %r" % scenario)


def micro_batches(scenario):
    return 2 if scenario == "bpps2" else 1


def train_distributed(scenario, rank, size):
    model, base, kw = setup(scenario, rank)
    saved = base.state_dict()
    opt = hvd.DistributedOptimizer(
        base, named_parameters=model.named_parameters(), **kw)
    # Horovod's DistributedOptimizer starts from the wrapped optimizer's
    # param_groups, not its state: carry the state over the documented way
    # (load_state_dict, as when resuming from a checkpoint)
    opt.load_state_dict(saved)
    if scenario.startswith("bcast"):
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
    init = params_of(model)
    nmb = micro_batches(scenario)
    for step in range(STEPS):
        x, y = batch(10 + step)
        xs, ys = shard(x, rank, size), shard(y, rank, size)
        opt.zero_grad()
        for m in range(nmb):
            xm, ym = shard(xs, m, nmb), shard(ys, m, nmb)
            (loss_fn(model, xm, ym) / nmb).backward()
        opt.step()
    return model, opt, init


def train_reference(scenario, size):
    model, opt, _ = setup(scenario, 0)
    # op=Sum adds the ranks' gradients of their shard means: size times the
    # gradient of the global mean
    scale = size if scenario == "sum" else 1
    for step in range(STEPS):
        x, y = batch(10 + step)
        opt.zero_grad()
        (loss_fn(model, x, y) * scale).backward()
        opt.step()
    return model, opt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--scenarios", default=",".join(ALL))
    args = ap.parse_args()
    torch.set_num_threads(1)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    os.makedirs(args.out, exist_ok=True)
    info = {"rank": rank, "size": size, "local_rank": hvd.local_rank(),
            "local_size": hvd.local_size(), "scenarios": {}}
    for scenario in args.scenarios.split(","):
        model, opt, init = train_distributed(scenario, rank, size)
        np.savez(os.path.join(args.out, "%s.rank%d.npz" % (scenario, rank)),
                 **params_of(model))
        np.savez(os.path.join(args.out, "%s.init%d.npz" % (scenario, rank)),
                 **init)
        info["scenarios"][scenario] = {
            "lr": opt.param_groups[0]["lr"],
        }
        if rank == 0:
            ref, ref_opt = train_reference(scenario, size)
            np.savez(os.path.join(args.out, "%s.ref.npz" % scenario),
                     **params_of(ref))
            info["scenarios"][scenario]["ref_lr"] = ref_opt.param_groups[0]["lr"]
    with open(os.path.join(args.out, "info.rank%d.json" % rank), "w") as f:
        json.dump(info, f)
    print("rank %d of %d: done" % (rank, size))
    sys.stdout.flush()


if __name__ == "__main__":
    main()

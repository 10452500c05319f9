"""optimizer.py -- hora.torch.DistributedOptimizer and the broadcast helpers
(broadcast_parameters, broadcast_optimizer_state) in a real job. Run by
test_torch_ops.py under horarun -np 2 and 4, and alone with
HOROVOD_ELASTIC=1 (which, as in Horovod, registers the hooks in a job of
one rank).

Every rank trains a float64 model on its own data; the reference is the
same optimizer stepped, on every rank, with the average (or sum) of every
rank's gradient computed locally.
"""
import copy
import warnings

import torch

import hora.torch as hvd
from _check import Checker

ATOL = 1e-12


def data(rank, step, rows=5):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return (torch.randn(rows, 4, generator=g, dtype=torch.float64),
            torch.randn(rows, 2, generator=g, dtype=torch.float64))


class Net(torch.nn.Module):
    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.a = torch.nn.Linear(4, 3).double()
        self.b = torch.nn.Linear(3, 2).double()
        self.c = torch.nn.Linear(3, 2).double()  # used by some ranks only

    def forward(self, x, use_c=False):
        h = torch.tanh(self.a(x))
        out = self.b(h)
        return out + self.c(h) if use_c else out


def loss_of(model, rank, step, use_c):
    x, y = data(rank, step)
    return ((model(x, use_c) - y) ** 2).mean()


def ref_grads(model, n, step, op, passes, uses_c):
    """Every rank's gradient (summed over `passes` backward passes),
    combined with op, for each parameter of model."""
    total = None
    for k in range(n):
        m = copy.deepcopy(model)
        m.zero_grad()
        for p in range(passes):
            loss_of(m, k, step * 10 + p, uses_c(k)).backward()
        gs = [p.grad.clone() if p.grad is not None else torch.zeros_like(p)
              for p in m.parameters()]
        total = gs if total is None else [t + g for t, g in zip(total, gs)]
    return [t / n if op == hvd.Average else t for t in total]


def params_equal(m1, m2, atol):
    return all(torch.allclose(a, b, rtol=0, atol=atol)
               for a, b in zip(m1.parameters(), m2.parameters()))


def train_check(c, r, n, what, make_opt, steps=3, op=hvd.Average, passes=1,
                uses_c=lambda k: True, atol=ATOL, compression=None,
                named=True, predivide=1.0, clip=None):
    model = Net()
    ref = copy.deepcopy(model)
    opt = make_opt(model.parameters())
    ref_opt = make_opt(ref.parameters())
    kwargs = {}
    if named:
        kwargs["named_parameters"] = model.named_parameters()
    if compression is not None:
        kwargs["compression"] = compression
    dopt = hvd.DistributedOptimizer(opt, backward_passes_per_step=passes,
                                    op=op, gradient_predivide_factor=predivide,
                                    **kwargs)
    c.ok(isinstance(dopt, type(opt)), what + ": subclass of the optimizer")
    for step in range(steps):
        dopt.zero_grad()
        for p in range(passes):
            loss_of(model, r, step * 10 + p, uses_c(r)).backward()
        if clip is None:
            dopt.step()
        else:
            dopt.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            with dopt.skip_synchronize():
                dopt.step()
        grads = ref_grads(ref, n, step, op, passes, uses_c)
        for p, g in zip(ref.parameters(), grads):
            p.grad = g
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(ref.parameters(), clip)
        ref_opt.step()
        ref_opt.zero_grad()
    worst = max(float((a - b).abs().max())
                for a, b in zip(model.parameters(), ref.parameters()))
    c.ok(worst <= atol, "%s: parameters differ from the reference by %g"
         % (what, worst))
    # every rank holds the same parameters
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    root = hvd.broadcast(flat, 0, name="check.%s" % what)
    c.ok(torch.equal(flat, root), what + ": ranks disagree")
    return dopt


def sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def check_training(c, r, n):
    train_check(c, r, n, "sgd", sgd)
    train_check(c, r, n, "adam", lambda ps: torch.optim.Adam(ps, lr=0.01))
    train_check(c, r, n, "sum", sgd, op=hvd.Sum)
    train_check(c, r, n, "predivide", sgd, predivide=2.0)
    train_check(c, r, n, "passes2", sgd, passes=2)
    train_check(c, r, n, "unnamed", sgd, named=False)
    # parameters without a gradient on some ranks still take part
    train_check(c, r, n, "nograd", sgd, uses_c=lambda k: k % 2 == 1)
    train_check(c, r, n, "clip", sgd, clip=0.05)
    train_check(c, r, n, "fp16", sgd, compression=hvd.Compression.fp16,
                atol=1e-3)


def check_rules(c, r, n):
    model = Net()
    params = list(model.named_parameters())
    dup = [("same", p) for _, p in params]
    c.raises(ValueError, lambda: hvd.DistributedOptimizer(
        sgd(model.parameters()), named_parameters=dup),
        "duplicate names", contains=("unique", "same"))
    c.raises(ValueError, lambda: hvd.DistributedOptimizer(
        sgd(model.parameters()), named_parameters=params[:2]),
        "unnamed parameters", contains=("not named",))
    c.raises(ValueError, lambda: hvd.DistributedOptimizer(
        sgd(model.parameters()), named_parameters=[p for _, p in params]),
        "named_parameters without names", contains=("tuples",))
    c.raises(ValueError, lambda: hvd.DistributedOptimizer(
        sgd(model.parameters()), op=hvd.Sum, gradient_predivide_factor=2.0),
        "predivide with Sum")
    c.raises(ValueError, lambda: hvd.DistributedOptimizer(
        sgd(model.parameters()), backward_passes_per_step=0),
        "backward_passes_per_step 0")
    if hvd.size() > 1:  # (Adasum itself: adasum.py)
        c.raises(NotImplementedError, lambda: hvd.DistributedOptimizer(
            sgd(model.parameters()), op=hvd.Adasum,
            process_set=hvd.ProcessSet([0])), "Adasum on a process set")
    # zero_grad() between backward() and step() is refused (race)
    opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                   named_parameters=model.named_parameters())
    loss_of(model, r, 0, True).backward()
    c.raises(AssertionError, opt.zero_grad, "zero_grad before step",
             contains=("zero_grad",))
    opt.step()
    opt.zero_grad()
    # a second backward pass before step() with backward_passes_per_step=1
    loss_of(model, r, 1, True).backward()
    c.raises(AssertionError, lambda: loss_of(model, r, 2, True).backward(),
             "two backward passes", contains=("backward_passes_per_step",))
    opt.synchronize()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        opt.step()  # after synchronize() without skip_synchronize: warns
    c.ok(any("skip_synchronize" in str(x.message) for x in w),
         "step() after synchronize() warns")


def check_broadcasts(c, r, n):
    # broadcast_parameters: a state_dict (with buffers) from the last rank
    def model_for(seed):
        torch.manual_seed(seed)
        m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
        m(torch.randn(6, 3))  # running stats and num_batches_tracked move
        return m
    mine, root = model_for(r), model_for(n - 1)
    hvd.broadcast_parameters(mine.state_dict(), root_rank=n - 1)
    c.ok(all(torch.equal(a, b) for a, b in
             zip(mine.state_dict().values(), root.state_dict().values())),
         "broadcast_parameters(state_dict) from the last rank")
    mine, root = model_for(r + 10), model_for(10)
    hvd.broadcast_parameters(list(mine.named_parameters()), root_rank=0)
    c.ok(all(torch.equal(a, b) for a, b in
             zip(mine.parameters(), root.parameters())),
         "broadcast_parameters(named_parameters) from 0")
    mine = model_for(r + 20)
    hvd.broadcast_parameters(list(mine.parameters()), root_rank=0)
    c.ok(all(torch.equal(a, b) for a, b in
             zip(mine.parameters(), model_for(20).parameters())),
         "broadcast_parameters(parameters) from 0")

    # broadcast_optimizer_state: only rank 0 has Adam state, lrs differ
    def adam_for(rank):
        m = Net()
        o = torch.optim.Adam(m.parameters(), lr=0.01 * (rank + 1))
        if rank == 0:
            for s in range(2):
                o.zero_grad()
                loss_of(m, 0, s, True).backward()
                o.step()
        return m, o
    m, o = adam_for(r)
    before = [p.detach().clone() for p in m.parameters()]
    hvd.broadcast_optimizer_state(o, root_rank=0)
    _, o0 = adam_for(0)
    c.ok(state_equal(o.state_dict(), o0.state_dict()),
         "broadcast_optimizer_state(Adam) from 0")
    c.ok(all(torch.equal(a, b) for a, b in zip(before, m.parameters())),
         "broadcast_optimizer_state leaves the parameters alone")
    # SGD with momentum on every rank, into a DistributedOptimizer, from the
    # last rank
    m = Net(seed=r)
    d = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1,
                                                 momentum=0.5 + 0.1 * r),
                                 named_parameters=m.named_parameters())
    loss_of(m, r, 0, True).backward()
    d.step()
    hvd.broadcast_parameters(m.state_dict(), root_rank=n - 1)
    hvd.broadcast_optimizer_state(d, root_rank=n - 1)
    last = hvd.broadcast_object(d.state_dict() if r == n - 1 else None,
                                root_rank=n - 1)
    c.ok(state_equal(d.state_dict(), last),
         "broadcast_optimizer_state(DistributedOptimizer) from the last rank")
    c.ok(d.param_groups[0]["momentum"] == 0.5 + 0.1 * (n - 1),
         "param group options come from the root")
    d.zero_grad()
    loss_of(m, r, 1, True).backward()
    d.step()
    flat = torch.cat([p.detach().reshape(-1) for p in m.parameters()])
    c.ok(torch.equal(flat, hvd.broadcast(flat, 0)),
         "training after the broadcasts keeps ranks in step")
    # a new optimizer: its state is made first, as Horovod makes it (zero
    # gradients and one step), so every rank has one to receive into
    net = Net()
    before = [p.detach().clone() for p in net.parameters()]
    o = torch.optim.SGD(net.parameters(), lr=0.1)
    hvd.broadcast_optimizer_state(o, root_rank=0)
    c.ok(all(p.grad is not None and not p.grad.any()
             for p in net.parameters()), "a new optimizer gets zero grads")
    c.ok(all(torch.equal(a, b) for a, b in zip(before, net.parameters())),
         "a step with zero gradients leaves plain SGD's parameters alone")


def state_equal(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) \
            and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(state_equal(a[k], b[k])
                                            for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(state_equal(x, y)
                                        for x, y in zip(a, b))
    return a == b


def main():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    c = Checker("optimizer", r, n)
    torch.set_num_threads(1)
    check_training(c, r, n)
    check_rules(c, r, n)
    check_broadcasts(c, r, n)
    c.done()


if __name__ == "__main__":
    main()

"""ddp.py SCENARIO... -- hora.torch.DistributedDataParallel in a real job.
Run by test_ddp.py under horarun -np 2 and 3, and alone (a job of one rank).

Every rank builds the model with weights of its own (seeded by its rank) and
wraps it; it must then train as one process would: the reference is plain
torch in this process, from the first member's weights, on the whole batch
of every step. The model (float64) has a convolution and a linear layer,
each followed by BatchNorm. In training mode BatchNorm normalizes with the
statistics of the batch it is given, so the reference runs the forward pass
of each rank's shard on its own and averages the shards' losses: the
gradient of that mean is what the ranks' averaged gradients must equal
(ATOL: float64, the sums only differ in the order of additions). The ranks
must also hold identical parameters, and the BatchNorm buffers each rank
should have (those of the first member before every forward pass with
broadcast_buffers, else its own) are tracked by the reference too.

Scenarios:
  basic      default arguments, SGD with momentum; also that the first
             bucket's allreduce starts before the backward pass reaches the
             first layer (overlap) and state_dict's "module." keys
  adam       Adam, gradients set to None between steps
  view       gradient_as_bucket_view=True: .grad are views of the buckets
  arena      hora.torch.arena_zeros: in place allreduce, the buckets in
             the arena (ordinary tensors when it is full, training still
             right), blocks given back when their tensors go, a tensor that
             outlives shutdown(), init() again
  arena_half run with HORA_ARENA_SIZE=8M: the buckets in the arena take at
             most half of it, the others are ordinary tensors
  tiny       bucket_cap_mb tiny: one bucket per parameter
  nobuffers  broadcast_buffers=False: every rank keeps its own statistics
  nosync     no_sync(): two micro-batches per step, the first accumulated
             locally (checked: no reduction happened), the second reduced
  unused     find_unused_parameters=True, a branch used by every rank, one
             rank, no rank, the other rank in turn (a branch no rank used
             keeps .grad None, as in plain torch)
  unused_view  the same with gradient_as_bucket_view=True
  pset       a process set of ranks 1..n-1 (needs 3 ranks): rank 0 is
             outside it and trains alone; the members start from rank 1's
             weights
  errors     arguments torch's DDP has that cannot apply are refused
             (naming them), so are ranks with different models; a
             parameter without gradient and no
             find_unused_parameters raises RuntimeError naming it, and the
             ranks stay in step
"""
import copy
import os
import sys

import torch

import hora.torch as hvd
from _check import Checker

ATOL = 1e-10
STEPS = 4
ROWS = 4  # rows of every rank's shard


class Net(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.conv = torch.nn.Conv2d(2, 4, 3)
        self.bn1 = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(36, 8)
        self.bn2 = torch.nn.BatchNorm1d(8)
        self.out = torch.nn.Linear(8, 3)
        self.branch = torch.nn.Linear(8, 3)  # used on some steps only
        self.double()

    def forward(self, x, use_branch=False):
        h = torch.tanh(self.bn1(self.conv(x)))
        h = torch.tanh(self.bn2(self.fc(h.flatten(1))))
        y = self.out(h)
        return y + self.branch(h) if use_branch else y


def batch(step, n, micro=0):
    """The whole batch of a step (ROWS rows per shard)."""
    g = torch.Generator().manual_seed(7919 * step + 31 * micro + 1)
    x = torch.randn(n * ROWS, 2, 5, 5, generator=g, dtype=torch.float64)
    y = torch.randn(n * ROWS, 3, generator=g, dtype=torch.float64)
    return x, y


def shard(t, k):
    return t[k * ROWS:(k + 1) * ROWS]


def loss_fn(out, y):
    return ((out - y) ** 2).mean()


def buffers_of(m):
    return [b.detach().clone() for b in m.buffers()]


def set_buffers(m, bufs):
    """New buffer tensors (not written in place: the shards' forward passes
    of one step are all on the autograd graph, which keeps BatchNorm's
    buffers)."""
    slots = [(mod, name) for mod in m.modules() for name in mod._buffers
             if mod._buffers[name] is not None]
    for (mod, name), v in zip(slots, bufs):
        setattr(mod, name, v.clone())


def flat_params(m):
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def worst(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def adam(params):
    return torch.optim.Adam(params, lr=0.01)


class Reference:
    """Plain torch in this process: one model, the forward pass of every
    shard on its own, the mean of the shards' losses; and, for each member,
    the BatchNorm buffers that member should have."""

    def __init__(self, seed, m, make_opt, broadcast_buffers):
        self.model = Net(seed)
        self.opt = make_opt(self.model.parameters())
        self.m = m
        self.broadcast_buffers = broadcast_buffers
        self.bufs = [buffers_of(self.model) for _ in range(m)]

    def forward_all(self, x, y, use_branch):
        """One forward pass on every member; returns the mean loss."""
        pre = self.bufs[0]
        total = 0
        for k in range(self.m):
            set_buffers(self.model, pre if self.broadcast_buffers
                        else self.bufs[k])
            out = self.model(shard(x, k), use_branch(k))
            total = total + loss_fn(out, shard(y, k))
            self.bufs[k] = buffers_of(self.model)
        return total / self.m


def train(c, what, m, me, make_opt=sgd, steps=STEPS, ps=None, root=0,
          set_to_none=False, micro=1, use_branch=lambda step, k: True,
          on_step=None, **ddp_kw):
    """Trains a DDP model on member `me` of m (ps: the process set) and the
    reference; checks parameters and buffers. Returns the DDP model."""
    r = hvd.rank()
    kw = dict(ddp_kw)
    if ps is not None:
        kw["process_set"] = ps
    model = hvd.DistributedDataParallel(Net(100 + r), **kw)
    start = Net(100 + root)
    c.ok(worst(model.module.parameters(), start.parameters()) == 0 and
         worst(model.module.buffers(), start.buffers()) == 0,
         what + ": after construction the model is the root's")
    opt = make_opt(model.parameters())
    ref = Reference(100 + root, m, make_opt,
                    ddp_kw.get("broadcast_buffers", True))
    for step in range(steps):
        opt.zero_grad(set_to_none=set_to_none)
        ref.opt.zero_grad(set_to_none=set_to_none)
        ref_loss = 0
        for mb in range(micro):
            x, y = batch(step, m, mb)
            last = mb == micro - 1
            branch = (lambda k: use_branch(step, k))
            if last:
                loss_fn(model(shard(x, me), branch(me)),
                        shard(y, me)).backward()
            else:
                with model.no_sync():
                    loss_fn(model(shard(x, me), branch(me)),
                            shard(y, me)).backward()
                if on_step is not None:
                    on_step(model, step, "no_sync")
            ref_loss = ref_loss + ref.forward_all(x, y, branch)
        ref_loss.backward()
        if on_step is not None:
            on_step(model, step, "synced")
        opt.step()
        ref.opt.step()
    d = worst(model.module.parameters(), ref.model.parameters())
    c.ok(d <= ATOL, "%s: parameters differ from the reference by %g"
         % (what, d))
    moved = worst(ref.model.parameters(), start.parameters())
    c.ok(moved > 1e-3, "%s: training moved the weights by only %g"
         % (what, moved))
    d = worst(model.module.buffers(), ref.bufs[me])
    c.ok(d <= ATOL, "%s: buffers differ from the reference by %g"
         % (what, d))
    flat = flat_params(model.module)
    got = hvd.broadcast(flat, root, name="check.%s" % what,
                        process_set=ps or hvd.global_process_set)
    c.ok(torch.equal(flat, got), what + ": ranks hold different parameters")
    return model


def grads_of(model):
    return [p.grad for p in model.module.parameters()]


def scenario_basic(c, r, n):
    # small buckets, so that there are several: the first bucket (the last
    # layers' gradients) must be allreduced while the backward pass is
    # still on its way to the first layer
    events = []
    probe = hvd.DistributedDataParallel(Net(100 + r), bucket_cap_mb=0.001)
    real_launch, real_ready = probe._launch, probe._grad_ready
    probe._launch = lambda b: (events.append(("launch", b.index)),
                               real_launch(b))[1]
    probe._grad_ready = lambda p: (events.append(("ready", p)),
                                   real_ready(p))[1]
    x, y = batch(0, n)
    loss_fn(probe(shard(x, r), True), shard(y, r)).backward()
    first = probe.module.conv.weight
    at_first = [i for i, e in enumerate(events)
                if e[0] == "ready" and e[1] is first]
    launches = [i for i, e in enumerate(events) if e[0] == "launch"]
    c.ok(len(probe._buckets) > 2 and len(launches) == len(probe._buckets),
         "basic: %d buckets, %d allreduces" % (len(probe._buckets),
                                               len(launches)))
    c.ok(at_first and launches and launches[0] < at_first[0],
         "basic: the first bucket's allreduce starts before the backward "
         "pass reaches the first layer (events %s)"
         % [e if e[0] == "launch" else "ready" for e in events])
    c.ok(probe._iteration is None, "basic: backward() finished the reduction")
    keys = list(probe.state_dict().keys())
    c.ok(keys and all(k.startswith("module.") for k in keys) and
         [k[len("module."):] for k in keys] ==
         list(probe.module.state_dict().keys()),
         "basic: state_dict keys are module.<key> (%s)" % keys[:3])
    c.ok(isinstance(probe.module, Net), "basic: .module is the model")
    check_layout(c)
    train(c, "basic", n, r)


def check_layout(c):
    """Buckets: reverse registration order, every parameter once, the first
    at most 1 MiB, the others at most bucket_cap_mb, one dtype each."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(200, 200) for _ in range(20)]  # 160 KB each
    layers.insert(2, torch.nn.Linear(8, 8).double())
    model = hvd.DistributedDataParallel(torch.nn.Sequential(*layers),
                                        bucket_cap_mb=0.5)
    order = [p for b in model._buckets for p in b.params]
    params = list(model.module.parameters())
    c.ok(len(order) == len(params) and
         all(a is b for a, b in zip(order, reversed(params))),
         "layout: the buckets hold the parameters in reverse order")
    sizes = [sum(p.numel() * p.element_size() for p in b.params)
             for b in model._buckets]
    c.ok(all(s <= 0.5 * 2 ** 20 for s in sizes) and len(sizes) > 6,
         "layout: bucket sizes %s, cap 0.5 MiB" % sizes)
    c.ok(all(len({p.dtype for p in b.params}) == 1 and
             b.flat.dtype == b.params[0].dtype for b in model._buckets),
         "layout: one dtype per bucket")
    big = hvd.DistributedDataParallel(torch.nn.Sequential(*layers),
                                      bucket_cap_mb=25)
    sizes = [sum(p.numel() * p.element_size() for p in b.params)
             for b in big._buckets]
    # reversed (bias, weight, bias, ...): 18 float32 layers (6 and a bias
    # fill the first MiB, the rest the second bucket), the float64 layer,
    # 2 float32 layers
    c.ok(sizes == [6 * 160800 + 800, 12 * 160800 - 800, 576, 2 * 160800],
         "layout: bucket sizes %s: a first small bucket (1 MiB), then up "
         "to 25 MiB, a new one where the dtype changes" % sizes)


def scenario_adam(c, r, n):
    train(c, "adam", n, r, make_opt=adam, set_to_none=True)


def scenario_view(c, r, n):
    def check_views(model, step, when):
        if when != "synced":
            return
        ok = True
        for b in model._buckets:
            lo = b.flat.data_ptr()
            hi = lo + b.flat.numel() * b.flat.element_size()
            for p in b.params:
                ok = ok and p.grad is not None and \
                    lo <= p.grad.data_ptr() < hi
        c.ok(ok, "view: step %d: every .grad is a view of its bucket" % step)

    train(c, "view", n, r, gradient_as_bucket_view=True, on_step=check_views)
    # set_to_none gives the backward pass fresh tensors: they are copied
    # into the buckets and .grad is made a view again
    train(c, "view_none", n, r, gradient_as_bucket_view=True,
          set_to_none=True, on_step=check_views)


def same_grads(c, what, model, net, ref, x):
    """Every rank feeds x to the DDP model (wrapping net) and to ref, a
    copy of net: the averages of the ranks' equal gradients must be ref's
    own."""
    model(x).sum().backward()
    ref(x).sum().backward()
    d = max(float((a.grad - b.grad).abs().max())
            for a, b in zip(net.parameters(), ref.parameters()))
    c.ok(d < 1e-5, "%s: the average of equal gradients is off by %g"
         % (what, d))


def scenario_arena(c, r, n):
    """Arena tensors: made, reduced in place, given back; buckets in the
    arena, and ordinary ones when it is full; blocks that outlive
    shutdown()."""
    daemon = bool(os.environ.get("HORA_DAEMON_SOCKET"))
    t = hvd.arena_zeros(3, 5, dtype=torch.float64)
    c.ok(t.shape == (3, 5) and t.dtype == torch.float64 and
         not t.any() and hvd.in_arena(t) == daemon,
         "arena: arena_zeros(3, 5) is %s %s, in the arena: %s"
         % (tuple(t.shape), t.dtype, hvd.in_arena(t)))
    c.ok(not hvd.in_arena(torch.zeros(15)) and not hvd.in_arena(t.t()),
         "arena: an ordinary tensor, or a transposed arena one, is not in "
         "the arena")
    t.copy_(torch.arange(15, dtype=torch.float64).view(3, 5) * (r + 1))
    p = t.data_ptr()
    hvd.allreduce_(t, op=hvd.Sum, name="arena.t")
    want = torch.arange(15, dtype=torch.float64).view(3, 5) * \
        (n * (n + 1) / 2)
    c.ok(torch.equal(t, want) and t.data_ptr() == p,
         "arena: allreduce_ of an arena tensor, in place: %s" % t)
    c.raises(ValueError, lambda: hvd.arena_empty(2, -1),
             "arena: a negative size", ("negative",))
    model = train(c, "arena", n, r, bucket_cap_mb=0.0005)
    c.ok(model.arena_buckets == (len(model._buckets) if daemon else 0),
         "arena: %d of %d buckets in the arena"
         % (model.arena_buckets, len(model._buckets)))
    del model
    if daemon:
        # the arena filled but for 64-128 KiB (room for the small outputs
        # of the layout check, none for the model's 1 MiB buckets)
        fill, big = [], 0
        for block in (1 << 20, 1 << 16):
            try:
                while True:
                    fill.append(hvd.arena_empty(block, dtype=torch.uint8))
                    big += block == 1 << 20
            except RuntimeError as e:
                c.ok("arena" in str(e) and big > 8,
                     "arena: full after %d MiB: %s" % (big, e))
        del fill[-1]
        torch.manual_seed(0)
        net = torch.nn.Sequential(*[torch.nn.Linear(200, 200)
                                    for _ in range(8)])
        ref = copy.deepcopy(net)
        model = hvd.DistributedDataParallel(net, gradient_as_bucket_view=True)
        c.ok(len(model._buckets) == 2 and model.arena_buckets == 0,
             "arena: %d of %d buckets in a full arena"
             % (model.arena_buckets, len(model._buckets)))
        same_grads(c, "arena: ordinary buckets", model, net, ref,
                   torch.linspace(-1, 1, 800).view(4, 200))
        del model, net
        k = len(fill)
        del fill
        again = [hvd.arena_empty(1 << 20, dtype=torch.uint8)
                 for _ in range(big)]
        c.ok(all(hvd.in_arena(a) for a in again),
             "arena: %d MiB again once the %d tensors are gone" % (big, k))
        del again
    # blocks in use at shutdown stay valid; given back after init(), they
    # are forgotten without complaint
    kept = hvd.arena_zeros(1000)
    kept.fill_(r)
    hvd.shutdown()
    kept.add_(1)
    c.ok(float(kept.sum()) == 1000.0 * (r + 1) and not hvd.in_arena(kept),
         "arena: a tensor kept across shutdown() holds %g"
         % float(kept.sum()))
    hvd.init(process_sets="dynamic")
    del kept
    u = hvd.arena_zeros(4)
    c.ok(hvd.in_arena(u) == daemon, "arena: a new block after init()")
    del u
    c.ok(hvd.allreduce(torch.ones(2), op=hvd.Sum,
                       name="arena.after").tolist() == [n, n],
         "arena: collectives after the new init()")


def scenario_arena_half(c, r, n):
    """Run with an arena of 8 MiB: buckets take at most half of it, the
    others are ordinary tensors, and the averages are right in both."""
    size = hvd.arena_size()
    c.ok(size == 8 << 20, "arena_half: the arena has %d bytes" % size)
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(8)])
    ref = copy.deepcopy(net)
    model = hvd.DistributedDataParallel(net, bucket_cap_mb=1.5)
    inside = sum(b.flat.numel() * b.flat.element_size()
                 for b in model._buckets if hvd.in_arena(b.flat))
    c.ok(0 < model.arena_buckets < len(model._buckets) and
         inside <= size // 2,
         "arena_half: %d of %d buckets, %d bytes, in the arena"
         % (model.arena_buckets, len(model._buckets), inside))
    same_grads(c, "arena_half", model, net, ref,
               torch.linspace(-1, 1, 2048).view(4, 512))


def scenario_tiny(c, r, n):
    model = train(c, "tiny", n, r, bucket_cap_mb=1e-6)
    nparams = len([p for p in model.module.parameters() if p.requires_grad])
    c.ok(len(model._buckets) == nparams, "tiny: %d buckets for %d parameters"
         % (len(model._buckets), nparams))
    train(c, "small", n, r, bucket_cap_mb=0.0005, gradient_as_bucket_view=True)


def scenario_nobuffers(c, r, n):
    train(c, "nobuffers", n, r, broadcast_buffers=False)


def scenario_nosync(c, r, n):
    def local_only(model, step, when):
        if when != "no_sync":
            return
        g = torch.cat([p.grad.reshape(-1) for p in model.module.parameters()
                       if p.grad is not None])
        norms = hvd.allgather(torch.tensor([float(g.norm())],
                                           dtype=torch.float64),
                              name="check.nosync.%d" % step)
        c.ok(len(set(norms.tolist())) == n,
             "nosync: step %d: gradients were reduced under no_sync() (%s)"
             % (step, norms.tolist()))

    train(c, "nosync", n, r, micro=2, on_step=local_only)
    train(c, "nosync_view", n, r, micro=2, gradient_as_bucket_view=True,
          set_to_none=True)


def uses(step, k, n):
    """Step 0: every rank uses the branch; 1: rank 0 only; 2: no rank; 3:
    the last rank only."""
    return [True, k == 0, False, k == n - 1][step % 4]


def scenario_unused(c, r, n, view=False):
    what = "unused_view" if view else "unused"

    def check(model, step, when):
        if when != "synced":
            return
        g = model.module.branch.weight.grad
        if step % 4 == 2:
            c.ok(g is None, "%s: step %d: no rank used the branch, yet its "
                 ".grad is %s" % (what, step, "set" if g is not None else g))
        else:
            c.ok(g is not None and float(g.abs().max()) > 0,
                 "%s: step %d: the branch has no gradient" % (what, step))

    train(c, what, n, r, find_unused_parameters=True, set_to_none=True,
          gradient_as_bucket_view=view,
          use_branch=lambda step, k: uses(step, k, n), on_step=check)
    if not view:
        # zeros left by zero_grad() stay zeros (plain torch: momentum acts)
        train(c, what + "_zeros", n, r, find_unused_parameters=True,
              use_branch=lambda step, k: uses(step, k, n))


def scenario_unused_view(c, r, n):
    scenario_unused(c, r, n, view=True)


def scenario_pset(c, r, n):
    if n < 2:
        return  # a set without rank 0 needs a second rank
    members = list(range(1, n))
    ps = hvd.add_process_set(members)
    if r in members:
        train(c, "pset", len(members), members.index(r), ps=ps, root=1)
    else:
        # outside the set: the wrapper only calls the module, and this rank
        # trains alone on its data
        model = hvd.DistributedDataParallel(Net(100 + r), process_set=ps)
        ref = Net(100 + r)
        c.ok(worst(model.module.parameters(), ref.parameters()) == 0,
             "pset: outside the set the weights stay this rank's")
        opt, ref_opt = sgd(model.parameters()), sgd(ref.parameters())
        for step in range(STEPS):
            x, y = batch(step, 1)
            for m_, o in ((model, opt), (ref, ref_opt)):
                o.zero_grad()
                loss_fn(m_(x), y).backward()
                o.step()
        c.ok(worst(model.module.parameters(), ref.parameters()) == 0,
             "pset: outside the set the model trains alone")
    # the whole job again, after the set's DDP
    train(c, "pset_global", n, r, steps=2)


def scenario_errors(c, r, n):
    net = Net(0)
    D = hvd.DistributedDataParallel
    c.raises(ValueError, lambda: D(net, device_ids=[0]),
             "device_ids=[0]", contains=("device_ids",))
    c.raises(ValueError, lambda: D(net, device_ids=["cuda:0"]),
             "device_ids=['cuda:0']", contains=("device_ids",))
    c.raises(ValueError, lambda: D(net, device_ids=["cpu", "cpu"]),
             "two device_ids", contains=("device_ids",))
    c.raises(ValueError, lambda: D(net, output_device=0),
             "output_device=0", contains=("output_device",))
    c.raises(ValueError, lambda: D(net, process_group=object()),
             "process_group", contains=("process_group", "process_set"))
    c.raises(ValueError, lambda: D(net, dim=1), "dim=1", contains=("dim",))
    c.raises(ValueError, lambda: D(net, bucket_cap_mb=0),
             "bucket_cap_mb=0", contains=("bucket_cap_mb",))
    c.raises(TypeError, lambda: D(net, process_set=[0, 1]),
             "process_set as a list", contains=("process_set",))
    c.raises(ValueError, lambda: D(net, process_set=hvd.ProcessSet([0])),
             "unregistered process set", contains=("not registered",))
    c.raises(TypeError, lambda: D(lambda x: x), "a function as module",
             contains=("torch.nn.Module",))
    emb = torch.nn.Sequential(torch.nn.Embedding(5, 2, sparse=True))
    c.raises(ValueError, lambda: D(emb), "sparse embedding",
             contains=("sparse",))
    # ranks that wrap different models: ValueError on every rank
    other = torch.nn.Linear(3, 2 + (r == n - 1))
    if n > 1:
        c.raises(ValueError, lambda: D(other), "models differ",
                 contains=("different models", "weight"))
    # what may be passed as in torch, for a CPU model
    for kw in ({"device_ids": None}, {"device_ids": ["cpu"]},
               {"device_ids": [torch.device("cpu")], "output_device": "cpu"},
               {"check_reduction": True}):
        try:
            D(Net(100 + r), **kw)
            c.ok(True, "accepted: %s" % kw)
        except Exception as e:  # noqa: BLE001
            c.fail("refused: %s: %s" % (kw, e))
    # a parameter no rank uses, without find_unused_parameters: an error
    # naming it, on every rank, and the job goes on
    model = D(Net(100 + r))
    x, y = batch(0, n)
    c.raises(RuntimeError, lambda: loss_fn(model(shard(x, r), False),
                                           shard(y, r)).backward(),
             "unused parameters", contains=("branch.weight", "branch.bias",
                                            "find_unused_parameters"))
    c.ok(model._iteration is None, "errors: the failed reduction is over")
    loss_fn(model(shard(x, r), True), shard(y, r)).backward()
    g = flat_params(model.module)
    c.ok(torch.equal(hvd.broadcast(g, 0, name="check.errors"), g),
         "errors: ranks in step after the error")
    train(c, "after_errors", n, r, steps=2)


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items()
             if name.startswith("scenario_")}


def main():
    names = sys.argv[1:] or sorted(SCENARIOS)
    hvd.init(process_sets="dynamic")
    torch.set_num_threads(1)
    r, n = hvd.rank(), hvd.size()
    c = Checker("ddp " + " ".join(names), r, n)
    for name in names:
        SCENARIOS[name](c, r, n)
    c.done()


if __name__ == "__main__":
    main()

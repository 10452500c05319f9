"""torch_cuda.py -- hora.torch on CUDA tensors (a machine with a GPU): every
collective on tensors of the rank's device, compared with the same
collective on the CPU; results stay on the input's device; in place and
async; alltoall's received_splits on the splits' device; a GPU tensor on
some ranks and a CPU one on others fails on every rank; the current stream
respected (the input is produced by work queued
on a side stream just before the call); DistributedOptimizer and
DistributedDataParallel on a CUDA model, against the CPU model's steps.
Ranks share the machine's GPUs round robin (several ranks on one GPU
included). Run by test_torch_ops.py under horarun -np 1/2 where
torch.cuda.is_available()."""
import torch

import hora.torch as hvd
from _check import Checker

hvd.init()
r, n = hvd.rank(), hvd.size()
c = Checker("torch_cuda", r, n)
dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
torch.cuda.set_device(dev)
c.ok(hvd.cuda_built(), "cuda_built() is True")


def gen(rank, case, dt=torch.float32, shape=(33, 7)):
    g = torch.Generator().manual_seed(7919 * case + rank)
    return (torch.randint(-40, 41, shape, generator=g).double() / 4).to(dt)


def same(a, b, what):
    c.ok(a.device == dev, "%s: the result is on %s, not %s"
         % (what, a.device, dev))
    c.ok(torch.equal(a.cpu(), b.cpu()), "%s: differs from the CPU's" % what)


for case, dt in enumerate([torch.float32, torch.float64, torch.float16,
                           torch.bfloat16, torch.int32, torch.int64,
                           torch.uint8]):
    x = gen(r, case).abs().to(dt) if dt == torch.uint8 else gen(r, case, dt)
    for op in (hvd.Sum, hvd.Min, hvd.Max):
        same(hvd.allreduce(x.to(dev), op=op, name="ar.%d.%d" % (case, op)),
             hvd.allreduce(x, op=op, name="arc.%d.%d" % (case, op)),
             "allreduce %s %s" % (dt, op))

x = gen(r, 100)
same(hvd.allreduce(x.to(dev), prescale_factor=2.0, postscale_factor=0.5),
     hvd.allreduce(x, prescale_factor=2.0, postscale_factor=0.5),
     "allreduce average, scaled")
y = x.to(dev)
hvd.allreduce_(y, op=hvd.Sum, name="inplace")
same(y, hvd.allreduce(x, op=hvd.Sum, name="inplace.cpu"), "allreduce_")
b = gen(r, 101).to(dev)
hvd.broadcast_(b, root_rank=n - 1, name="bc")
same(b, hvd.broadcast(gen(r, 101), root_rank=n - 1, name="bc.cpu"),
     "broadcast_")
g = gen(r, 102, shape=(r + 1, 3))
same(hvd.allgather(g.to(dev), name="ag"), hvd.allgather(g, name="ag.cpu"),
     "allgather")
a = gen(r, 103, shape=(2 * n, 3))
same(hvd.alltoall(a.to(dev), name="a2a"), hvd.alltoall(a, name="a2a.cpu"),
     "alltoall")
sp = torch.tensor([j % 2 + 1 for j in range(n)], dtype=torch.int32)
a = gen(r, 106, shape=(int(sp.sum()), 3))
out, got = hvd.alltoall(a.to(dev), splits=sp.to(dev), name="a2a.sp")
ref, ref_got = hvd.alltoall(a, splits=sp, name="a2a.sp.cpu")
same(out, ref, "alltoall with splits")
c.ok(got.device == dev and ref_got.device.type == "cpu" and
     torch.equal(got.cpu(), ref_got),
     "received_splits: on %s and %s, %s and %s" % (got.device, ref_got.device,
                                                  got.tolist(),
                                                  ref_got.tolist()))
if n > 1:
    # a GPU tensor on even ranks, a CPU tensor on odd ones: every rank fails
    try:
        hvd.allreduce(x.to(dev) if r % 2 == 0 else x, name="cpu_gpu")
        c.ok(False, "allreduce of GPU and CPU tensors did not fail")
    except hvd.HorovodInternalError as e:
        c.ok("CPU/GPU device selection" in str(e), "cpu_gpu: %s" % e)
rs = gen(r, 104, shape=(3 * n + 1, 2))
same(hvd.reducescatter(rs.to(dev), op=hvd.Sum, name="rs"),
     hvd.reducescatter(rs, op=hvd.Sum, name="rs.cpu"), "reducescatter")
big = gen(r, 105, shape=(1 << 22,))  # 16 MiB: more than the copy blocks
same(hvd.allreduce(big.to(dev), op=hvd.Sum, name="big"),
     hvd.allreduce(big, op=hvd.Sum, name="big.cpu"), "allreduce 16 MiB")
hs = [hvd.allreduce_async(gen(r, 200 + k).to(dev), op=hvd.Sum,
                          name="many.%d" % k) for k in range(100)]
for k, h in enumerate(hs):
    same(hvd.synchronize(h), hvd.allreduce(gen(r, 200 + k), op=hvd.Sum,
                                           name="many.cpu.%d" % k),
         "async %d" % k)

# the input made on a side stream, queued work still running at the call
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    z = torch.zeros(1 << 20, device=dev)
    for _ in range(50):
        z = z + 1
    got = hvd.allreduce(z, op=hvd.Sum, name="stream")
c.ok(torch.equal(got.cpu(), torch.full((1 << 20,), 50.0 * n)),
     "allreduce ordered after the work on the current stream")

# training on the GPU equals training on the CPU
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                            torch.nn.Linear(16, 1)).double()
gpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                          torch.nn.Linear(16, 1)).double().to(dev)
gpu.load_state_dict(model.state_dict())
opt_c = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[("c." + k, v) for k, v in
                                                   model.named_parameters()])
opt_g = hvd.DistributedOptimizer(torch.optim.SGD(gpu.parameters(), lr=0.1),
                                 named_parameters=[("g." + k, v) for k, v in
                                                   gpu.named_parameters()])
ddp_c = hvd.DistributedDataParallel(
    torch.nn.Linear(8, 1).double())
ddp_g = hvd.DistributedDataParallel(
    torch.nn.Linear(8, 1).double().to(dev), device_ids=[dev])
ddp_g.module.load_state_dict(ddp_c.module.state_dict())
sgd_c = torch.optim.SGD(ddp_c.parameters(), lr=0.1)
sgd_g = torch.optim.SGD(ddp_g.parameters(), lr=0.1)
for step in range(5):
    data = gen(r, 300 + step, torch.float64, (4, 8))
    for m, o, d in ((model, opt_c, data), (gpu, opt_g, data.to(dev))):
        o.zero_grad()
        m(d).square().sum().backward()
        o.step()
    for m, o, d in ((ddp_c, sgd_c, data), (ddp_g, sgd_g, data.to(dev))):
        o.zero_grad()
        m(d).square().sum().backward()
        o.step()
for (k, v), (_, w) in zip(model.state_dict().items(),
                          gpu.state_dict().items()):
    c.ok(torch.allclose(v, w.cpu(), rtol=1e-12, atol=1e-12),
         "DistributedOptimizer on the GPU: %s differs from the CPU's" % k)
for (k, v), (_, w) in zip(ddp_c.module.state_dict().items(),
                          ddp_g.module.state_dict().items()):
    c.ok(torch.allclose(v, w.cpu(), rtol=1e-12, atol=1e-12),
         "DistributedDataParallel on the GPU: %s differs from the CPU's" % k)
c.done()

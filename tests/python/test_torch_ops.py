"""test_torch_ops.py -- hora.torch: Horovod's API on torch tensors.

Multi-rank checks run workers under horarun (tests/python/workers/):
torch_ops.py (every op and dtype, async, in/out of place, strided, scale
factors, fp16 compression, autograd, broadcast_object, allgather) on 1, 2
and 4 ranks and alone; optimizer.py (DistributedOptimizer against a
reference, broadcast_parameters, broadcast_optimizer_state) on 2 and 4
ranks and alone; errors.py (mismatches and a dead rank raise
HoraInternalError naming the ranks). The rest runs in this process, a job of
one rank.
"""
import re
import warnings

import pytest
import torch

import hora
import hora.torch as hvd
import hora.torch.optimizer as optmod

NOT_INIT = "hora has not been initialized; use hvd.init()."


@pytest.fixture
def initialized():
    hvd.init()
    yield
    hvd.init()


# ---- multi-rank ----------------------------------------------------------

@pytest.mark.parametrize("np_", [None, 1, 2, 4])
def test_torch_collectives(hora_job, hora_expect_ok, np_):
    res = hora_job(np_, "torch_ops.py", timeout=150)
    hora_expect_ok(res, "torch_ops", np_)


@pytest.mark.parametrize("np_", [None, 2, 4])
def test_distributed_optimizer(hora_job, hora_expect_ok, np_):
    # Alone, HOROVOD_ELASTIC=1 makes a job of one register the hooks, as in
    # Horovod, so the hook path runs there too.
    res = hora_job(np_, "optimizer.py", timeout=150,
                   env={"HOROVOD_ELASTIC": "1"} if np_ is None else None)
    hora_expect_ok(res, "optimizer", np_)


@pytest.mark.parametrize("np_", [2, 3])
def test_mismatch_raises_hora_internal_error(hora_job, hora_expect_ok, np_):
    res = hora_job(np_, "errors.py", "mismatch", timeout=90)
    hora_expect_ok(res, "errors mismatch", np_)


@pytest.mark.parametrize("np_", [None, 2, 3])
def test_shutdown_and_init_again(hora_job, hora_expect_ok, np_):
    res = hora_job(np_, "errors.py", "reinit", timeout=90)
    hora_expect_ok(res, "errors reinit", np_)


@pytest.mark.parametrize("how,status", [("dead", 3), ("raise", 1)])
def test_dead_rank_raises_hora_internal_error(hora_job, how, status):
    """Rank 1 exits (os._exit(3)) or dies of an uncaught exception while
    ranks 0 and 2 wait for it in an allreduce."""
    res = hora_job(3, "errors.py", how, timeout=90)
    # horarun ends with the status of the failed rank, naming it
    assert res.rc == status, str(res)
    assert re.search(r"^horarun: rank 1 .*code %d" % status, res.err, re.M), \
        str(res)
    for r in (0, 2):
        lines = res.lines(r)
        dead = [l for l in lines if l.startswith("rank %d: dead: " % r)]
        later = [l for l in lines if l.startswith("rank %d: later: " % r)]
        assert dead and re.search(r"\brank 1\b", dead[0]), str(res)
        assert "wait.for.rank1" in dead[0], str(res)
        assert later and re.search(r"\brank 1\b", later[0]), str(res)
    assert "FAIL" not in res.out, str(res)


# ---- start-up ---------------------------------------------------------------

def test_queries_before_init_raise_the_message():
    hvd.shutdown()
    try:
        assert hvd.is_initialized() is False
        for q in ("rank", "size", "local_rank", "local_size", "cross_rank",
                  "cross_size", "is_homogeneous"):
            with pytest.raises(ValueError) as e:
                getattr(hvd, q)()
            assert str(e.value) == NOT_INIT, q
        for call in (lambda: hvd.allreduce(torch.ones(2)),
                     lambda: hvd.allreduce_async_(torch.ones(2)),
                     lambda: hvd.broadcast(torch.ones(2), 0),
                     lambda: hvd.arena_empty(4),
                     hvd.barrier):
            with pytest.raises(ValueError) as e:
                call()
            assert str(e.value) == NOT_INIT
        assert hvd.arena_size() == 0 and not hvd.in_arena(torch.ones(2))
    finally:
        hvd.init()
    assert hvd.is_initialized() and hvd.size() == 1


def test_api_names():
    assert hvd.__version__ == hora.__version__ == "0.1.0"
    assert hvd.HoraInternalError is hora.HoraInternalError
    assert hvd.HorovodInternalError is hora.HoraInternalError
    assert issubclass(hvd.HoraInternalError, RuntimeError)
    # Horovod's values of the reduction ops
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max,
            hvd.Product) == (0, 1, 2, 3, 4, 5)
    for name in ("init", "shutdown", "is_initialized", "rank", "size",
                 "local_rank", "local_size", "cross_rank", "cross_size",
                 "is_homogeneous", "allreduce", "allreduce_",
                 "allreduce_async", "allreduce_async_", "broadcast",
                 "broadcast_", "broadcast_async", "broadcast_async_",
                 "barrier", "poll", "synchronize", "DistributedOptimizer",
                 "broadcast_parameters", "broadcast_optimizer_state",
                 "broadcast_object", "allgather", "allgather_object",
                 "Compression", "nccl_built", "mpi_built", "gloo_built"):
        assert callable(getattr(hvd, name)) or name == "Compression", name
    assert hvd.Compression.none is not None and hvd.Compression.fp16


# ---- a CUDA tensor before the GPU engine exists ----------------------------

def test_cuda_and_nccl_built():
    # CUDA tensors are taken in every build (staged by libhora); horad has
    # no GPU engine yet
    assert hvd.cuda_built() is True
    assert not hvd.nccl_built()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("np_", [None, 2])
def test_cuda_tensors(hora_job, hora_expect_ok, np_):
    res = hora_job(np_, "torch_cuda.py", timeout=300)
    hora_expect_ok(res, "torch_cuda", np_)


def test_other_devices_and_layouts(initialized):
    with pytest.raises(ValueError, match="on device meta; hora takes CPU "
                                         "and CUDA tensors"):
        hvd.allreduce(torch.ones(2, device="meta"))
    with pytest.raises(ValueError, match="sparse"):
        hvd.allreduce(torch.eye(3).to_sparse())
    with pytest.raises(ValueError, match="Tensor type torch.BoolTensor is not "
                                         "supported"):
        hvd.allreduce(torch.ones(2, dtype=torch.bool))
    with pytest.raises(TypeError):
        hvd.allreduce_async([1.0, 2.0])


# ---- semantics in a job of one ---------------------------------------------

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]


@pytest.mark.parametrize("dt", DTYPES, ids=[str(d)[6:] for d in DTYPES])
def test_every_dtype_alone(initialized, dt):
    t = (torch.arange(12) % 5).to(dt).reshape(3, 4)
    for op in (hvd.Average, hvd.Sum, hvd.Min, hvd.Max, hvd.Product):
        out = hvd.allreduce(t, op=op)
        assert out.dtype == dt and torch.equal(out, t) and out is not t
        assert out.data_ptr() != t.data_ptr()
    s = t.t()  # not contiguous
    assert torch.equal(hvd.allreduce(s), s)
    assert torch.equal(hvd.broadcast(s, 0), s)
    assert hvd.allreduce_(s) is s


def test_in_place_and_out_of_place_alone(initialized):
    t = torch.arange(6.0)
    out = hvd.allreduce(t, op=hvd.Sum, prescale_factor=2.0,
                        postscale_factor=3.0)
    assert torch.equal(out, torch.arange(6.0) * 6) and \
        torch.equal(t, torch.arange(6.0))
    h = hvd.allreduce_async_(t, op=hvd.Sum, prescale_factor=2.0)
    assert isinstance(h, int) and hvd.poll(h) is True
    assert hvd.synchronize(h) is t and torch.equal(t, torch.arange(6.0) * 2)
    assert hvd.synchronize(h) is None
    # integer scaling truncates toward zero, as Horovod
    i = torch.tensor([-5, -3, 3, 5], dtype=torch.int32)
    assert hvd.allreduce(i, prescale_factor=0.5).tolist() == [-2, -1, 1, 2]


def test_fp16_compression_alone(initialized):
    x = torch.tensor([1.0 + 2.0 ** -12, 3.14159265], dtype=torch.float64)
    out = hvd.allreduce(x, compression=hvd.Compression.fp16)
    assert out.dtype == torch.float64
    assert torch.equal(out, x.half().double())  # travelled as float16
    assert (out - x).abs().max() <= 2.0 ** -11 * 4
    c, ctx = hvd.Compression.fp16.compress(torch.ones(2))
    assert c.dtype == torch.float16 and ctx == torch.float32
    assert hvd.Compression.fp16.decompress(c, ctx).dtype == torch.float32
    i, ctx = hvd.Compression.fp16.compress(torch.ones(2, dtype=torch.int64))
    assert i.dtype == torch.int64
    n, ctx = hvd.Compression.none.compress(x)
    assert n is x and hvd.Compression.none.decompress(n, ctx) is x


def test_allreduce_gradient_alone(initialized):
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    y = hvd.allreduce(x * 3, op=hvd.Sum)
    assert y.grad_fn is not None
    y.sum().backward()
    assert torch.equal(x.grad, torch.full((5,), 3.0, dtype=torch.float64))
    assert torch.autograd.gradcheck(
        lambda a: hvd.allreduce(a, op=hvd.Average, postscale_factor=2.0),
        (torch.randn(3, dtype=torch.float64, requires_grad=True),))


def test_optimizer_in_a_job_of_one_is_the_plain_optimizer(initialized):
    torch.manual_seed(0)
    m1 = torch.nn.Linear(3, 2)
    m2 = torch.nn.Linear(3, 2)
    m2.load_state_dict(m1.state_dict())
    o1 = hvd.DistributedOptimizer(torch.optim.SGD(m1.parameters(), lr=0.1),
                                  named_parameters=m1.named_parameters())
    o2 = torch.optim.SGD(m2.parameters(), lr=0.1)
    assert isinstance(o1, torch.optim.SGD)
    x = torch.randn(4, 3)
    for o, m in ((o1, m1), (o2, m2)):
        o.zero_grad()
        m(x).pow(2).sum().backward()
        o.step()
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(),
                                                 m2.parameters()))
    with pytest.raises(ValueError, match="unique"):
        hvd.DistributedOptimizer(torch.optim.SGD(m1.parameters(), lr=0.1),
                                 named_parameters=[("w", p)
                                                   for p in m1.parameters()])


def test_hooks_run_alone_with_elastic(initialized, monkeypatch):
    """With HOROVOD_ELASTIC=1 the hooks are registered even alone: each
    gradient's allreduce starts during backward()."""
    monkeypatch.setenv("HOROVOD_ELASTIC", "1")
    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters())
    started = []
    real = optmod._allreduce_group

    def spy(tensors, name, *args):
        started.append(name)
        return real(tensors, name, *args)
    monkeypatch.setattr(optmod, "_allreduce_group", spy)
    m(torch.randn(2, 3)).sum().backward()
    # every parameter's allreduce started inside backward(), before step()
    assert sorted(started) == sorted(n for n, _ in m.named_parameters())
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.step()
    opt.zero_grad()


def test_broadcast_helpers_alone(initialized):
    m = torch.nn.Linear(2, 2)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    hvd.broadcast_parameters(m.named_parameters(), root_rank=0)
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    o = torch.optim.Adam(m.parameters())
    hvd.broadcast_optimizer_state(o, root_rank=0)
    assert hvd.broadcast_object({"k": 1}) == {"k": 1}
    with pytest.raises(ValueError, match="root rank"):
        hvd.broadcast_object(1, root_rank=1)


def test_deadlock_names_ranks_and_shows_stacks(hora_job):
    """Ranks that allreduce in different orders: each rank's stack shows
    the line of the script where it waits, every wait fails with
    HORA_EDEADLOCK within a second or two, and horarun names each rank's
    wait."""
    res = hora_job(3, "deadlock.py", timeout=60)
    assert res.rc not in (None, 0), str(res)
    for r in range(3):
        got = [l for l in res.lines(r) if l.startswith("rank %d: deadlock: "
                                                        % r)]
        assert got, str(res)
        m = re.match(r"rank %d: deadlock: HORA_EDEADLOCK after ([0-9.]+) s: "
                     % r, got[0])
        assert m and float(m.group(1)) < 2, str(res)
        # its stack, printed by faulthandler before the wait failed
        stack = re.compile(r"^\[%d\]<stderr>:.*deadlock\.py\", line \d+ in "
                           r"stuck_in_allreduce" % r, re.M)
        assert stack.search(res.out + res.err), str(res)
    assert re.search(r"horarun: error: deadlock: rank 0 waits on allreduce "
                     r"'allreduce\.loss' \(16 B float32\), submitted by rank "
                     r"0; rank 1 waits on allreduce 'allreduce\.grad' \(16 B "
                     r"float32\), submitted by ranks 1-2; rank 2 waits on "
                     r"allreduce 'allreduce\.grad'",
                     res.err), str(res)


def test_deadlock_in_an_allgather(hora_job):
    """Rank 0 allgathers while the others allreduce: the allgather's first
    phase (its sizes) is what rank 0 waits on, and that is seen too."""
    res = hora_job(2, "deadlock.py", "allgather", timeout=60)
    assert res.rc not in (None, 0), str(res)
    for r in range(2):
        got = [l for l in res.lines(r) if l.startswith("rank %d: deadlock: "
                                                        % r)]
        assert got and "HORA_EDEADLOCK" in got[0], str(res)
    assert re.search(r"^\[0\]<stderr>:.*line \d+ in stuck_in_allgather",
                     res.out + res.err, re.M), str(res)
    assert re.search(r"horarun: error: deadlock: rank 0 waits on "
                     r"\w+ '[^']*metrics[^']*'.*; rank 1 waits on allreduce "
                     r"'allreduce\.loss'", res.err), str(res)

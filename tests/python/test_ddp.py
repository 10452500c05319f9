"""test_ddp.py -- hora.torch.DistributedDataParallel in real jobs.

    PYTHONPATH=python HORA_LIBRARY=build/lib/libhora.so \\
        /usr/bin/python3 -m pytest -q tests/python/test_ddp.py

Each test runs workers/ddp.py SCENARIO under horarun -np 2 (some also
-np 3), or alone (a job of one rank): every rank starts from weights of its
own, wraps its model and trains on its shard of each step's batch, and must
end with the parameters (float64, within 1e-10) and BatchNorm buffers that
plain torch gets in one process on the whole batch, identical on every rank.
See the worker for the scenarios.
"""
import os

import pytest

NP2 = ["basic", "adam", "view", "tiny", "nobuffers", "nosync", "unused",
       "unused_view", "errors", "arena"]
NP3 = ["basic", "unused", "pset", "errors"]


@pytest.mark.parametrize("scenario", NP2)
def test_ddp_2_ranks(hora_job, hora_expect_ok, scenario):
    res = hora_job(2, "ddp.py", scenario, timeout=180)
    hora_expect_ok(res, "ddp " + scenario, 2)


@pytest.mark.parametrize("scenario", NP3)
def test_ddp_3_ranks(hora_job, hora_expect_ok, scenario):
    res = hora_job(3, "ddp.py", scenario, timeout=180)
    hora_expect_ok(res, "ddp " + scenario, 3)


def test_ddp_arena_half(hora_job, hora_expect_ok):
    res = hora_job(2, "ddp.py", "arena_half", timeout=180,
                   env={"HORA_ARENA_SIZE": "8M"})
    hora_expect_ok(res, "ddp arena_half", 2)


def test_ddp_alone(hora_job, hora_expect_ok):
    """Without horarun: a job of one rank, where every scenario (but the
    process set, which needs a second rank) must hold as well."""
    scenarios = sorted(set(NP2) | {"pset"})
    res = hora_job(None, "ddp.py", *scenarios, timeout=180)
    hora_expect_ok(res, "ddp " + " ".join(scenarios), None)


@pytest.mark.parametrize("flag", ["--ddp", "--torch-ddp"])
def test_synthetic_benchmark_ddp(hora_job, hora_paths, flag):
    """The synthetic benchmark with hora's DistributedDataParallel, and with
    torch's over gloo on hora's ranks, runs and reports."""
    if flag == "--torch-ddp":
        dist = pytest.importorskip("torch.distributed")
        if not (dist.is_available() and dist.is_gloo_available()):
            pytest.skip("this torch has no gloo")
    # an absolute path: run_job's join with the workers' folder keeps it
    script = os.path.join(hora_paths.root, "examples", "pytorch",
                          "pytorch_synthetic_benchmark.py")
    res = hora_job(2, script, "--model", "smallcnn", "--image-size", "32",
                   "--batch-size", "4", "--num-warmup-batches", "1",
                   "--num-batches-per-iter", "2", "--num-iters", "2",
                   "--num-threads", "1", "--no-cuda", flag, timeout=180)
    assert res.rc == 0, str(res)
    mode = {"--ddp": "hvd.DistributedDataParallel",
            "--torch-ddp": "torch.nn.parallel.DistributedDataParallel"}[flag]
    wait = {"--ddp": "Wait on hora:", "--torch-ddp": "Wait on gloo:"}[flag]
    for want in ["Data parallelism: " + mode, "Iter #1:",
                 "Total img/sec on 2 CPU(s):", wait]:
        assert any(l.startswith(want) for l in res.lines(0)), (want, str(res))
    assert not res.lines(1), "only rank 0 prints\n%s" % res


def test_torch_allreduce_benchmark(hora_job, hora_paths):
    """benchmarks/torch_allreduce.py (ordinary and arena tensors) runs,
    prints its table and finds every result right."""
    script = os.path.join(hora_paths.root, "benchmarks", "torch_allreduce.py")
    res = hora_job(2, script, "-b", "64K", "-e", "4M", "-f", "64", "-w", "1",
                   "-n", "2", timeout=120)
    assert res.rc == 0, str(res)
    rows = [l.split() for l in res.lines(0) if l.strip()[:1].isdigit()]
    assert [int(r[0]) for r in rows] == [65536, 4194304], str(res)
    assert all(len(r) == 6 for r in rows), str(res)

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
import pytest

NP2 = ["basic", "adam", "view", "tiny", "nobuffers", "nosync", "unused",
       "unused_view", "errors"]
NP3 = ["basic", "unused", "pset"]


@pytest.mark.parametrize("scenario", NP2)
def test_ddp_2_ranks(hora_job, hora_expect_ok, scenario):
    res = hora_job(2, "ddp.py", scenario, timeout=180)
    hora_expect_ok(res, "ddp " + scenario, 2)


@pytest.mark.parametrize("scenario", NP3)
def test_ddp_3_ranks(hora_job, hora_expect_ok, scenario):
    res = hora_job(3, "ddp.py", scenario, timeout=180)
    hora_expect_ok(res, "ddp " + scenario, 3)


def test_ddp_alone(hora_job, hora_expect_ok):
    """Without horarun: a job of one rank, where every scenario (but the
    process set, which needs a second rank) must hold as well."""
    scenarios = sorted(set(NP2) | {"pset"})
    res = hora_job(None, "ddp.py", *scenarios, timeout=180)
    hora_expect_ok(res, "ddp " + " ".join(scenarios), None)

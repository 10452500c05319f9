"""test_adasum.py -- op=Adasum on one host: tests/python/workers/adasum.py
(every result against a reference computed in numpy, and
DistributedOptimizer(op=Adasum) against the same training simulated for
every rank) under horarun -np 1, 2 and 4; with 3 ranks it expects
NotImplementedError, as Horovod raises; hierarchical (the ranks of the
host averaged) with 3. Across hosts: tests/multihost/python.sh."""
import pytest


@pytest.mark.parametrize("np_", [1, 2, 4, 3])
def test_adasum(hora_job, hora_expect_ok, np_):
    res = hora_job(np_, "adasum.py", timeout=180)
    hora_expect_ok(res, "adasum", np_)


def test_adasum_hierarchical(hora_job, hora_expect_ok):
    res = hora_job(3, "adasum.py", env={"HORA_HIERARCHICAL_ALLREDUCE": "1"},
                   timeout=180)
    hora_expect_ok(res, "adasum", 3)
    assert "adasum: 1 checks" not in res.out, str(res)

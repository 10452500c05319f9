"""test_collectives.py -- grouped allreduce, allgather, alltoall,
reducescatter (hora.torch and numpy) with autograd and shape checks, and
join with every collective; workers/collectives.py and workers/join.py
under horarun (3 ranks give reducescatter remainders)."""
import pytest


@pytest.mark.parametrize("np_", [None, 2, 3])
def test_collectives(hora_job, hora_expect_ok, np_):
    res = hora_job(np_, "collectives.py", timeout=150)
    hora_expect_ok(res, "collectives", np_)


@pytest.mark.parametrize("np_", [None, 2, 3])
def test_join_with_every_collective(hora_job, hora_expect_ok, np_):
    res = hora_job(np_, "join.py", timeout=120)
    hora_expect_ok(res, "join", np_)

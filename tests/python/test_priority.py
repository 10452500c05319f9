"""test_priority.py -- priority= on every collective and hora.priority()
blocks (tests/python/workers/priority.py) on 2 and 3 ranks of one host: a
late allreduce of higher priority overtakes queued ones (streamed through
a small arena, not adopted into the segment), one of the same priority
does not, and bad priorities are refused. The C side and the
coordinator's order across hosts: tests/integration/priority.sh,
tests/multihost/priority.sh, unit/test_coord."""
import pytest


@pytest.mark.parametrize("np_", [2, 3])
def test_priority(hora_job, hora_expect_ok, np_):
    res = hora_job(np_, "priority.py", env={"HORA_ARENA_SIZE": "16M",
                                                 "HORA_ADOPT_SIZE": "0"},
                   timeout=150)
    hora_expect_ok(res, "priority", np_)


def test_priority_keyword_everywhere():
    import hora
    import hora.torch as hvd
    for mod in (hora, hvd):
        for n in hora._PRIORITY_OPS:
            if hasattr(mod, n):
                assert getattr(getattr(mod, n), "_hora_priority", False), n

"""test_process_sets.py -- static and dynamic process sets, two disjoint
sets in flight at once, ranks outside a set, Horovod's errors, and
init(comm=[ranks]); workers/process_sets.py under horarun."""
import pytest


@pytest.mark.parametrize("np_", [2, 3])
@pytest.mark.parametrize("mode", ["static", "mismatch", "dynamic", "comm"])
def test_process_sets(hora_job, hora_expect_ok, mode, np_):
    res = hora_job(np_, "process_sets.py", mode, timeout=120)
    hora_expect_ok(res, "process_sets " + mode, np_)

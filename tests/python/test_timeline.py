"""Horovod's timeline from hora.torch (workers/timeline.py): start and stop
at run time, and HOROVOD_TIMELINE set in the process before init."""
import pytest


@pytest.mark.parametrize("np_", [2, 3])
@pytest.mark.parametrize("mode", ["api", "env"])
def test_timeline(hora_job, hora_expect_ok, tmp_path, mode, np_):
    res = hora_job(np_, "timeline.py", mode, str(tmp_path), timeout=120)
    hora_expect_ok(res, "timeline " + mode, np_)

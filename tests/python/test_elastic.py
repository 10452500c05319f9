"""test_elastic.py -- hora.torch.elastic (Horovod's elastic API): states,
the elastic sampler, and run()'s resets, each scenario of
workers/elastic.py under horarun at 2 and 3 ranks and alone."""
import pytest

SCENARIOS = ["state", "sampler", "hosts", "failure"]


@pytest.mark.parametrize("np_", [None, 2, 3])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_elastic(hora_job, hora_expect_ok, scenario, np_):
    res = hora_job(np_, "elastic.py", scenario, timeout=120)
    hora_expect_ok(res, "elastic " + scenario, np_)

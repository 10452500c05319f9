"""test_core.py -- the hora package itself: finding libhora, start-up and
layout queries, the numpy collectives, handles, errors, installation.

Multi-rank checks run tests/python/workers/np_ops.py under horarun -np 1, 2
and 4 (and alone); the rest runs in this process, a job of one rank.
"""
import os
import shutil
import subprocess
import textwrap

import numpy as np
import pytest

import hora

NOT_INIT = "hora has not been initialized; use hvd.init()."


@pytest.fixture
def initialized():
    hora.init()
    yield
    hora.init()  # leave it initialized for the next test


# ---- multi-rank ----------------------------------------------------------

@pytest.mark.parametrize("np_", [None, 1, 2, 4])
def test_numpy_collectives(hora_job, hora_expect_ok, np_):
    """Every op and dtype, async handles, in/out of place, strided inputs,
    scale factors, broadcast from each root, broadcast_object with None on
    the other ranks, allgather, argument errors."""
    res = hora_job(np_, "np_ops.py", timeout=120)
    hora_expect_ok(res, "np_ops", np_)


# ---- start-up and queries --------------------------------------------------

QUERIES = ["rank", "size", "local_rank", "local_size", "cross_rank",
           "cross_size", "is_homogeneous"]


def test_queries_before_init_raise_the_message():
    hora.shutdown()
    try:
        assert hora.is_initialized() is False
        for q in QUERIES:
            with pytest.raises(ValueError) as e:
                getattr(hora, q)()
            assert str(e.value) == NOT_INIT, q
        for call in (lambda: hora.allreduce(np.ones(2)),
                     lambda: hora.broadcast_(np.ones(2), 0),
                     lambda: hora.allreduce_async(np.ones(2)),
                     hora.barrier):
            with pytest.raises(ValueError) as e:
                call()
            assert str(e.value) == NOT_INIT
        hora.shutdown()  # a no-op when not initialized
    finally:
        hora.init()
    assert hora.is_initialized() is True


def test_job_of_one(initialized):
    assert (hora.rank(), hora.size()) == (0, 1)
    assert (hora.local_rank(), hora.local_size()) == (0, 1)
    assert (hora.cross_rank(), hora.cross_size()) == (0, 1)
    assert hora.is_homogeneous() is True
    hora.init()  # again: a no-op
    assert hora.size() == 1
    hora.barrier()


def test_shutdown_and_init_again(initialized):
    a = np.arange(4.0)
    hora.shutdown()
    with pytest.raises(ValueError, match="not been initialized"):
        hora.allreduce(a)
    hora.init()
    assert np.array_equal(hora.allreduce(a), a)


def test_init_arguments():
    hora.shutdown()
    try:
        with pytest.raises(ValueError):
            hora.init(process_sets=[object()])
        with pytest.raises(ValueError):
            hora.init(process_sets="static")
        with pytest.raises(ValueError):
            hora.init(comm=[1])  # a job of one has rank 0 only
        with pytest.raises(ValueError):
            hora.init(comm="everyone")
        hora.init(comm=[0])  # every rank: the same as no comm
        assert (hora.rank(), hora.size()) == (0, 1)
    finally:
        hora.shutdown()
        hora.init()


def test_version_and_library(initialized):
    assert hora.__version__ == "0.1.0"
    assert hora.library_version().startswith("0.1")
    assert os.path.exists(hora.library_path()) or \
        hora.library_path().startswith("libhora")


# ---- handles and results in a job of one -----------------------------------

def test_handles(initialized):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    h1 = hora.allreduce_async(a, op=hora.Sum, name="h1")
    h2 = hora.allreduce_async_(a.copy(), op=hora.Max)
    h3 = hora.broadcast_async(a, 0)
    assert len({h1, h2, h3}) == 3
    assert all(isinstance(h, int) for h in (h1, h2, h3))
    assert hora.poll(h1) is True
    assert np.array_equal(hora.synchronize(h1), a)
    assert np.array_equal(hora.synchronize(h2), a)
    out = hora.synchronize(h3)
    assert np.array_equal(out, a) and out is not a
    assert hora.synchronize(h1) is None  # unknown handle: None, as Horovod
    with pytest.raises(ValueError):
        hora.poll(h1)
    with pytest.raises(ValueError):
        hora.poll(123456789)


def test_pending_operation_fails_at_shutdown(initialized, monkeypatch):
    # In a job of one, operations complete at once; make the handle look
    # pending to check that shutdown fails it with HoraInternalError.
    h = hora.allreduce_async(np.ones(3))
    op = hora._ops[h]
    hora.shutdown()
    op.done = False
    hora._fail_pending("hora was shut down on this rank")
    hora.init()
    with pytest.raises(hora.HoraInternalError, match="shut down") as e:
        hora.synchronize(h)
    assert isinstance(e.value, RuntimeError)
    assert e.value.code_name == "HORA_ESHUTDOWN"


def test_dtypes_and_scaling_in_one_rank(initialized):
    for dt in (np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16,
               np.float32, np.float64):
        a = (np.arange(12) % 7).astype(dt).reshape(3, 4)
        for op in (hora.Average, hora.Sum, hora.Min, hora.Max, hora.Product):
            out = hora.allreduce(a, op=op)
            assert out.dtype == a.dtype and np.array_equal(out, a)
        got = hora.allreduce(a, prescale_factor=0.5, postscale_factor=3.0)
        if np.dtype(dt).kind == "f":
            want = (a.astype(np.float64) * 0.5 * 3.0).astype(dt)
        else:
            want = np.trunc(np.trunc(a * 0.5) * 3.0).astype(dt)
        assert np.array_equal(got, want), dt


def test_non_native_byte_order(initialized):
    a = np.arange(5, dtype=">i4")
    assert np.array_equal(hora.allreduce(a, op=hora.Sum), np.arange(5))
    hora.allreduce_(a, op=hora.Sum)
    assert a.dtype == np.dtype(">i4") and np.array_equal(a, np.arange(5))


def test_errors_are_runtime_errors():
    assert issubclass(hora.HoraInternalError, RuntimeError)
    e = hora.HoraInternalError("msg", -2003, "HORA_EMISMATCH")
    assert (str(e), e.code, e.code_name) == ("msg", -2003, "HORA_EMISMATCH")


def test_broadcast_object_in_one_rank(initialized):
    obj = {"a": [1, 2], "b": None}
    assert hora.broadcast_object(obj) == obj
    assert hora.allgather_object(obj) == [obj]


# ---- finding libhora ------------------------------------------------------

def _run_py(paths, code, env, cwd=None):
    return subprocess.run([paths.python, "-c", textwrap.dedent(code)],
                          env=env, cwd=cwd or paths.root, capture_output=True,
                          text=True, timeout=60)


def test_bad_hora_library_is_a_clear_error(hora_paths):
    env = hora_paths.worker_env({"HORA_LIBRARY": "/nonexistent/libhora.so"})
    r = _run_py(hora_paths, """
        import hora
        try:
            hora.init()
        except OSError as e:
            print("OSError:", e)
        """, env)
    assert "OSError: hora: cannot load libhora.so" in r.stdout, r
    assert "HORA_LIBRARY=/nonexistent/libhora.so" in r.stdout, r


def test_found_without_hora_library(hora_paths):
    """From the source tree, without HORA_LIBRARY: the loader path, or the
    build tree next to the package."""
    env = hora_paths.worker_env()
    del env["HORA_LIBRARY"]
    r = _run_py(hora_paths, """
        import hora, numpy as np
        hora.init()
        print(hora.library_path())
        print(hora.allreduce(np.ones(2)).tolist())
        """, env, cwd="/")
    assert r.returncode == 0, r
    path, res = r.stdout.splitlines()[-2:]
    assert res == "[1.0, 1.0]"
    assert path.endswith(("libhora.so", "libhora.so.0")), path


def test_library_shipped_in_the_package(hora_paths, tmp_path):
    pkg = tmp_path / "site"
    shutil.copytree(os.path.join(hora_paths.root, "python", "hora"),
                    pkg / "hora", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(hora_paths.libhora, pkg / "hora" / "libhora.so")
    env = hora_paths.worker_env({"PYTHONPATH": str(pkg)})
    del env["HORA_LIBRARY"]
    r = _run_py(hora_paths, """
        import hora
        hora.init()
        print(hora.library_path())
        """, env, cwd=str(tmp_path))
    assert r.returncode == 0, r
    assert r.stdout.strip() == str(pkg / "hora" / "libhora.so")


def test_pip_install(hora_paths, tmp_path):
    """`pip install ./python` gives a working pure-Python package."""
    python = hora_paths.python
    if subprocess.run([python, "-m", "pip", "--version"],
                      capture_output=True).returncode != 0:
        pytest.skip("pip is not available for %s" % python)
    src = tmp_path / "src"
    shutil.copytree(os.path.join(hora_paths.root, "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "build",
                                                  "*.egg-info"))
    site = tmp_path / "site"
    r = subprocess.run([python, "-m", "pip", "install", "--quiet",
                        "--no-deps", "--no-build-isolation", "--no-index",
                        "--target", str(site), str(src)],
                       capture_output=True, text=True, timeout=120,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (site / "hora" / "__init__.py").exists()
    assert (site / "hora" / "torch" / "optimizer.py").exists()
    env = hora_paths.worker_env({"PYTHONPATH": str(site)})
    r = _run_py(hora_paths, """
        import hora, hora.torch as hvd, torch
        hvd.init()
        print(hora.__file__)
        print(hvd.__version__, hvd.allreduce(torch.ones(2)).tolist())
        """, env, cwd=str(tmp_path))
    assert r.returncode == 0, r
    assert r.stdout.splitlines()[0].startswith(str(site))
    assert r.stdout.splitlines()[1] == "0.1.0 [1.0, 1.0]"

"""conftest.py -- shared set-up of the Python tests.

    cd <repo> && PYTHONPATH=python HORA_LIBRARY=build/lib/libhora.so \\
        /usr/bin/python3 -m pytest -q tests/python

Makes the package importable from the source tree and points HORA_LIBRARY
at the build tree when they are not set, and offers `hora_job`, which runs a
worker script as a job (under horarun -np N, or alone) and returns its exit
status and output.
"""
import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
HORARUN = os.path.join(BUILD, "bin", "horarun")
LIBHORA = os.path.join(BUILD, "lib", "libhora.so")
WORKERS = os.path.join(ROOT, "tests", "python", "workers")
PYTHON = sys.executable

if os.path.join(ROOT, "python") not in [os.path.abspath(p) for p in sys.path]:
    sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("HORA_LIBRARY", LIBHORA)
# The pytest process is a job of one rank, whoever started it.
for _k in ("HORA_DAEMON_SOCKET", "HORA_RANK_TOKEN"):
    os.environ.pop(_k, None)


def hora_worker_env(extra=None):
    """The environment of a worker: the package and library of this tree,
    one compute thread per rank (2-4 ranks share a small machine)."""
    env = dict(os.environ)
    pp = os.path.join(ROOT, "python")
    parts = [os.path.abspath(p)
             for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if pp not in parts:
        parts.insert(0, pp)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["HORA_LIBRARY"] = os.path.abspath(env.get("HORA_LIBRARY", LIBHORA))
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


class JobResult:
    def __init__(self, cmd, rc, out, err, elapsed):
        self.cmd, self.rc, self.out, self.err = cmd, rc, out, err
        self.elapsed = elapsed

    def lines(self, rank=None):
        """stdout lines, without horarun's "[r]<stdout>:" prefix; only
        rank `rank`'s when given."""
        res = []
        for line in self.out.splitlines():
            if line.startswith("["):
                head, _, rest = line.partition("]<stdout>:")
                if rank is not None and head != "[%d" % rank:
                    continue
                res.append(rest)
            elif rank in (None, 0):
                res.append(line)
        return res

    def __str__(self):
        return ("command: %s\nexit status: %s after %.1f s\n--- stdout ---\n"
                "%s\n--- stderr ---\n%s" % (" ".join(self.cmd), self.rc,
                                            self.elapsed, self.out[-8000:],
                                            self.err[-8000:]))


def run_job(np_, script, *args, env=None, timeout=120):
    """Runs tests/python/workers/<script> under `horarun -np np_`, or alone
    when np_ is None. On timeout the whole process group is killed and the
    result has rc None."""
    path = os.path.join(WORKERS, script)
    cmd = [PYTHON, path] + list(args)
    if np_ is not None:
        cmd = [HORARUN, "-np", str(np_)] + cmd
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=hora_worker_env(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            out, err = proc.communicate(timeout=10)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = proc.communicate()
        rc = None
        err = (err or "") + "\n[timed out after %d s]" % timeout
    return JobResult(cmd, rc, out or "", err or "", time.time() - t0)


@pytest.fixture
def hora_job():
    """run_job(np, script, *args, env=None, timeout=120); skips when
    horarun has not been built and np is not None."""
    def run(np_, script, *args, **kw):
        if np_ is not None and not os.access(HORARUN, os.X_OK):
            pytest.skip("%s is missing: run make first" % HORARUN)
        return run_job(np_, script, *args, **kw)
    return run


def expect_all_ranks_ok(res, what, np_):
    """Asserts that a Checker-based worker passed on every rank."""
    n = np_ or 1
    assert res.rc == 0, str(res)
    for r in range(n):
        done = [l for l in res.lines(r) if l.startswith("rank %d of %d: %s: "
                                                        % (r, n, what))]
        assert done and done[-1].endswith(" 0 failures"), str(res)
    assert "FAIL" not in res.out, str(res)


@pytest.fixture
def hora_expect_ok():
    """expect_all_ranks_ok(result, what, np)"""
    return expect_all_ranks_ok


class _Paths:
    root = ROOT
    build = BUILD
    horarun = HORARUN
    libhora = LIBHORA
    python = PYTHON
    worker_env = staticmethod(hora_worker_env)


@pytest.fixture
def hora_paths():
    """The tree's paths (root, build, horarun, libhora, python) and
    worker_env(extra) -> the environment of a worker."""
    return _Paths

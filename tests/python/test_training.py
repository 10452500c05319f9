"""test_training.py -- data-parallel training with hora.torch, end to end.

    PYTHONPATH=python HORA_LIBRARY=build/lib/libhora.so \\
        /usr/bin/python3 -m pytest -q tests/python/test_training.py

Each test starts real jobs: `build/bin/horarun -np N <this python> worker.py`
(workers in tests/python/train_workers/), or the worker alone (a job of size
1), and checks what they wrote or printed.

Equivalence (train_workers/equiv.py): a float64 MLP trained 5 steps with
hvd.DistributedOptimizer, each rank on its shard of a fixed global batch of
16, must end with the parameters one process gets on the whole batch with
the plain optimizer. Averaging shard gradients and taking the gradient of the
mean loss differ only in the order of floating-point additions, so the
tolerance is EQUIV_ATOL = 1e-10 (absolute, per parameter element; the
parameters are O(1), and float64 rounding here is ~1e-15). All ranks of a
job must hold bit-identical parameters (every rank applies the same reduced
gradient). Scenarios: SGD+momentum; backward_passes_per_step=2;
gradient_predivide_factor=2.0; op=Sum; Compression.fp16 (tolerance
FP16_ATOL = 1e-3); a layer without gradient; broadcast_parameters +
broadcast_optimizer_state from rank 0 with rank-seeded weights and
differing optimizer state/lr (SGD momentum, and Adam where only rank 0 has
state).

Failure (train_workers/fail.py): rank 1 of 2 raises (or is SIGKILLed) in
the middle of training; rank 0 must get HoraInternalError naming rank 1,
horarun must exit non-zero, all within FAIL_TIMEOUT.

Examples: examples/pytorch/pytorch_synthetic_benchmark.py and
pytorch_mnist.py run briefly and print what they should.
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WORKERS = os.path.join(ROOT, "tests", "python", "train_workers")
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
HORARUN = os.path.join(BUILD, "bin", "horarun")
PYTHON = sys.executable

EQUIV_ATOL = 1e-10
# fp16 compression rounds every reduced gradient to float16 (relative error
# 2^-11); with lr 0.1, momentum 0.9 and 5 steps that moves O(1) weights by
# well under 1e-3 (measured: < 1e-4), while training moves them by > 0.1
FP16_ATOL = 1e-3
SCENARIOS = ["sgd", "bpps2", "predivide", "sum", "fp16", "unused",
             "bcast_sgd", "bcast_adam"]
FAIL_TIMEOUT = 60  # seconds: a failed job must be over well within this

if not os.access(HORARUN, os.X_OK):
    pytest.skip("%s is missing: run make first" % HORARUN,
                allow_module_level=True)


# what horarun gives a rank: a test run inside a job must not pass it on
_JOB_VARS = {p + v for p in ("HORA_", "HOROVOD_")
             for v in ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK",
                       "CROSS_SIZE", "HOSTNAME")} | {"HORA_DAEMON_SOCKET",
                                                     "HORA_RANK_TOKEN"}


def _env():
    env = {k: v for k, v in os.environ.items() if k not in _JOB_VARS}
    pp = os.path.join(ROOT, "python")
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if not any(os.path.abspath(p) == pp for p in parts):
        parts.insert(0, pp)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env.setdefault("HORA_LIBRARY", os.path.join(BUILD, "lib", "libhora.so"))
    # relative paths given by the caller must still work from another cwd
    env["HORA_LIBRARY"] = os.path.abspath(env["HORA_LIBRARY"])
    env["OMP_NUM_THREADS"] = "1"  # 2-4 ranks share 2 cores
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Result:
    def __init__(self, cmd, rc, out, err, elapsed):
        self.cmd, self.rc, self.out, self.err = cmd, rc, out, err
        self.elapsed = elapsed

    def __str__(self):
        return ("command: %s\nexit status: %s after %.1f s\n"
                "--- stdout ---\n%s\n--- stderr ---\n%s"
                % (" ".join(self.cmd), self.rc, self.elapsed,
                   self.out[-6000:], self.err[-6000:]))


def launch(np_, script, *args, timeout=90):
    """Runs `script` under horarun -np np_, or alone when np_ is None."""
    cmd = [PYTHON, script] + list(args)
    if np_ is not None:
        cmd = [HORARUN, "-np", str(np_)] + cmd
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
        r = Result(cmd, "killed", out, err, time.monotonic() - t0)
        pytest.fail("timed out after %d s (a hang)\n%s" % (timeout, r))
    return Result(cmd, p.returncode, out, err, time.monotonic() - t0)


# ---------------------------------------------------------------- equivalence

_equiv_runs = {}


def equiv_run(np_, tmp_path_factory):
    """One job per rank count runs every scenario; cached for the module."""
    if np_ not in _equiv_runs:
        out = str(tmp_path_factory.mktemp("equiv_np%s" % np_))
        r = launch(np_, os.path.join(WORKERS, "equiv.py"), "--out", out,
                   timeout=120)
        _equiv_runs[np_] = (out, r)
    out, r = _equiv_runs[np_]
    assert r.rc == 0, str(r)
    return out, r


def load(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def max_diff(a, b):
    assert sorted(a) == sorted(b)
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


def check_equivalent(out, np_, scenario):
    ref = load(os.path.join(out, "%s.ref.npz" % scenario))
    files = sorted(glob.glob(os.path.join(out, "%s.rank*.npz" % scenario)))
    assert len(files) == np_, files
    ranks = [load(f) for f in files]
    tol = FP16_ATOL if scenario == "fp16" else EQUIV_ATOL
    for r, params in enumerate(ranks):
        d = max_diff(params, ref)
        assert d <= tol, (
            "%s, %d ranks: rank %d differs from the single-process reference "
            "by %.3g (tolerance %g)" % (scenario, np_, r, d, tol))
        for k in params:
            assert np.all(np.isfinite(params[k]))
    for r in range(1, np_):
        d = max_diff(ranks[r], ranks[0])
        assert d == 0.0, ("%s, %d ranks: rank %d's parameters differ from "
                          "rank 0's by %.3g (must be identical)"
                          % (scenario, np_, r, d))
    infos = [json.load(open(os.path.join(out, "info.rank%d.json" % r)))
             for r in range(np_)]
    assert [i["rank"] for i in infos] == list(range(np_))
    assert all(i["size"] == np_ for i in infos)
    # broadcast_optimizer_state also carries options such as the lr
    lr0 = infos[0]["scenarios"][scenario]["ref_lr"]
    for i in infos:
        assert i["scenarios"][scenario]["lr"] == lr0, (scenario, infos)


@pytest.mark.parametrize("np_", [2, 4])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_equivalent_to_one_process(np_, scenario, tmp_path_factory):
    out, _ = equiv_run(np_, tmp_path_factory)
    check_equivalent(out, np_, scenario)


def test_same_script_alone_is_size_1(tmp_path_factory):
    """equiv.py without horarun: a job of size 1 (rank 0) that matches the
    reference; the np=2 and np=4 tests run the very same script."""
    out, r = equiv_run(None, tmp_path_factory)
    assert "rank 0 of 1: done" in r.out, str(r)
    for scenario in SCENARIOS:
        check_equivalent(out, 1, scenario)


def test_training_moves_the_weights(tmp_path_factory):
    """Guards the equivalence tests: 5 steps move the weights by far more
    than the tolerance (so a wrong averaging, e.g. a sum over the ranks, or
    a lost step could not pass), and after the broadcast every rank starts
    from the same weights."""
    out, _ = equiv_run(2, tmp_path_factory)
    for scenario in SCENARIOS:
        ref = load(os.path.join(out, "%s.ref.npz" % scenario))
        init0 = load(os.path.join(out, "%s.init0.npz" % scenario))
        init1 = load(os.path.join(out, "%s.init1.npz" % scenario))
        assert max_diff(ref, init0) > 1e-3, scenario
        assert max_diff(init0, init1) == 0.0, scenario


# ------------------------------------------------------------- rank failure

_fail_runs = {}


def fail_run(how):
    """rank 1 of 2 fails at step 3 (raises, or SIGKILLs itself) while rank 0
    waits for its gradients in optimizer.step(); cached per `how`."""
    if how not in _fail_runs:
        _fail_runs[how] = launch(2, os.path.join(WORKERS, "fail.py"),
                                 "--victim", "1", "--step", "3",
                                 "--how", how, timeout=FAIL_TIMEOUT)
    return _fail_runs[how]


@pytest.mark.parametrize("how", ["exception", "sigkill"])
def test_rank_failure_mid_training(how):
    """The survivor gets HoraInternalError naming rank 1 (and a later
    collective fails at once too), horarun exits non-zero, nothing hangs
    (FAIL_TIMEOUT bounds the job; it should end within seconds)."""
    r = fail_run(how)
    assert r.rc not in (0, "killed"), str(r)
    assert "FAIL" not in r.out, str(r)
    lines = [l for l in r.out.splitlines() if "caught HoraInternalError" in l]
    assert lines, "rank 0 did not get HoraInternalError\n%s" % r
    assert lines[0].startswith("[0]<stdout>:rank 0: caught"), str(r)
    assert "rank 1" in lines[0].split("caught HoraInternalError", 1)[1], (
        "HoraInternalError does not name the failed rank 1\n%s" % r)
    assert "[0]<stdout>:rank 0: later allreduce: HoraInternalError" in r.out, \
        str(r)
    if how == "exception":
        assert "[1]<stderr>:RuntimeError: injected failure on rank 1" \
            in r.err, str(r)
    else:
        assert r.rc == 137, str(r)
        assert re_search(r"rank 1 .*SIGKILL", r.err), str(r)
    assert r.elapsed < 30, "the job took %.1f s to end\n%s" % (r.elapsed, r)


def test_rank_failure_attributed_to_the_failing_rank():
    """horarun's exit status and summary are the failing rank's (rank 1,
    exit 1 from the uncaught exception), not those of the survivor that
    exited because of it."""
    r = fail_run("exception")
    assert r.rc == 1, str(r)
    assert re_search(r"^horarun: rank 1 .*code 1", r.err), str(r)


def re_search(pattern, text):
    return re.search(pattern, text, re.M) is not None


# ------------------------------------------------------------------ examples

def test_synthetic_benchmark_runs():
    script = os.path.join(ROOT, "examples", "pytorch",
                          "pytorch_synthetic_benchmark.py")
    r = launch(2, script, "--model", "smallcnn", "--image-size", "32",
               "--batch-size", "4", "--num-warmup-batches", "1",
               "--num-batches-per-iter", "2", "--num-iters", "2",
               "--num-threads", "1", "--no-cuda", "--fp16-allreduce")
    assert r.rc == 0, str(r)
    for want in ["Model: smallcnn", "Batch size: 4", "Number of CPUs: 2",
                 "Running warmup...", "Running benchmark...",
                 "Iter #0:", "Iter #1:", "Img/sec per CPU:",
                 "Total img/sec on 2 CPU(s):", "Wait on hora:"]:
        assert "[0]<stdout>:" + want in r.out, (want, str(r))
    assert "[1]<stdout>:" not in r.out, "only rank 0 prints\n%s" % r


@pytest.mark.parametrize("np_", [None, 2])
def test_mnist_example_learns(np_):
    """The MNIST-style example alone (a job of one rank) and on 2 ranks:
    the training loss averaged over the ranks falls from epoch 1 to epoch 2
    and rank 0 (only) prints the test accuracy."""
    script = os.path.join(ROOT, "examples", "pytorch", "pytorch_mnist.py")
    r = launch(np_, script, "--epochs", "2", "--train-size", "2048",
               "--test-size", "512", "--log-interval", "1000")
    assert r.rc == 0, str(r)
    prefix = "" if np_ is None else "[0]<stdout>:"
    lines = [l[len(prefix):] for l in r.out.splitlines()
             if l.startswith(prefix)]
    losses = [float(l.rsplit("average loss:", 1)[1].split()[0])
              for l in lines if "average loss:" in l]
    assert len(losses) == 2, str(r)
    assert losses[1] < losses[0], str(r)
    final = [l for l in lines if l.startswith("Final test accuracy:")]
    assert len(final) == 1, str(r)
    assert "on %d rank(s)" % (np_ or 1) in final[0], str(r)
    assert "[1]<stdout>:" not in r.out, "only rank 0 prints\n%s" % r

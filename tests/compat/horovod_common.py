"""horovod_common.py -- stands in for the helper module (test/utils/common.py)
that Horovod's framework tests import, when those tests are run against hora
by run_horovod_suite.sh. Only what the torch tests use is here; it is our
own code, written from the helpers' documented behaviour.
"""
import contextlib
import os
import shutil
import tempfile


def mpi_env_rank_and_size():
    """(rank, size) from the variables an MPI launcher sets (MPICH's PMI_*,
    Open MPI's OMPI_COMM_WORLD_*), or srun's (SLURM_PROCID, SLURM_NTASKS)
    or torchrun's (RANK, WORLD_SIZE): ranks those started join one hora
    job; (0, 1) when there are none.
    Under horarun the tests read HOROVOD_RANK/HOROVOD_SIZE instead."""
    for r, s in (("PMI_RANK", "PMI_SIZE"),
                 ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                 ("SLURM_PROCID", "SLURM_NTASKS"),
                 ("RANK", "WORLD_SIZE")):
        if r in os.environ and s in os.environ:
            return int(os.environ[r]), int(os.environ[s])
    return 0, 1


def skip_or_fail_gpu_test(test, message):
    """A test that needs a GPU fails when HOROVOD_TEST_GPU says GPUs are
    expected, and is skipped otherwise."""
    if os.environ.get("HOROVOD_TEST_GPU", "0") not in ("", "0"):
        test.fail(message)
    test.skipTest(message)


@contextlib.contextmanager
def temppath():
    """A path to a file (not yet created) in a fresh directory that is
    removed afterwards."""
    d = tempfile.mkdtemp(prefix="hora-compat-")
    try:
        yield os.path.join(d, "file")
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def tempdir():
    """A fresh directory, removed afterwards."""
    d = tempfile.mkdtemp(prefix="hora-compat-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)

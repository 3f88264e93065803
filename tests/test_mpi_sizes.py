"""Reruns every test under tests/parallel/ with 2, 3 and 4 real MPI processes."""

import os
import subprocess
import sys

import pytest

from conftest import REPO, mpiexec_path

PARALLEL = os.path.join(REPO, "tests", "parallel")


@pytest.mark.mpi
@pytest.mark.parametrize("np", [2, 3, 4])
def test_parallel_suite_under_mpiexec(np):
    env = dict(os.environ)
    env.update({
        "KHVD_TEST_WORLD": str(np),
        # A rank that fails early must not leave the others waiting forever.
        "KERASHVD_STALL_CHECK_TIME": "20",
        "KERASHVD_STALL_SHUTDOWN_TIME": "60",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
    })
    cmd = [mpiexec_path(), "-n", str(np), sys.executable, "-m", "pytest", PARALLEL, "-q", "-x",
           "-p", "no:cacheprovider", "-p", "no:randomly", "-W", "ignore::DeprecationWarning"]
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=1500)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{output[-20000:]}"
    # Each rank's pytest must have run tests and passed them.
    assert output.count(" passed") >= np, output[-5000:]

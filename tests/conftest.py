"""Shared fixtures, and the runner that reruns tests/parallel/ in fresh processes.

Tests under tests/parallel/ are written for any world size: plain `pytest` runs them as one
process (size 1), and tests/multiprocess/test_mpi_sizes.py reruns the same files under `mpiexec -n 2/3/4`;
tests/multiprocess/test_keras2.py reruns those marked `keras` with Keras 2 (`TF_USE_LEGACY_KERAS=1`).
Every rank runs the same tests in the same order, so collectives line up; a rank that fails
an assertion does so after its collectives, and the stall shutdown time set for those runs
turns any mismatch into an error instead of a hang.
"""

import os
import re
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The `slurm_cluster` fixture: a real one-host SLURM cluster (tests/fixtures/slurm_cluster.py); small
# real data sets for the recipes (tests/fixtures/datasets/fixtures.py).
pytest_plugins = ["fixtures.slurm_cluster", "fixtures.multinode_cluster",
                  "fixtures.datasets.fixtures"]


_SEGMENTS_AT_START = set()


def pytest_sessionstart(session):
    from kerashvd.launcher import shm_segments

    _SEGMENTS_AT_START.update(shm_segments.segments())


def pytest_sessionfinish(session, exitstatus):
    """Removes the MPICH shared-memory segments that ranks killed by the tests left behind.

    A later run on this machine (CI runs where the developer did) could otherwise open one in
    MPI_Init (see kerashvd/launcher/shm_segments.py).
    """
    from kerashvd.launcher import shm_segments

    shm_segments.remove_dead(_SEGMENTS_AT_START)


@pytest.fixture
def shm_segments_left():
    """A function listing the MPICH segments made since the test began that are still in
    /dev/shm after up to ``within`` seconds with no live process using them (a segment in use
    belongs to a running job: another test's, or another session's on this machine); at the
    end of the test, the dead ones go."""
    from kerashvd.launcher import shm_segments

    before = shm_segments.segments()

    def dead_since_start():
        new = shm_segments.segments() - before
        paths = {os.path.join(shm_segments.SHM_DIR, name) for name in new}
        used = {os.path.basename(path) for path in shm_segments.in_use(paths)}
        return new - used

    def left(within=5.0):
        deadline = time.monotonic() + within
        while True:
            dead = dead_since_start()
            if not dead or time.monotonic() > deadline:
                return sorted(dead)
            time.sleep(0.2)

    yield left
    shm_segments.remove_dead(before)


@pytest.fixture(scope="session")
def hvd():
    """kerashvd, initialized once for the session (size 1, or the mpiexec world)."""
    import kerashvd

    kerashvd.init()
    yield kerashvd


def mpiexec_path():
    """The mpiexec of the mpich wheel installed beside this Python."""
    candidate = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return candidate if os.path.exists(candidate) else "mpiexec"


PARALLEL = os.path.join(REPO, "tests", "parallel")
# TensorFlow's startup notices, which kerashvdrun's supervisors leave out of a rank's output
# (kerashvd/launcher/_supervisor.py): a line a user should not have to read.
TF_NOTICE = re.compile(r"absl::InitializeLog|cudart_stub\.cc|cuInit|cpu_feature_guard\.cc|"
                       r"To enable the following instructions|port\.cc:\d+\] oneDNN")


def run_parallel_tests(np, env=None, pytest_args=()):
    """Runs tests/parallel/ in ``np`` fresh processes (mpiexec for np > 1); returns the output.

    ``env`` is added to this environment (e.g. ``TF_USE_LEGACY_KERAS``, which must be set
    before TensorFlow is imported, hence the fresh processes), ``pytest_args`` to pytest's
    command line (e.g. ``["-m", "keras"]``). Fails the calling test when any rank fails or
    when fewer than ``np`` ranks report passed tests.
    """
    full_env = dict(os.environ)
    full_env.update({
        "KHVD_TEST_WORLD": str(np),
        # A rank that fails early must not leave the others waiting forever.
        "KERASHVD_STALL_CHECK_TIME": "20",
        "KERASHVD_STALL_SHUTDOWN_TIME": "60",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
    }, **(env or {}))
    launcher = [mpiexec_path(), "-n", str(np)] if np > 1 else []
    cmd = launcher + [sys.executable, "-m", "pytest", PARALLEL, "-q", "-x", *pytest_args,
                      "-p", "no:cacheprovider", "-p", "no:randomly", "-W", "ignore::DeprecationWarning"]
    proc = subprocess.run(cmd, env=full_env, cwd=REPO, capture_output=True, text=True, timeout=1500)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{output[-20000:]}"
    # Each rank's pytest must have run tests and passed them.
    assert output.count(" passed") >= np, output[-5000:]
    return output

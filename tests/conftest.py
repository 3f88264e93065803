"""Shared fixtures.

Tests under tests/parallel/ are written for any world size: plain `pytest` runs them as one
process (size 1), and tests/test_mpi_sizes.py reruns the same files under `mpiexec -n 2/3/4`.
Every rank runs the same tests in the same order, so collectives line up; a rank that fails
an assertion does so after its collectives, and the stall shutdown time set for those runs
turns any mismatch into an error instead of a hang.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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

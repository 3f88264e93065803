"""Reruns every test under tests/parallel/ with 2, 3 and 4 real MPI processes."""

import pytest

from conftest import run_parallel_tests


@pytest.mark.mpi
@pytest.mark.parametrize("np", [2, 3, 4])
def test_parallel_suite_under_mpiexec(np):
    run_parallel_tests(np)

"""Reruns the tests under tests/parallel/ with 2, 3 and 4 real MPI processes.

At 2 and 3 ranks everything runs. At 4 ranks (twice the cores of a CI machine) the Keras
tests are left out: they exercise the same rank-count-independent Python code as at 2 and 3
ranks and took about 110 of that run's 150 s, while the collectives and the engine, whose
splits, fusion and reduction order do depend on the size, all run.
"""

import pytest

from conftest import run_parallel_tests


@pytest.mark.mpi
@pytest.mark.parametrize("np", [2, 3, 4])
def test_parallel_suite_under_mpiexec(np):
    run_parallel_tests(np, pytest_args=["-m", "not keras"] if np == 4 else ())

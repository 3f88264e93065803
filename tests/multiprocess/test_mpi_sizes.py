"""Reruns the tests under tests/parallel/ with 2, 3 and 4 real MPI processes.

At 2 ranks everything runs. At 3 and 4 ranks (4 is twice the cores of a CI machine) the
collectives and the engine, whose splits, fusion and reduction order depend on the size, all
run; of the Keras tests, which exercise rank-count-independent Python code already run at 1
and 2 ranks, only those marked ``sizes`` run at 3 ranks (uneven shards, validation metrics
and batch statistics over a world that does not divide the data), and none at 4. The Keras
tests took about 160 s of a CI machine's 206 s at 3 ranks and 110 of 150 s at 4.
"""

import pytest

from conftest import run_parallel_tests

SELECTION = {2: (), 3: ["-m", "not keras or sizes"], 4: ["-m", "not keras"]}


@pytest.mark.mpi
@pytest.mark.parametrize("np", sorted(SELECTION))
def test_parallel_suite_under_mpiexec(np):
    run_parallel_tests(np, pytest_args=SELECTION[np])

"""Split worlds: a launcher that starts N processes each alone in its MPI world is an error.

The environments below are the ones measured on the test SLURM cluster (tests/cluster/test_slurm.py
runs the real launches); here the rule itself, and init() raising in a real process.
"""

import os
import subprocess
import sys

import pytest

from kerashvd.runtime.launch_env import check_world_size

# Variables per launch, as SLURM 22.05 and MPICH hydra set them on the test cluster.
BATCH_SCRIPT = {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4", "SLURM_PROCID": "0"}
SRUN_PLAIN = dict(BATCH_SCRIPT, SLURM_STEP_ID="0", SLURM_STEP_NUM_TASKS="4", SLURM_PROCID="1")
SRUN_PMI2 = dict(SRUN_PLAIN, SLURM_MPI_TYPE="pmi2", PMI_SIZE="4", PMI_RANK="1", PMI_FD="11")
# hydra's srun starts one proxy per node: the step has 1 task; PMI_SIZE is the world.
HYDRA_IN_ALLOCATION = dict(BATCH_SCRIPT, SLURM_STEP_ID="1", SLURM_STEP_NUM_TASKS="1",
                           SLURM_NTASKS="1", PMI_SIZE="2", PMI_RANK="0")


@pytest.mark.parametrize("environ, mpi_size", [
    ({}, 1),                                 # plain python
    (BATCH_SCRIPT, 1),                       # python in an sbatch script, or a notebook kernel
    (SRUN_PMI2, 4),                          # srun --mpi=pmi2 -n 4
    (HYDRA_IN_ALLOCATION, 2),                # kerashvdrun / mpiexec inside an allocation
    (dict(SRUN_PLAIN, SLURM_STEP_NUM_TASKS="1"), 1),          # srun -n 1
    (dict(SRUN_PLAIN, PMI_SIZE="1"), 1),     # mpiexec -n 1 inside an srun -n 4 step
    ({"OMPI_COMM_WORLD_SIZE": "1"}, 1),
], ids=["none", "batch", "srun-pmi2", "hydra-in-allocation", "srun-n1", "mpiexec-n1-in-step",
        "ompi-n1"])
def test_consistent_launches_are_not_errors(environ, mpi_size):
    check_world_size(mpi_size, environ)


@pytest.mark.parametrize("environ, expected", [
    (SRUN_PLAIN, ["started 4 processes (SLURM_STEP_NUM_TASKS=4)", "srun --mpi=pmi2 -n 4",
                  "SLURM_MPI_TYPE=pmi2 before srun", "kerashvdrun -np 4",
                  "(the cluster's MpiDefault is not pmi2)"]),
    (dict(SRUN_PLAIN, SLURM_MPI_TYPE="pmix"), ["SLURM_MPI_TYPE=pmix is not a PMI",
                                               "srun --mpi=pmi2 -n 4"]),
    ({"OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_RANK": "2"},
     ["started 3 processes (OMPI_COMM_WORLD_SIZE=3)", "Open MPI's mpirun",
      "kerashvdrun -np 3", "under SLURM, use srun --mpi=pmi2."]),
    ({"MV2_COMM_WORLD_SIZE": "2"}, ["MVAPICH's mpirun_rsh", "kerashvdrun -np 2"]),
    (dict(SRUN_PMI2, PMI_SIZE="4"), ["(PMI_SIZE=4)", "did not join it"]),
], ids=["srun-plain", "srun-pmix", "openmpi", "mvapich", "pmi-not-joined"])
def test_split_world_error_names_the_launcher_and_the_fix(environ, expected):
    with pytest.raises(RuntimeError) as error:
        check_world_size(1, environ)
    message = str(error.value)
    assert "world of its own (size 1)" in message
    for text in expected:
        assert text in message, message


def test_init_raises_and_stays_uninitialized_in_a_split_world():
    """A real process that Open MPI's mpirun would have started as rank 2 of 3."""
    code = (
        "import kerashvd as hvd\n"
        "for attempt in range(2):\n"
        "    try:\n"
        "        hvd.init()\n"
        "    except RuntimeError as err:\n"
        "        print('error:', err)\n"
        "    print('initialized:', hvd.is_initialized())\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "SLURM_"))}
    env.update(OMPI_COMM_WORLD_SIZE="3", OMPI_COMM_WORLD_RANK="2")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 4, proc.stdout
    for error, state in (lines[0:2], lines[2:4]):
        assert error.startswith("error: kerashvd.init(): the launcher started 3 processes "
                                "(OMPI_COMM_WORLD_SIZE=3)"), error
        assert state == "initialized: False"
